//! What a component's SQL statement may be, read before it is sent, and
//! the text sent for it.
//!
//! The grants of the component's database user decide what data it reaches
//! (see `docs/architecture.md`, the trust model). This decides something
//! grants cannot: whether the connection can go back to the pool clean.
//! A component runs data statements only — `SELECT`, `INSERT`, `UPDATE`,
//! `DELETE`, `REPLACE`, `WITH` — one per call; transactions begin and end
//! through `sql.begin`, `commit` and `rollback`. Every other kind (`SET`,
//! `BEGIN`, `COMMIT`, `LOCK`, `PREPARE`, `CALL`, `DO`, DDL, PostgreSQL's
//! `LISTEN`, `DISCARD`, `COPY`, ...) could change the session's state or
//! end a transaction behind the host's back, and is refused. A data
//! statement can still leave state in the session: in MySQL through user
//! variables (`@x := 1`, `INTO @x`) and named locks (`GET_LOCK`), in
//! PostgreSQL through settings (`set_config`) and session-level advisory
//! locks (`pg_advisory_lock`, ...; the `_xact_` ones end with the
//! transaction). Such a statement runs, and its connection is closed
//! afterwards instead of being handed to the next borrower.
//!
//! A component's statements are the same on both databases, written with
//! `?` placeholders. PostgreSQL numbers its own (`$1`, `$2`, ...), so the
//! text sent there has each `?` outside literals, names and comments
//! numbered in turn: every such `?` is a placeholder, and PostgreSQL's `?`
//! operators (on `jsonb`) are written as their functions (`jsonb_exists`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use parking_lot::RwLock;

use super::tokens::{Token, numbered, tokens};
use crate::db_target::Dialect;

/// Statement kinds a component may run.
const DATA_STATEMENTS: [&str; 6] = ["SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "WITH"];

/// What running an allowed statement leaves on its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residue {
    /// Nothing beyond the transaction the host already tracks.
    None,
    /// Session state (a user variable, a named or advisory lock, a
    /// setting): the connection must be closed rather than reused.
    Session,
}

/// A verdict on a statement: what it leaves, or why it is refused.
type Verdict = Result<Residue, String>;

/// A verdict with, for an allowed statement, the text to send for it.
type Reading = Result<(Residue, Arc<str>), String>;

/// Statements read, and their readings, which depend on the text and the
/// dialect alone: one map for each dialect. A component sends the same few
/// statements again and again, and reading one again cost the issue pair
/// 6,500 instructions a request (`cargo xtask bench --instructions`).
/// Bounded: statements past the bound, or longer than a line of SQL usually
/// is, are read every time.
type Checked = RwLock<HashMap<Box<str>, Reading, foldhash::fast::RandomState>>;
static MYSQL_CHECKED: LazyLock<Checked> = LazyLock::new(Default::default);
static POSTGRES_CHECKED: LazyLock<Checked> = LazyLock::new(Default::default);
const CHECKED_STATEMENTS: usize = 4096;
const CHECKED_LENGTH: usize = 4096;

fn checked(dialect: Dialect) -> &'static Checked {
    match dialect {
        Dialect::MySql => &MYSQL_CHECKED,
        Dialect::Postgres => &POSTGRES_CHECKED,
    }
}

/// Checks `statement` as `dialect` reads it: what it leaves and the text
/// to send for it (in PostgreSQL, its placeholders numbered), or `Err`
/// saying why it is refused.
pub fn to_send(statement: &str, dialect: Dialect) -> Reading {
    let checked = checked(dialect);
    if let Some(reading) = checked.read().get(statement) {
        return reading.clone();
    }
    let reading = read(statement, dialect);
    if statement.len() <= CHECKED_LENGTH {
        let mut checked = checked.write();
        if checked.len() < CHECKED_STATEMENTS {
            checked.insert(statement.into(), reading.clone());
        }
    }
    reading
}

/// The host's own statement (not a component's: nothing to check) as
/// PostgreSQL takes it, its `?` placeholders numbered.
pub fn numbered_for_postgres(statement: &str) -> String {
    match tokens(statement, Dialect::Postgres) {
        Ok(tokens) => numbered(statement, &tokens),
        Err(_) => statement.to_string(),
    }
}

/// The verdict of [`to_send`] alone; `Err` says why it is refused.
pub fn check(statement: &str, dialect: Dialect) -> Verdict {
    to_send(statement, dialect).map(|(residue, _)| residue)
}

/// [`to_send`], reading the statement.
fn read(statement: &str, dialect: Dialect) -> Reading {
    let tokens = tokens(statement, dialect)?;
    let first = first_word(&tokens);
    if !DATA_STATEMENTS.contains(&first) {
        let kind = if first.is_empty() { "this" } else { first };
        return Err(format!(
            "{kind} statements are not allowed: a component runs {} statements, and begins and ends transactions through sql.begin, commit and rollback",
            DATA_STATEMENTS.join(", ")
        ));
    }
    if let Some(at) = tokens.iter().position(|t| *t == Token::Semicolon)
        && tokens[at + 1..].iter().any(|t| *t != Token::Semicolon)
    {
        return Err("one statement per call: `;` may only end it".into());
    }
    let leaves_session_state = tokens.iter().any(|token| match token {
        Token::Variable => true,
        Token::Word(name) | Token::Name(name) => {
            session_functions(dialect).contains(&name.as_str())
        }
        _ => false,
    });
    let residue = if leaves_session_state {
        Residue::Session
    } else {
        Residue::None
    };
    let text = match dialect {
        Dialect::MySql => statement.into(),
        Dialect::Postgres => numbered(statement, &tokens).into(),
    };
    Ok((residue, text))
}

/// Functions whose effect outlives their statement and its transaction,
/// upper-cased.
fn session_functions(dialect: Dialect) -> &'static [&'static str] {
    match dialect {
        Dialect::MySql => &["GET_LOCK"],
        Dialect::Postgres => &[
            "SET_CONFIG",
            "PG_ADVISORY_LOCK",
            "PG_ADVISORY_LOCK_SHARED",
            "PG_TRY_ADVISORY_LOCK",
            "PG_TRY_ADVISORY_LOCK_SHARED",
        ],
    }
}

/// Whether `statement` can only read: a `SELECT`. Any other kind may
/// write (a `WITH` may end in an UPDATE or a DELETE). The dialects read
/// comments differently, so it is read as the dialect that checked it.
pub fn only_reads(statement: &str, dialect: Dialect) -> bool {
    tokens(statement, dialect).is_ok_and(|tokens| first_word(&tokens) == "SELECT")
}

/// The statement's kind: its first word, past any opening parentheses
/// (empty when it starts with anything else).
fn first_word(tokens: &[Token]) -> &str {
    tokens
        .iter()
        .find_map(|token| match token {
            Token::Word(word) => Some(word.as_str()),
            Token::Open => None,
            Token::Other | Token::Name(_) | Token::Placeholder(_) => Some(""),
            Token::Semicolon | Token::Variable => Some(""),
        })
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;
    use Dialect::{MySql, Postgres};

    #[test]
    fn the_strategies_statements_are_allowed_and_leave_nothing() {
        for statement in [
            "SELECT total_count, issued_count FROM coupons WHERE id = ? FOR UPDATE",
            "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
            "UPDATE coupons SET issued_count = issued_count + 1 WHERE id = ? AND issued_count < total_count",
            "  -- a comment\n  delete FROM coupon_issues WHERE coupon_id = ? AND member_id = ?",
            "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?), (?, ?) ON DUPLICATE KEY UPDATE member_id = member_id",
            "(SELECT 1)",
            "SELECT 'it''s @not a variable; GET_LOCK' AS s /* @x := 1; */",
            "WITH t AS (SELECT 1 AS n) SELECT n FROM t;",
            "SELECT /*+ MAX_EXECUTION_TIME(100) */ id FROM members",
        ] {
            assert_eq!(check(statement, MySql), Ok(Residue::None), "{statement}");
        }
    }

    #[test]
    fn only_a_select_can_only_read() {
        assert!(only_reads(
            "(SELECT total_count FROM coupons WHERE id = ?)",
            MySql
        ));
        assert!(only_reads("  select 1 FOR UPDATE", MySql));
        for statement in [
            "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
            "WITH t AS (SELECT 1 AS n) DELETE FROM coupon_issues WHERE member_id IN (SELECT n FROM t)",
            "REPLACE INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
        ] {
            assert!(!only_reads(statement, MySql), "{statement}");
        }
    }

    #[test]
    fn statements_that_change_the_session_or_the_transaction_are_refused() {
        for statement in [
            "SET SESSION innodb_lock_wait_timeout = 1000",
            "SET autocommit = 0",
            "set @x = 1",
            "BEGIN",
            "START TRANSACTION",
            "COMMIT",
            "ROLLBACK",
            "LOCK TABLES coupons WRITE",
            "DROP TABLE coupon_issues",
            "TRUNCATE TABLE members",
            "CREATE USER evil",
            "CREATE TEMPORARY TABLE t (id INT)",
            "DO GET_LOCK('x', 0)",
            "PREPARE s FROM 'SELECT 1'",
            "CALL p()",
            "XA START 'x'",
            "KILL 42",
            "SHOW GRANTS",
            "",
            "   ",
            "/* only a comment */",
            "SELECT 1; DROP TABLE coupons",
            "/*!50000 SET autocommit = 0 */ SELECT 1",
            "SELECT 1 /*M! , SLEEP(1) */",
            "SELECT 'unterminated",
        ] {
            assert!(
                check(statement, MySql).is_err(),
                "{statement:?} was allowed"
            );
        }
    }

    #[test]
    fn data_statements_that_leave_session_state_are_marked() {
        for statement in [
            "SELECT GET_LOCK('lab', 0)",
            "select get_lock ('lab', 0)",
            "SELECT @x := total_count FROM coupons",
            "SELECT total_count INTO @total FROM coupons WHERE id = 1",
            "SELECT @@session.autocommit",
        ] {
            assert_eq!(check(statement, MySql), Ok(Residue::Session), "{statement}");
        }
    }

    #[test]
    fn a_refusal_names_the_statement_kind() {
        let refused = check("DROP TABLE coupon_issues", MySql).unwrap_err();
        assert!(
            refused.starts_with("DROP statements are not allowed"),
            "{refused}"
        );
    }

    #[test]
    fn a_statement_checked_again_gets_the_same_verdict() {
        for dialect in [MySql, Postgres] {
            for statement in [
                "SELECT 1 FROM coupons WHERE id = ? -- checked twice",
                "SELECT GET_LOCK('checked twice', 1)",
                "SET @checked_twice = 1",
            ] {
                let first = read(statement, dialect);
                assert_eq!(to_send(statement, dialect), first, "{statement}");
                assert!(
                    checked(dialect).read().contains_key(statement),
                    "{statement}"
                );
                assert_eq!(to_send(statement, dialect), first, "{statement}");
            }
        }
    }

    #[test]
    fn each_dialect_keeps_its_own_verdict_and_text() {
        let statement = "SELECT GET_LOCK(?, 0), '?' AS kept_apart";
        for _checked_again in [false, true] {
            assert_eq!(
                to_send(statement, MySql),
                Ok((Residue::Session, statement.into()))
            );
            assert_eq!(
                to_send(statement, Postgres),
                Ok((
                    Residue::None,
                    "SELECT GET_LOCK($1, 0), '?' AS kept_apart".into()
                ))
            );
        }
    }

    #[test]
    fn postgres_data_statements_are_allowed_and_leave_nothing() {
        for statement in [
            "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
            "WITH t AS (UPDATE coupons SET issued_count = 0 WHERE id = ? RETURNING id) SELECT id FROM t",
            r"SELECT 'a\' AS s, E'it\'s; set_config(' AS e, $tag$; pg_advisory_lock($tag$ AS d",
            r#"SELECT "weird""name" FROM t --no space needed; SELECT set_config('a', 'b', false)"#,
            "SELECT /* nested /* ; */ set_config( */ 1 # 2, @ -5",
            "SELECT pg_advisory_xact_lock(?), pg_try_advisory_xact_lock_shared(1, 2)",
        ] {
            assert_eq!(check(statement, Postgres), Ok(Residue::None), "{statement}");
        }
    }

    #[test]
    fn postgres_refuses_what_is_not_one_data_statement() {
        for statement in [
            "LISTEN coupons",
            "NOTIFY coupons, 'issued'",
            "DISCARD ALL",
            "RESET ALL",
            "SET search_path = evil",
            "SHOW work_mem",
            "COPY coupons FROM STDIN",
            "DO $$BEGIN PERFORM 1; END$$",
            "CALL p()",
            "VACUUM coupons",
            "TABLE coupons",
            "VALUES (1)",
            "BEGIN",
            "DECLARE c CURSOR FOR SELECT 1",
            "PREPARE s AS SELECT 1",
            "SELECT 1; SELECT 2",
            "SELECT 1 -- a comment ends at a carriage return\r; DROP TABLE coupons",
            r"SELECT E'\'; DROP TABLE coupons",
            "SELECT $$unterminated",
            "SELECT 1 /* /* nested */",
            r#"SELECT "unterminated"#,
            r#"SELECT U&"set\005fconfig"('search_path', 'evil', false)"#,
        ] {
            assert!(
                check(statement, Postgres).is_err(),
                "{statement:?} was allowed"
            );
        }
    }

    #[test]
    fn postgres_statements_that_leave_session_state_are_marked() {
        for statement in [
            "SELECT set_config('search_path', 'evil', false)",
            "SELECT set_config('statement_timeout', '0', true)",
            "SELECT pg_advisory_lock(?)",
            "select PG_ADVISORY_LOCK_SHARED(1, 2)",
            "SELECT pg_try_advisory_lock(?) FROM coupons",
            "SELECT pg_catalog.pg_try_advisory_lock_shared(1)",
            r#"SELECT "set_config"('search_path', 'evil', false)"#,
            "WITH l AS (SELECT pg_advisory_lock(1)) UPDATE coupons SET issued_count = 0",
        ] {
            assert_eq!(
                check(statement, Postgres),
                Ok(Residue::Session),
                "{statement}"
            );
        }
    }
}
