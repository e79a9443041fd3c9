-- REDIS_PUBSUB_LOCK's lock, as Redisson takes it: a hash of the holder's
-- token and its hold count, with a lease. Taken when nobody holds it, or
-- again by its own holder (a reentrant hold).
--
-- KEYS[1] coupon:lock:{couponId}  the lock
-- ARGV[1] the lease, in ms
-- ARGV[2] the holder's token
--
-- Returns nil when taken, or else the ms left of the holder's lease: how
-- long a waiter may have to wait for the unlock.
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('HEXISTS', KEYS[1], ARGV[2]) == 1 then
  redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return nil
end
return redis.call('PTTL', KEYS[1])
