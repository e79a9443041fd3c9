-- Seeds the limited drop if it is not seeded yet (seed 000, REDIS_LUA_GATE):
-- SET NX of the stock, so running it again (a retried deploy, two servers
-- starting together) keeps the stock and every reservation taken from it.
-- The per-member limit is set with the stock; the members' counts start
-- absent (zero) and are given the stock's time to live as they are created.
--
-- KEYS[1] coupon:gate:{couponId}:remaining
-- KEYS[2] coupon:gate:{couponId}:limit
-- ARGV[1] quantity  ARGV[2] perMemberLimit  ARGV[3] ttlSeconds
--
-- Returns {1, stock} when it seeded, {0, stock left} when it was seeded already.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[3]) then
  redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
  return {1, tonumber(ARGV[1])}
end
return {0, tonumber(redis.call('GET', KEYS[1]))}
