-- A canary's pass holds for the engine settings it ran under: the same
-- component keeps its claims differently with MariaDB's
-- innodb_snapshot_isolation on or off, so a pass is remembered per
-- settings (as `GET /lab/strategies` names them: `name=value`, comma
-- separated). Passes remembered before this migration ran under settings
-- nobody recorded: they match none, and those components prove themselves
-- once more.
ALTER TABLE canary_passes
    ADD COLUMN engine_settings VARCHAR(255) NOT NULL DEFAULT '',
    DROP PRIMARY KEY,
    ADD PRIMARY KEY (sha256, engine_settings);
