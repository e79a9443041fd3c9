-- The lab's own identity: made once, by the first server that migrates the
-- database, and the same for every host of the lab whichever address or
-- node reaches this database (a Galera cluster replicates it). Two labs
-- differ in it whatever their databases are named. The lab's claim of its
-- Redis database, its broker queues and streams, and each message it
-- publishes go by it. `DELETE /lab/data` leaves it.
CREATE TABLE lab_identity (
    one        TINYINT     NOT NULL PRIMARY KEY DEFAULT 1 CHECK (one = 1),
    id         CHAR(32)    NOT NULL,
    created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3)
) ENGINE = InnoDB;

INSERT INTO lab_identity (one, id) VALUES (1, LOWER(MD5(CONCAT(UUID(), RAND(), SYSDATE(6)))));
