-- The limited drop's reservation gate (seed 000, REDIS_LUA_GATE): in one
-- script, the switch -> the idempotency marker -> the per-member limit ->
-- decrement-if-positive.
--
-- KEYS[1] coupon:gate:{couponId}:remaining          the drop's stock
-- KEYS[2] coupon:gate:{couponId}:limit              coupons one member may hold
-- KEYS[3] coupon:gate:{couponId}:buyer:{memberId}   coupons this member holds
-- KEYS[4] coupon:gate:{couponId}:reserved:{key}     the idempotency marker
-- KEYS[5] coupon:gate:{couponId}:epoch              the coupon row's version
--                                                   the stock was set from
-- KEYS[6] coupon:gate:{couponId}:switch             'off' while switched off
-- ARGV[1] quantity  ARGV[2] memberId
--
-- Returns {verdict, epoch}: 1 Admitted, 2 AlreadyReserved, 0 SoldOut,
-- 3 PerUserLimitExceeded; -1 the drop is not seeded (the caller sets it from
-- the rows and runs this again); -2 the gate is switched off (the caller
-- serves the request by the database). The seed's sketch reads a missing
-- stock as -1 and answers SoldOut; an unseeded drop is not a sold-out one,
-- so it gets its own answer here.
if redis.call('GET', KEYS[6]) == 'off' then
  -- What is sold while the gate is off is sold by the database alone, so
  -- the stock stops being the truth now: dropped in the same step that
  -- sends the first request past it, the gate is set from the rows again
  -- when it is switched back on.
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[5])
  return {-2, 0}
end
local remaining = redis.call('GET', KEYS[1])
local limit = redis.call('GET', KEYS[2])
local epoch = redis.call('GET', KEYS[5])
if not remaining or not limit or not epoch then
  return {-1, 0}
end
epoch = tonumber(epoch)
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {2, epoch}
end
local quantity = tonumber(ARGV[1])
local held = tonumber(redis.call('GET', KEYS[3]) or '0')
if held + quantity > tonumber(limit) then
  return {3, epoch}
end
if tonumber(remaining) < quantity then
  return {0, epoch}
end
redis.call('DECRBY', KEYS[1], quantity)
redis.call('INCRBY', KEYS[3], quantity)
-- The marker remembers whose reservation it is and its size, so a cancel
-- restores exactly what this reservation took.
redis.call('SET', KEYS[4], ARGV[2] .. ':' .. ARGV[1])
-- The member's count and the marker expire with the drop's stock, so a
-- re-seeded drop never meets counts left over from the last one.
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('PEXPIRE', KEYS[3], ttl)
  redis.call('PEXPIRE', KEYS[4], ttl)
end
return {1, epoch}
