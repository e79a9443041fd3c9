-- The REDIS_LUA reservation (stage 3; also the first step of stages 4-6).
-- Checks in the seed's order, atomically: already reserved -> sold out -> reserve.
--
-- KEYS[1] coupon:issued:{couponId}  SET of reserved members
-- KEYS[2] coupon:total:{couponId}   the coupon's total
-- ARGV[1] memberId
--
-- REDIS_LUA_SHARDED runs this same script on one shard of the stock: KEYS[1]
-- the shard's set, KEYS[2] the shard's part of the total (the contract's
-- keys::shard_issued and keys::shard_stock, which share a hash tag).
--
-- Returns 1 reserved, 0 sold out, 2 already reserved,
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
redis.call('SADD', KEYS[1], ARGV[1])
return 1
