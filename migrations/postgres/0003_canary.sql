-- The canary (a new or changed component proves its claims before it
-- serves): the coupons it runs on are scratch coupons, which no listing,
-- result or figure shows; and the components that passed are remembered by
-- the sha256 of their file, so a restart does not run their canary again.
ALTER TABLE coupons ADD COLUMN scratch BOOLEAN NOT NULL DEFAULT FALSE;

CREATE TABLE canary_passes (
    sha256    CHAR(64)     NOT NULL,
    method    VARCHAR(64)  NOT NULL,
    passed_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
    -- The canary's report (JSON), shown again after a restart.
    report    TEXT         NOT NULL,
    CONSTRAINT canary_passes_pkey PRIMARY KEY (sha256)
);
