-- Sets members' counts of the limited drop from the issue rows (seed 000,
-- REDIS_LUA_GATE), before the stock is set, while the setter holds the
-- coupon row's lock: one page of buyers a call.
--
-- KEYS[n] coupon:gate:{couponId}:buyer:{memberId}
-- ARGV[1] ttlSeconds  ARGV[n + 1] the rows KEYS[n]'s member holds
--
-- A count already higher is kept: it holds a reservation whose confirm has
-- not committed yet, which gives the count back itself if it fails.
-- Returns how many counts it set.
local set = 0
for i, key in ipairs(KEYS) do
  local rows = tonumber(ARGV[i + 1])
  if tonumber(redis.call('GET', key) or '0') < rows then
    redis.call('SET', key, rows, 'EX', ARGV[1])
    set = set + 1
  end
end
return set
