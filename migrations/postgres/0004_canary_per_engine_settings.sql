-- A canary's pass holds for the engine settings it ran under: the same
-- component can keep its claims under one setting and not under another, so
-- a pass is remembered per settings (as `GET /lab/strategies` names them:
-- `name=value`, comma separated). Passes remembered before this migration ran
-- under settings nobody recorded: they match none, and those components prove
-- themselves once more.
ALTER TABLE canary_passes
    ADD COLUMN engine_settings VARCHAR(255) NOT NULL DEFAULT '',
    DROP CONSTRAINT canary_passes_pkey,
    ADD CONSTRAINT canary_passes_pkey PRIMARY KEY (sha256, engine_settings);
