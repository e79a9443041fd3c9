-- REDIS_SPIN_LOCK's release: delete the lock only if this call still holds
-- it. A lease that ran out may have handed the lock to another request,
-- whose lock a plain DEL would delete.
--
-- KEYS[1] coupon:lock:{couponId}  the lock, its value the holder's token
-- ARGV[1] the token this call set
--
-- Returns 1 when released, 0 when the lock was no longer this call's.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
