//! A SQL statement split into the tokens [`super::statement`] needs, by
//! the rules of the dialect it is sent in, and its placeholders numbered
//! for PostgreSQL. String literals, quoted names and comments are read past
//! as that server's lexer reads them: read otherwise, they could hide a
//! second statement, a function call or a placeholder from the check, or
//! show one that is not there.

use crate::db_target::Dialect;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Token {
    /// An unquoted identifier or keyword, upper-cased.
    Word(String),
    /// A PostgreSQL quoted name (`"..."`), upper-cased: a function can be
    /// called by one.
    Name(String),
    /// MySQL's `@name` or `@@name`.
    Variable,
    /// A `?` placeholder, at this byte offset.
    Placeholder(usize),
    Open,
    Semicolon,
    /// Anything else: literals, MySQL's quoted names, operators, numbers.
    Other,
}

const UNTERMINATED_QUOTE: &str = "an unterminated quoted string or name";

/// Splits `sql` into tokens, skipping string literals, comments and, in
/// MySQL, quoted names. MySQL runs the content of executable comments
/// (`/*! ... */`, `/*M! ... */`), so they are refused rather than skipped.
/// PostgreSQL's differ: `"..."` is a name, `$tag$...$tag$` a string, a
/// backslash escapes only in `E'...'` strings (`standard_conforming_strings`,
/// on since 9.1), `--` needs no space after it and ends at a carriage
/// return too, block comments nest, and `#`, `@` and backticks are
/// operators or errors. Unicode-escaped names (`U&"..."`) are refused: one
/// could spell a function's name unread.
pub(super) fn tokens(sql: &str, dialect: Dialect) -> Result<Vec<Token>, String> {
    let postgres = dialect == Dialect::Postgres;
    let bytes = sql.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b' ' | b'\t' | b'\r' | b'\n' => i += 1,
            b'#' if !postgres => i = line_end(bytes, i, b"\n"),
            b'-' if postgres && bytes.get(i + 1) == Some(&b'-') => i = line_end(bytes, i, b"\n\r"),
            b'-' if !postgres
                && bytes.get(i + 1) == Some(&b'-')
                && bytes.get(i + 2).is_none_or(|c| c.is_ascii_whitespace()) =>
            {
                i = line_end(bytes, i, b"\n")
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => i = comment_end(bytes, i, dialect)?,
            quote @ (b'\'' | b'"' | b'`') if !postgres => {
                i = quoted_end(bytes, i, quote != b'`').ok_or(UNTERMINATED_QUOTE)?;
                tokens.push(Token::Other);
            }
            b'\'' if postgres => {
                i = quoted_end(bytes, i, false).ok_or(UNTERMINATED_QUOTE)?;
                tokens.push(Token::Other);
            }
            b'E' | b'e' if postgres && bytes.get(i + 1) == Some(&b'\'') => {
                i = quoted_end(bytes, i + 1, true).ok_or(UNTERMINATED_QUOTE)?;
                tokens.push(Token::Other);
            }
            b'"' if postgres => {
                let end = quoted_end(bytes, i, false).ok_or(UNTERMINATED_QUOTE)?;
                tokens.push(Token::Name(sql[i + 1..end - 1].to_ascii_uppercase()));
                i = end;
            }
            b'U' | b'u' if postgres && bytes[i + 1..].starts_with(b"&\"") => {
                return Err("Unicode-escaped names (U&\"...\") are not allowed".into());
            }
            b'$' if postgres => {
                i = match dollar_delimiter(bytes, i) {
                    Some(delimiter) => {
                        let body = i + delimiter.len();
                        find(bytes, body, delimiter).ok_or(UNTERMINATED_QUOTE)? + delimiter.len()
                    }
                    None => i + 1,
                };
                tokens.push(Token::Other);
            }
            b'@' if !postgres => {
                tokens.push(Token::Variable);
                i += 1;
                while i < bytes.len() && (bytes[i] == b'@' || is_word(bytes[i])) {
                    i += 1;
                }
            }
            b'?' => {
                tokens.push(Token::Placeholder(i));
                i += 1;
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

/// `sql` with the n-th `?` placeholder of its `tokens` written `$n`, as
/// PostgreSQL numbers them.
pub(super) fn numbered(sql: &str, tokens: &[Token]) -> String {
    let placeholders = tokens.iter().filter_map(|token| match token {
        Token::Placeholder(at) => Some(*at),
        _ => None,
    });
    let mut text = String::with_capacity(sql.len() + 8);
    let mut copied = 0;
    for (n, at) in (1..).zip(placeholders) {
        text.push_str(&sql[copied..at]);
        text.push_str(&format!("${n}"));
        copied = at + 1;
    }
    text.push_str(&sql[copied..]);
    text
}

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'$' || c >= 0x80
}

/// The index just past the line comment at `from`, which any of `ends` ends.
fn line_end(bytes: &[u8], from: usize, ends: &[u8]) -> usize {
    bytes[from..]
        .iter()
        .position(|c| ends.contains(c))
        .map_or(bytes.len(), |at| from + at + 1)
}

fn find(bytes: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    bytes[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|at| from + at)
}

/// The index just past the block comment at `start`: MySQL's ends at the
/// first `*/`, PostgreSQL's nest.
fn comment_end(bytes: &[u8], start: usize, dialect: Dialect) -> Result<usize, String> {
    const UNTERMINATED: &str = "an unterminated comment";
    if dialect == Dialect::MySql {
        let body = &bytes[start + 2..];
        if body.starts_with(b"!") || body.starts_with(b"M!") {
            return Err("executable comments (/*! ... */) are not allowed".into());
        }
        return Ok(find(bytes, start + 2, b"*/").ok_or(UNTERMINATED)? + 2);
    }
    let mut depth = 0;
    let mut i = start;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if bytes[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return Ok(i);
            }
        } else {
            i += 1;
        }
    }
    Err(UNTERMINATED.into())
}

/// The index just past the quoted run starting at `start`: a doubled quote
/// is a literal quote, and a backslash escapes if `backslash_escapes`.
fn quoted_end(bytes: &[u8], start: usize, backslash_escapes: bool) -> Option<usize> {
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if backslash_escapes => i += 2,
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

/// The delimiter (`$$`, `$tag$`) of the dollar-quoted string opening at
/// `start`, or `None` when the `$` opens none (as in a `$1` parameter).
fn dollar_delimiter(bytes: &[u8], start: usize) -> Option<&[u8]> {
    let tag = &bytes[start + 1..];
    let length = tag
        .iter()
        .position(|&c| c == b'$' || !is_word(c))
        .unwrap_or(tag.len());
    let opens = tag.first().is_some_and(|c| !c.is_ascii_digit()) && tag.get(length) == Some(&b'$');
    opens.then(|| &bytes[start..start + length + 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use Dialect::{MySql, Postgres};

    fn numbered_for_postgres(sql: &str) -> String {
        numbered(sql, &tokens(sql, Postgres).expect(sql))
    }

    #[test]
    fn only_placeholders_outside_literals_names_and_comments_are_numbered() {
        for (sql, sent) in [
            (
                "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?), (?,?)",
                "INSERT INTO coupon_issues (coupon_id, member_id) VALUES ($1, $2), ($3,$4)",
            ),
            (
                r#"SELECT 'a?b', 'it''s?', E'\'?', $$?$$, $q$ ? $$ ? $q$, "col?" FROM t WHERE id=?"#,
                r#"SELECT 'a?b', 'it''s?', E'\'?', $$?$$, $q$ ? $$ ? $q$, "col?" FROM t WHERE id=$1"#,
            ),
            (
                "SELECT ? -- ?\n, ?/* ? /* ? */ ? */FROM t WHERE a = ?",
                "SELECT $1 -- ?\n, $2/* ? /* ? */ ? */FROM t WHERE a = $3",
            ),
            (r"SELECT 'a\', ?", r"SELECT 'a\', $1"),
            (
                "SELECT id FROM t WHERE id = $1",
                "SELECT id FROM t WHERE id = $1",
            ),
        ] {
            assert_eq!(numbered_for_postgres(sql), sent);
        }
    }

    /// Where one dialect reads a `;`, the other reads a literal, a name or
    /// a comment.
    #[test]
    fn each_dialect_reads_quotes_and_comments_its_own_way() {
        for (sql, mysql_reads_a_semicolon) in [
            (r"SELECT 'a\'; DROP TABLE coupons -- '", false),
            (r#"SELECT "a\"; DROP TABLE coupons -- ""#, false),
            ("SELECT `a; DROP TABLE coupons` FROM t", false),
            ("SELECT 1 # ; DROP TABLE coupons", false),
            ("SELECT 1 --; DROP TABLE coupons", true),
            ("SELECT 1 /* /* */ ; DROP TABLE coupons */", true),
        ] {
            let reads_a_semicolon =
                |dialect| tokens(sql, dialect).is_ok_and(|t| t.contains(&Token::Semicolon));
            assert_eq!(reads_a_semicolon(MySql), mysql_reads_a_semicolon, "{sql}");
            assert_eq!(
                reads_a_semicolon(Postgres),
                !mysql_reads_a_semicolon,
                "{sql}"
            );
        }
    }
}
