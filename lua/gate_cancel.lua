-- Cancels one reservation of the limited drop (seed 000, REDIS_LUA_GATE):
-- restores the stock and the member's count, only while the reservation's
-- idempotency marker exists, and deletes the marker, so a second cancel
-- (or a cancel racing it) changes nothing.
--
-- KEYS[1] coupon:gate:{couponId}:remaining
-- KEYS[2] coupon:gate:{couponId}:buyer:{memberId}
-- KEYS[3] coupon:gate:{couponId}:reserved:{key}
-- ARGV[1] memberId
-- ARGV[2] 1 to give the unit back to the stock; 0 when the database had no
--         stock for it (SOLD_OUT_AT_DB), so the stock drains to what the
--         database can issue instead of admitting the next request in vain
--
-- Returns 1 restored, 0 nothing to cancel: no marker, or the marker is
-- another member's (a key never cancels someone else's reservation).
local marker = redis.call('GET', KEYS[3])
if not marker then
  return 0
end
local member, quantity = string.match(marker, '^(%d+):(%d+)$')
if member ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[3])
-- A drop whose stock expired is seeded afresh from the database; creating
-- the key here would leave a stock without a time to live.
if ARGV[2] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('INCRBY', KEYS[1], quantity)
end
if redis.call('DECRBY', KEYS[2], quantity) <= 0 then
  redis.call('DEL', KEYS[2])
end
return 1
