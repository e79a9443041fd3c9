-- The limited drop (seed 000): coupons one member may hold. The default of 1
-- is the lab's one-coupon-per-member invariant; the REDIS_LUA_GATE component
-- copies the value into Redis when it seeds the drop.
ALTER TABLE coupons ADD COLUMN per_member_limit BIGINT NOT NULL DEFAULT 1;
