//! What each engine's isolation levels allow, measured here: the cases of
//! Kleppmann's Hermitage (github.com/ept/hermitage), re-expressed, run on
//! real sessions of MariaDB (with and without `innodb_snapshot_isolation`)
//! and PostgreSQL. A step is known to be blocked when the engine says its
//! session waits for a lock (`information_schema.INNODB_TRX`,
//! `pg_stat_activity`), not after a sleep. Each test asserts the table of
//! its engine and prints it. On the Galera cluster each session is on a
//! node of its own.

mod agreement;
mod cases;
mod session;

use std::fmt::Write as _;

use cases::CASES;
use session::{Engine, Run};

/// The levels measured on each engine, and what each case must come to
/// there: `true` where the level prevents the anomaly.
type Expected = [(&'static str, [bool; 11]); 3];

const Y: bool = true;
const N: bool = false;

/// Hermitage's MySQL/InnoDB rows, which MariaDB's InnoDB matches; its
/// repeatable read prevents PMP and G-single only for plain (read-only)
/// reads: a write reads the latest row (G-single, writing).
const MARIADB: Expected = [
    ("READ COMMITTED", [Y, Y, Y, Y, Y, N, N, N, N, N, N]),
    ("REPEATABLE READ", [Y, Y, Y, Y, Y, Y, N, Y, N, N, N]),
    ("SERIALIZABLE", [Y; 11]),
];

/// With `innodb_snapshot_isolation=ON` a write to a row changed since the
/// transaction's snapshot fails (error 1020): no lost update and no read
/// skew through a write at repeatable read. Write skew and anti-dependency
/// cycles remain.
const MARIADB_SNAPSHOT_ISOLATION: Expected = [
    ("READ COMMITTED", [Y, Y, Y, Y, Y, N, N, N, N, N, N]),
    ("REPEATABLE READ", [Y, Y, Y, Y, Y, Y, Y, Y, Y, N, N]),
    ("SERIALIZABLE", [Y; 11]),
];

/// Hermitage's PostgreSQL rows: repeatable read is snapshot isolation,
/// serializable is SSI.
const POSTGRES: Expected = [
    ("READ COMMITTED", [Y, Y, Y, Y, Y, N, N, N, N, N, N]),
    ("REPEATABLE READ", [Y, Y, Y, Y, Y, Y, Y, Y, Y, N, N]),
    ("SERIALIZABLE", [Y; 11]),
];

/// The three sessions on the three nodes of `cargo xtask galera up`, each
/// waiting for what the cluster committed before its statements. A row
/// lock is its node's: a writer no longer waits for another node's, and
/// one of two that wrote a row is refused at the other's commit (its lock
/// brute-force aborted by the other's write set, or its own commit failing
/// certification). So the lost update (P4) is refused at every level,
/// which one node's READ COMMITTED and REPEATABLE READ allow, and a write
/// skew (G2-item, G2) commits at READ COMMITTED and REPEATABLE READ as on
/// one node. At SERIALIZABLE a plain read's shared lock is its node's too,
/// and what keeps a write skew out is a race: the first committer's write
/// set, applied on the second's node, aborts it for the lock its read
/// holds, unless its own COMMIT was certified first (no key in common).
/// The cells of [`GALERA_RACES`] may come out either way.
const GALERA: Expected = [
    ("READ COMMITTED", [Y, Y, Y, Y, Y, N, Y, N, N, N, N]),
    ("REPEATABLE READ", [Y, Y, Y, Y, Y, Y, Y, Y, N, N, N]),
    ("SERIALIZABLE", [Y; 11]),
];

/// At SERIALIZABLE, the cases a race decides on the cluster: a shared
/// lock of one node against the other's write set, or a gap lock against
/// its insert (prevented in every run here).
const GALERA_RACES: [(&str, &str); 3] = [
    ("SERIALIZABLE", "PMP"),
    ("SERIALIZABLE", "G2-item"),
    ("SERIALIZABLE", "G2"),
];

/// Runs every case at every level of `engine` and checks the table.
async fn measure(engine: Engine, expected: &Expected) {
    measure_allowing(engine, expected, &[]).await;
}

/// The same, but the cells `either` (level, case) may come out either way.
async fn measure_allowing(engine: Engine, expected: &Expected, either: &[(&str, &str)]) {
    session::create_database(engine).await;
    let mut table = format!(
        "\n{}\n| level | {} |\n|---|{}\n",
        engine.name(),
        CASES.join(" | "),
        "---|".repeat(CASES.len())
    );
    let mut wrong = Vec::new();
    for (level, prevents) in expected {
        let mut cells = Vec::new();
        for (name, prevented) in CASES.iter().zip(prevents) {
            let mut run = Run::start(engine, level, name).await;
            let verdict = cases::run(name, &mut run).await;
            run.finish().await;
            cells.push(verdict.cell());
            let decided = !either.contains(&(*level, *name));
            if decided && verdict.prevented != *prevented {
                wrong.push(format!(
                    "{} {level} {name}: expected {}, {}",
                    engine.name(),
                    if *prevented {
                        "prevented"
                    } else {
                        "the anomaly"
                    },
                    verdict.cell()
                ));
            }
        }
        let _ = writeln!(table, "| {level} | {} |", cells.join(" | "));
    }
    println!("{table}");
    assert!(wrong.is_empty(), "{table}\n{}", wrong.join("\n"));
}

/// Snapshot isolation is MariaDB's (10.11.8 and later): on MySQL (the
/// compose file's) only InnoDB's own table is measured.
#[tokio::test]
async fn mariadb_allows_what_hermitage_found_in_innodb_and_snapshot_isolation_refuses_the_lost_update()
 {
    measure(Engine::MariaDb, &MARIADB).await;
    if session::is_mariadb().await {
        measure(
            Engine::MariaDbSnapshotIsolation,
            &MARIADB_SNAPSHOT_ISOLATION,
        )
        .await;
    } else {
        println!(
            "snapshot isolation not measured: the server is MySQL, which has no innodb_snapshot_isolation"
        );
    }
}

#[tokio::test]
async fn postgres_allows_what_hermitage_found() {
    measure(Engine::Postgres, &POSTGRES).await;
}

/// Needs `cargo xtask galera up` (`cargo xtask test` starts it).
#[tokio::test]
async fn galera_with_each_session_on_its_own_node_refuses_the_lost_update_at_every_level() {
    // A node paused by another test would make every session wait.
    let _cluster = crate::turns::shared(crate::galera::CLUSTER_TURN).await;
    measure_allowing(Engine::Galera, &GALERA, &GALERA_RACES).await;
}
