-- Sets the limited drop's stock if it is not set yet (seed 000,
-- REDIS_LUA_GATE), the last step of setting the gate from the rows: the
-- members' counts are set before it (gate_buyers.lua), so nobody is
-- admitted before they are. Running it again (a retried deploy, two servers
-- starting together) keeps the stock and every reservation taken from it.
--
-- KEYS[1] coupon:gate:{couponId}:remaining
-- KEYS[2] coupon:gate:{couponId}:limit
-- KEYS[3] coupon:gate:{couponId}:epoch
-- ARGV[1] quantity  ARGV[2] perMemberLimit  ARGV[3] ttlSeconds
-- ARGV[4] the coupon row's version the stock was counted at
--
-- Returns {1, stock} when it seeded, {0, stock left} when it was seeded already.
if redis.call('EXISTS', KEYS[3]) == 1 then
  return {0, tonumber(redis.call('GET', KEYS[1]) or '0')}
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[3])
redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[3])
redis.call('SET', KEYS[3], ARGV[4], 'EX', ARGV[3])
return {1, tonumber(ARGV[1])}
