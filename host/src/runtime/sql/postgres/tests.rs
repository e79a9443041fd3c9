use sqlx::postgres::PgQueryResult;
use sqlx::{Connection, Executor, PgConnection};

use super::*;
use wit::Value::{Bytes, Float, Int, Null, Text, Uint};

/// The PostgreSQL every PostgreSQL test of the repository runs against.
const SERVER: &str = "postgres://postgres@127.0.0.1:5432/postgres";

async fn connect() -> PgConnection {
    PgConnection::connect(SERVER)
        .await
        .expect("PostgreSQL on 127.0.0.1:5432")
}

async fn run(conn: &mut PgConnection, statements: impl AsRef<str>) {
    conn.execute(statements.as_ref()).await.unwrap();
}

async fn fetch(
    conn: &mut PgConnection,
    statement: &str,
    params: Vec<wit::Value>,
) -> Result<Vec<Vec<wit::Value>>, sqlx::Error> {
    let rows = bind(sqlx::query(statement), params).fetch_all(conn).await?;
    Ok(rows
        .iter()
        .map(|row| (0..row.len()).map(|i| to_value(row, i)).collect())
        .collect())
}

/// The WIT case of the server's refusal of a statement.
fn refusal<T: std::fmt::Debug>(result: Result<T, sqlx::Error>) -> SqlError {
    let err = result.expect_err("the server refuses the statement");
    let db = err.as_database_error().expect("a server's error");
    to_wit_error(db.downcast_ref(), err.to_string())
}

/// Two sessions and a table of two rows both see, named for `test` and
/// this run.
async fn two_sessions(test: &str) -> (PgConnection, PgConnection, String) {
    let (mut a, b) = (connect().await, connect().await);
    let table = format!("pgvalue_{test}_{}", std::process::id());
    let create = format!(
        "DROP TABLE IF EXISTS {table}; CREATE TABLE {table} (id INT4 PRIMARY KEY, n INT4); \
         INSERT INTO {table} VALUES (1, 0), (2, 0)"
    );
    run(&mut a, create).await;
    (a, b, table)
}

/// Runs `statement` on `blocked` and, once the server shows it waiting
/// on a lock, `unblocking` on `other`.
async fn while_blocked(
    blocked: &mut PgConnection,
    statement: &str,
    other: &mut PgConnection,
    unblocking: &str,
) -> [Result<PgQueryResult, sqlx::Error>; 2] {
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *blocked)
        .await
        .unwrap();
    let waiting = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)";
    let unblock = async {
        for _ in 0..500 {
            let query = sqlx::query_scalar(waiting).bind(pid);
            if query.fetch_one(&mut *other).await.unwrap() {
                return other.execute(unblocking).await;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("`{statement}` never waited on a lock");
    };
    let (first, second) = futures::join!(blocked.execute(statement), unblock);
    [first, second]
}

#[tokio::test]
async fn an_int_binds_against_int4_and_int8_columns() {
    let mut conn = connect().await;
    let create = "CREATE TEMP TABLE ints (id INT4, big INT8, small INT4)";
    run(&mut conn, create).await;
    let insert = "INSERT INTO ints VALUES ($1, $2, 0)";
    fetch(&mut conn, insert, vec![Int(1), Int(2)])
        .await
        .unwrap();
    let set = "UPDATE ints SET small = $1 WHERE id = $2";
    fetch(&mut conn, set, vec![Int(3), Int(1)]).await.unwrap();
    let select = "SELECT id, big, small FROM ints WHERE id = $1 AND big = $2";
    let rows = fetch(&mut conn, select, vec![Int(1), Int(2)]).await;
    assert_eq!(rows.unwrap(), [vec![Int(1), Int(2), Int(3)]]);
    let too_big = fetch(&mut conn, set, vec![Int(1 << 40), Int(1)]).await;
    assert!(matches!(refusal(too_big), SqlError::Other(m) if m.contains("out of range")));
    let int4_function = fetch(&mut conn, "SELECT repeat('x', $1)", vec![Int(2)]).await;
    assert!(matches!(refusal(int4_function), SqlError::Other(m) if m.contains("does not exist")));
}

/// Each run of one statement binds its own types: the second row's
/// `Uint` and `Int` would otherwise be read as the first's NUMERIC and
/// FLOAT8, and its `Text` as a BYTEA.
#[tokio::test]
async fn each_parameter_binds_as_its_closest_type() {
    let mut conn = connect().await;
    let create = "CREATE TEMP TABLE params \
                  (id INT4, at TIMESTAMP, data BYTEA, amount NUMERIC(20), price FLOAT8)";
    run(&mut conn, create).await;
    let insert = "INSERT INTO params VALUES ($1, $2, $3, $4, $5)";
    let first = vec![Int(1), Null, Bytes(vec![1]), Uint(u64::MAX), Float(2.5)];
    fetch(&mut conn, insert, first).await.unwrap();
    let second = vec![Int(2), Null, Text("x".into()), Uint(7), Int(3)];
    let text_to_bytea = fetch(&mut conn, insert, second.clone()).await;
    assert!(matches!(refusal(text_to_bytea), SqlError::Other(m) if m.contains("type text")));
    let cast = "INSERT INTO params VALUES ($1, $2, $3::BYTEA, $4, $5)";
    fetch(&mut conn, cast, second).await.unwrap();
    let rows = fetch(&mut conn, "SELECT * FROM params ORDER BY id", vec![]).await;
    let (max, seven) = (Text(u64::MAX.to_string()), Text("7".into()));
    assert_eq!(
        rows.unwrap(),
        [
            vec![Int(1), Null, Bytes(vec![1]), max, Float(2.5)],
            vec![Int(2), Null, Bytes(b"x".into()), seven, Float(3.0)],
        ]
    );
    let too_big = fetch(&mut conn, "UPDATE params SET id = $1", vec![Uint(u64::MAX)]).await;
    assert!(matches!(refusal(too_big), SqlError::Other(m) if m.contains("out of range")));
}

#[tokio::test]
async fn each_column_type_becomes_its_wit_case() {
    let mut conn = connect().await;
    let select = "SELECT 1::INT2, 2::INT4, -3::INT8, 4000000000::OID, true, false, \
                  1.5::FLOAT4, 0.25::FLOAT8, TIMESTAMP '2026-01-02 03:04:05.678', \
                  TIMESTAMPTZ '2026-01-02 03:04:05.678+02', DATE '2026-01-02', \
                  '\\x0102'::BYTEA, 'z'::CHAR(2), NULL, pg_sleep(0)";
    let rows = fetch(&mut conn, select, vec![]).await.unwrap();
    let day = |time: &str| Text(format!("2026-01-02{time}"));
    let expected = [
        vec![Int(1), Int(2), Int(-3), Int(4_000_000_000)],
        vec![Int(1), Int(0), Float(1.5), Float(0.25)],
        vec![day(" 03:04:05.678"), day(" 01:04:05.678"), day("")],
        vec![Bytes(vec![1, 2]), Text("z ".into()), Null, Null],
    ];
    assert_eq!(rows, [expected.concat()]);
    let uuid = "SELECT '00000000-0000-0000-0000-000000000001'::UUID";
    let rows = fetch(&mut conn, uuid, vec![]).await.unwrap();
    assert!(matches!(&rows[0][0], Text(t) if t.starts_with("<undecodable UUID: ")));
    // PostgreSQL's own text of each NUMERIC is the one expected.
    let numerics = "SELECT n::NUMERIC, n::NUMERIC::TEXT FROM unnest('{1.50, -12345.678, \
                  0.00000001, 1e20, 0, 0.000, 10000, -0.5, 123456789.000001, NaN, \
                  Infinity, -Infinity}'::TEXT[]) AS n";
    for row in fetch(&mut conn, numerics, vec![]).await.unwrap() {
        assert_eq!(row[0], row[1]);
    }
}

#[tokio::test]
async fn a_write_past_a_repeatable_read_snapshot_is_a_serialization_failure() {
    let (mut a, mut b, table) = two_sessions("serialization").await;
    let snapshot = format!("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT n FROM {table}");
    for conn in [&mut a, &mut b] {
        run(conn, &snapshot).await;
    }
    run(&mut a, format!("UPDATE {table} SET n = 1 WHERE id = 1")).await;
    let update = format!("UPDATE {table} SET n = 2 WHERE id = 1");
    let [stale, commit] = while_blocked(&mut b, &update, &mut a, "COMMIT").await;
    commit.unwrap();
    assert!(matches!(refusal(stale), SqlError::SerializationFailure(_)));
    run(&mut b, "ROLLBACK").await;
    run(&mut a, format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn a_lock_cycle_is_a_deadlock() {
    let (mut a, mut b, table) = two_sessions("deadlock").await;
    for (conn, id) in [(&mut a, 1), (&mut b, 2)] {
        let lock = format!(
            "SET deadlock_timeout = '50ms'; BEGIN; UPDATE {table} SET n = 1 WHERE id = {id}"
        );
        run(conn, lock).await;
    }
    let update = |id| format!("UPDATE {table} SET n = 2 WHERE id = {id}");
    let results = while_blocked(&mut b, &update(1), &mut a, &update(2)).await;
    // Either session may be the one the server aborts.
    let refusals = results.into_iter().filter(Result::is_err).map(refusal);
    assert!(matches!(
        refusals.collect::<Vec<_>>()[..],
        [SqlError::Deadlock(_)]
    ));
    for conn in [&mut a, &mut b] {
        run(conn, "ROLLBACK").await;
    }
    run(&mut a, format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn a_lock_held_past_lock_timeout_or_nowait_is_a_lock_wait_timeout() {
    let (mut a, mut b, table) = two_sessions("lock_timeout").await;
    let lock = format!("SELECT * FROM {table} WHERE id = 1 FOR UPDATE");
    run(&mut a, format!("BEGIN; {lock}")).await;
    run(&mut b, "SET lock_timeout = '100ms'").await;
    for statement in [lock.clone(), format!("{lock} NOWAIT")] {
        let refused = refusal(b.execute(statement.as_str()).await);
        assert!(matches!(refused, SqlError::LockWaitTimeout(_)));
    }
    run(&mut a, format!("ROLLBACK; DROP TABLE {table}")).await;
}

#[tokio::test]
async fn one_sessions_refusals_become_their_cases() {
    let mut conn = connect().await;
    let create = "CREATE TEMP TABLE parents (id INT4 PRIMARY KEY); \
                  CREATE TEMP TABLE children (parent INT4 REFERENCES parents); \
                  INSERT INTO parents VALUES (1)";
    run(&mut conn, create).await;
    let duplicate = conn.execute("INSERT INTO parents VALUES (1)").await;
    assert!(matches!(refusal(duplicate), SqlError::DuplicateKey(_)));
    let orphan = conn.execute("INSERT INTO children VALUES (2)").await;
    assert!(matches!(refusal(orphan), SqlError::ForeignKey(_)));
    // The role goes with the transaction that created it.
    let role = format!("pgvalue_denied_{}", std::process::id());
    let unprivileged = format!("BEGIN; CREATE ROLE {role}; SET LOCAL ROLE {role}");
    run(&mut conn, unprivileged).await;
    let denied = conn.execute("SELECT * FROM pg_authid").await;
    assert!(matches!(refusal(denied), SqlError::Refused(m)
        if m.starts_with("the component's database user may not: ")));
    run(&mut conn, "ROLLBACK; SET statement_timeout = '50ms'").await;
    let slow = conn.execute("SELECT pg_sleep(1)").await;
    assert!(matches!(refusal(slow), SqlError::Other(m) if m.contains("statement timeout")));
}
