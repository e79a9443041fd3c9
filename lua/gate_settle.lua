-- Brings the limited drop's gate (seed 000, REDIS_LUA_GATE) up to a
-- confirm that found the coupon row's version no longer the one the gate's
-- stock was set at: a sale that committed, or one the database refused as
-- sold out.
--
-- KEYS[1] coupon:gate:{couponId}:remaining
-- KEYS[2] coupon:gate:{couponId}:limit
-- KEYS[3] coupon:gate:{couponId}:epoch
-- KEYS[4] coupon:gate:{couponId}:buyer:{memberId}
-- KEYS[5] coupon:gate:{couponId}:reserved:{key}
-- ARGV[1] the coupon row's version the confirm read  ARGV[2] memberId
-- ARGV[3] 1 the sale committed, 0 the database refused it
--
-- Returns 1 the sale was counted in, 2 the stock was dropped (the next
-- request sets it from the rows), 3 the stock is up to date already, 0
-- there was no stock to bring up to date.
local epoch = redis.call('GET', KEYS[3])
if not epoch then
  return 0
end
if epoch == ARGV[1] and ARGV[3] == '0' then
  -- Set from the rows after this request reserved: nothing was sold.
  return 3
end
if epoch == ARGV[1] then
  -- Set from the rows after this request reserved and before its sale
  -- committed (the setter held the row, the sale waited for it): the rows
  -- it counted did not have this sale.
  if tonumber(redis.call('GET', KEYS[1]) or '0') > 0 then
    redis.call('DECRBY', KEYS[1], 1)
  end
  -- A marker still there still holds the member's count: the gate was
  -- set again over the reservation (switched off and on), not emptied.
  if redis.call('EXISTS', KEYS[5]) == 0 then
    redis.call('INCRBY', KEYS[4], 1)
    redis.call('SET', KEYS[5], ARGV[2] .. ':1')
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl > 0 then
      redis.call('PEXPIRE', KEYS[4], ttl)
      redis.call('PEXPIRE', KEYS[5], ttl)
    end
  end
  return 1
end
-- The row moved past the stock without it: sales made by the database
-- path (or another method) while the gate could not be asked, or a setting
-- whose commit failed. The stock no longer tells what is left.
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 2
