//! What a component's SQL statement may be, read before it is sent.
//!
//! The grants of the component's database user decide what data it reaches
//! (see `docs/architecture.md`, the trust model). This decides something
//! grants cannot: whether the connection can go back to the pool clean.
//! A component runs data statements only — `SELECT`, `INSERT`, `UPDATE`,
//! `DELETE`, `REPLACE`, `WITH` — one per call; transactions begin and end
//! through `sql.begin`, `commit` and `rollback`. Every other kind (`SET`,
//! `BEGIN`, `COMMIT`, `LOCK`, `PREPARE`, `CALL`, `DO`, DDL, ...) could
//! change the session's state or end a transaction behind the host's back,
//! and is refused. A data statement can still leave state in the session
//! in exactly two ways, user variables (`@x := 1`, `INTO @x`) and named
//! locks (`GET_LOCK`): such a statement runs, and its connection is closed
//! afterwards instead of being handed to the next borrower.

use std::collections::HashMap;
use std::sync::LazyLock;

use parking_lot::RwLock;

/// Statement kinds a component may run.
const DATA_STATEMENTS: [&str; 6] = ["SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "WITH"];

/// What running an allowed statement leaves on its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residue {
    /// Nothing beyond the transaction the host already tracks.
    None,
    /// Session state (a user variable, a named lock): the connection must
    /// be closed rather than reused.
    Session,
}

/// A verdict on a statement: what it leaves, or why it is refused.
type Verdict = Result<Residue, String>;

/// Statements checked, and their verdicts, which depend on the text alone.
/// A component sends the same few statements again and again, and reading
/// one again cost the issue pair 6,500 instructions a request
/// (`cargo xtask bench --instructions`). Bounded: statements past the
/// bound, or longer than a line of SQL usually is, are read every time.
static CHECKED: LazyLock<RwLock<HashMap<Box<str>, Verdict, foldhash::fast::RandomState>>> =
    LazyLock::new(Default::default);
const CHECKED_STATEMENTS: usize = 4096;
const CHECKED_LENGTH: usize = 4096;

/// Checks `statement`; `Err` says why it is refused.
pub fn check(statement: &str) -> Verdict {
    if let Some(verdict) = CHECKED.read().get(statement) {
        return verdict.clone();
    }
    let verdict = read(statement);
    if statement.len() <= CHECKED_LENGTH {
        let mut checked = CHECKED.write();
        if checked.len() < CHECKED_STATEMENTS {
            checked.insert(statement.into(), verdict.clone());
        }
    }
    verdict
}

/// [`check`], reading the statement.
fn read(statement: &str) -> Verdict {
    let tokens = tokens(statement)?;
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
    let leaves_session_state = tokens
        .iter()
        .any(|t| matches!(t, Token::Variable) || matches!(t, Token::Word(w) if w == "GET_LOCK"));
    Ok(if leaves_session_state {
        Residue::Session
    } else {
        Residue::None
    })
}

/// Whether `statement` can only read: a `SELECT`. Any other kind may
/// write (a `WITH` may end in an UPDATE or a DELETE).
pub fn only_reads(statement: &str) -> bool {
    tokens(statement).is_ok_and(|tokens| first_word(&tokens) == "SELECT")
}

/// The statement's kind: its first word, past any opening parentheses
/// (empty when it starts with anything else).
fn first_word(tokens: &[Token]) -> &str {
    tokens
        .iter()
        .find_map(|token| match token {
            Token::Word(word) => Some(word.as_str()),
            Token::Open => None,
            Token::Other => Some(""),
            Token::Semicolon | Token::Variable => Some(""),
        })
        .unwrap_or("")
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    /// An unquoted identifier or keyword, upper-cased.
    Word(String),
    /// `@name` or `@@name`.
    Variable,
    Open,
    Semicolon,
    /// Anything else: literals, quoted names, operators, numbers.
    Other,
}

/// Splits a statement into the tokens the check needs, skipping string
/// literals, quoted identifiers and comments. Executable comments
/// (`/*! ... */`, `/*M! ... */`) run their content, so they are refused
/// rather than skipped.
fn tokens(sql: &str) -> Result<Vec<Token>, String> {
    let bytes = sql.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            b'#' => i = line_end(bytes, i),
            b'-' if bytes.get(i + 1) == Some(&b'-')
                && bytes.get(i + 2).is_none_or(|c| c.is_ascii_whitespace()) =>
            {
                i = line_end(bytes, i)
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                let body = &bytes[i + 2..];
                if body.starts_with(b"!") || body.starts_with(b"M!") {
                    return Err("executable comments (/*! ... */) are not allowed".into());
                }
                let end = find(bytes, i + 2, b"*/").ok_or("an unterminated comment")?;
                i = end + 2;
            }
            b'\'' | b'"' | b'`' => {
                i = quoted_end(bytes, i).ok_or("an unterminated quoted string or name")?;
                tokens.push(Token::Other);
            }
            b'@' => {
                tokens.push(Token::Variable);
                i += 1;
                while i < bytes.len() && (bytes[i] == b'@' || is_word(bytes[i])) {
                    i += 1;
                }
            }
            b'(' => {
                tokens.push(Token::Open);
                i += 1;
            }
            b';' => {
                tokens.push(Token::Semicolon);
                i += 1;
            }
            c if is_word(c) && !c.is_ascii_digit() => {
                let start = i;
                while i < bytes.len() && is_word(bytes[i]) {
                    i += 1;
                }
                tokens.push(Token::Word(sql[start..i].to_ascii_uppercase()));
            }
            _ => {
                tokens.push(Token::Other);
                i += 1;
            }
        }
    }
    Ok(tokens)
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

fn line_end(bytes: &[u8], from: usize) -> usize {
    find(bytes, from, b"\n").map_or(bytes.len(), |at| at + 1)
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|at| from + at)
}

/// The index just past the quoted run starting at `start`: a doubled quote
/// is a literal quote, and a backslash escapes in strings (not in names).
fn quoted_end(bytes: &[u8], start: usize) -> Option<usize> {
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quote != b'`' => i += 2,
            c if c == quote => {
                if bytes.get(i + 1) == Some(&quote) {
                    i += 2;
                } else {
                    return Some(i + 1);
                }
            }
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

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
            assert_eq!(check(statement), Ok(Residue::None), "{statement}");
        }
    }

    #[test]
    fn only_a_select_can_only_read() {
        assert!(only_reads("(SELECT total_count FROM coupons WHERE id = ?)"));
        assert!(only_reads("  select 1 FOR UPDATE"));
        for statement in [
            "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
            "WITH t AS (SELECT 1 AS n) DELETE FROM coupon_issues WHERE member_id IN (SELECT n FROM t)",
            "REPLACE INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
        ] {
            assert!(!only_reads(statement), "{statement}");
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
            assert!(check(statement).is_err(), "{statement:?} was allowed");
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
            assert_eq!(check(statement), Ok(Residue::Session), "{statement}");
        }
    }

    #[test]
    fn a_refusal_names_the_statement_kind() {
        let refused = check("DROP TABLE coupon_issues").unwrap_err();
        assert!(
            refused.starts_with("DROP statements are not allowed"),
            "{refused}"
        );
    }

    #[test]
    fn a_statement_checked_again_gets_the_same_verdict() {
        for statement in [
            "SELECT 1 FROM coupons WHERE id = ? -- checked twice",
            "SELECT GET_LOCK('checked twice', 1)",
            "SET @checked_twice = 1",
        ] {
            let first = read(statement);
            assert_eq!(check(statement), first, "{statement}");
            assert!(CHECKED.read().contains_key(statement), "{statement}");
            assert_eq!(check(statement), first, "{statement}");
        }
    }
}
