-- Sets the limited drop's stock again from the rows (REDIS_LUA_GATE's
-- reconcile), over a stock that disagrees with them: Redis lost sales the
-- rows hold (a failover promoted a replica they had not reached). The
-- members' counts are raised before it (gate_buyers.lua), and the setter
-- holds the coupon row's lock, whose version it moved on: a reservation
-- taken from the old stock confirms past the new epoch and is counted in
-- then (gate_settle.lua).
--
-- KEYS[1] coupon:gate:{couponId}:remaining
-- KEYS[2] coupon:gate:{couponId}:limit
-- KEYS[3] coupon:gate:{couponId}:epoch
-- ARGV[1] stock  ARGV[2] perMemberLimit  ARGV[3] the coupon row's new version
-- ARGV[4] ttlSeconds, when the stock has no time to live left to keep
--
-- Returns the stock set.
local ttl = redis.call('PTTL', KEYS[1])
if ttl <= 0 then
  ttl = tonumber(ARGV[4]) * 1000
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('SET', KEYS[2], ARGV[2], 'PX', ttl)
redis.call('SET', KEYS[3], ARGV[3], 'PX', ttl)
return tonumber(ARGV[1])
