-- REDIS_PUBSUB_LOCK's release: one hold less, and at the last one the lock
-- deleted and the unlock published to the requests waiting for it.
--
-- KEYS[1] coupon:lock:{couponId}  the lock
-- KEYS[2] coupon:lock:channel:{couponId}  the channel its waiters hear
--   (given as a key so that a cluster runs the script where they hash)
-- ARGV[1] the lease, in ms, renewed for a hold that remains
-- ARGV[2] the holder's token
--
-- Returns 1 when released, 0 when a hold remains, nil when the lock is
-- not this holder's any more: its lease ran out while it worked.
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then
  return nil
end
if redis.call('HINCRBY', KEYS[1], ARGV[2], -1) > 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', KEYS[2], 'unlocked')
return 1
