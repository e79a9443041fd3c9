-- The lab's three tables (seed 004): members, coupons with their counters,
-- and one row per coupon actually issued.

CREATE TABLE members (
    id         BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name       VARCHAR(64) NOT NULL,
    created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE = InnoDB;

CREATE TABLE coupons (
    id           BIGINT       NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name         VARCHAR(100) NOT NULL,
    total_count  INT          NOT NULL,
    issued_count INT          NOT NULL DEFAULT 0,
    -- Optimistic locking (stage 2): UPDATE ... WHERE version = ?.
    version      BIGINT       NOT NULL DEFAULT 0,
    created_at   DATETIME(3)  NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE = InnoDB;

-- coupon_id deliberately has no foreign key: InnoDB would take a shared lock on
-- the coupon row for every INSERT here, and the UPDATE of issued_count that
-- follows in the same transaction would then deadlock against every other
-- concurrent issue of the same coupon. The strategies read the coupon first.
-- member_id keeps its foreign key: an unknown member fails the INSERT (1452).
CREATE TABLE coupon_issues (
    id        BIGINT      NOT NULL AUTO_INCREMENT PRIMARY KEY,
    coupon_id BIGINT      NOT NULL,
    member_id BIGINT      NOT NULL,
    issued_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    UNIQUE KEY uk_coupon_issues_coupon_member (coupon_id, member_id),
    CONSTRAINT fk_coupon_issues_member FOREIGN KEY (member_id) REFERENCES members (id)
) ENGINE = InnoDB;
