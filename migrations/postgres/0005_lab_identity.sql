-- The lab's own identity: made once, by the first server that migrates the
-- database, and the same for every host of the lab whichever address
-- reaches this database. Two labs differ in it whatever their databases are
-- named. The lab's claim of its Redis database, its broker queues and
-- streams, and each message it publishes go by it. `DELETE /lab/data`
-- leaves it.
CREATE TABLE lab_identity (
    one        SMALLINT    NOT NULL PRIMARY KEY DEFAULT 1 CHECK (one = 1),
    id         CHAR(32)    NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

INSERT INTO lab_identity (one, id) VALUES (1, replace(gen_random_uuid()::text, '-', ''));
