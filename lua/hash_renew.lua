-- REDIS_PUBSUB_LOCK's watchdog: the host runs it every third of the lease
-- while the holder works, and stops when it answers 0.
--
-- KEYS[1] coupon:lock:{couponId}  the lock
-- ARGV[1] the lease, in ms
-- ARGV[2] the holder's token
--
-- Returns 1 when the lease was renewed, 0 when the lock is not this
-- holder's any more.
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0
