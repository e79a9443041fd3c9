-- Write-behind's reconcile (stages 9-10): puts back into the reservation
-- set the members whose issue rows exist but whose reservations Redis lost
-- (a failover promoted a replica they had not reached), so Redis, the
-- source of truth here, stops selling units the rows already hold. One
-- script: no reservation is decided between the set's size before, the
-- members put back, and its size after.
--
-- KEYS[1] coupon:issued:{couponId}  SET of reserved members
-- KEYS[2] coupon:total:{couponId}   the coupon's total
-- ARGV[1] the coupon's total, from its row (set if Redis lost it)
-- ARGV[2..] members with an issue row the set lacked when it was read
--
-- Returns {size before, size after, total, members put back...}.
local before = redis.call('SCARD', KEYS[1])
local total = redis.call('GET', KEYS[2])
if not total then
  total = ARGV[1]
  redis.call('SET', KEYS[2], total)
end
local reply = {before, 0, tonumber(total)}
for i = 2, #ARGV do
  if redis.call('SADD', KEYS[1], ARGV[i]) == 1 then
    reply[#reply + 1] = tonumber(ARGV[i])
  end
end
reply[2] = redis.call('SCARD', KEYS[1])
return reply
