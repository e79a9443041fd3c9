-- REDIS_INCR's undo: the member's reservation and its unit of the counter,
-- together and once (an undo that runs twice gives back nothing more).
--
-- KEYS[1] coupon:issued:{couponId}  SET of reserved members
-- KEYS[2] coupon:count:{couponId}   the counter INCR took a unit from
-- ARGV[1] memberId
--
-- Returns 1 when it gave back, 0 when the member held no reservation.
if redis.call('SREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('DECR', KEYS[2])
  return 1
end
return 0
