-- REDIS_STREAM_ATOMIC (stage 6) and the write-behind methods (stages 9-10):
-- the reservation and the stream entry in one script, so no crash can leave
-- a reservation without its entry.
-- Checks in the seed's order: already reserved -> sold out -> XADD -> SADD.
--
-- KEYS[1] coupon:issued:{couponId}  SET of reserved members
-- KEYS[2] coupon:total:{couponId}   the coupon's total
-- KEYS[3] coupon:issue:stream:{couponId} (stage 6) or
--         coupon:wb:stream:{couponId} (stages 9-10), the coupon's stream
-- ARGV[1] memberId  ARGV[2] couponId  ARGV[3] method  ARGV[4] acceptedAt (ms)
--
-- Returns 1 reserved and queued, 0 sold out, 2 already reserved,
-- -1 the total is not in Redis (the caller warms it from the DB and retries).
local total = redis.call('GET', KEYS[2])
if not total then
  return -1
end
if redis.call('SISMEMBER', KEYS[1], ARGV[1]) == 1 then
  return 2
end
if redis.call('SCARD', KEYS[1]) >= tonumber(total) then
  return 0
end
redis.call('XADD', KEYS[3], '*', 'memberId', ARGV[1], 'couponId', ARGV[2], 'method', ARGV[3], 'acceptedAt', ARGV[4])
redis.call('SADD', KEYS[1], ARGV[1])
return 1
