//! What one call did, capability call by capability call: each Redis
//! command and its reply, each SQL statement with its table and rows, the
//! transactions' boundaries and isolation level, and the integers the
//! reads that decide brought back (a count, a stock, a set's size). The
//! store holds one [`CallTrace`]; the request traces above the runtime
//! decide which are kept and explain anomalies with them.
//!
//! Recording is on every call's path, so it stays cheap: a clock read and
//! a push per capability call, the texts it keeps short.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::time::Instant;

use serde::Serialize;
use utoipa::ToSchema;

/// Most capability calls one trace keeps; a call that makes more (a spin
/// lock's retries) keeps its first ones and counts the rest.
const MAX_CALLS: usize = 64;

/// A name or text a trace keeps: most are the host's own constants, kept
/// without a copy.
pub type Text = Cow<'static, str>;

/// Most integers one read keeps (the columns of a single-row result).
const MAX_READ: usize = 4;

/// One capability call of a trace.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TracedCall {
    /// `redis`, `sql`, `named-lock`, `channels`, `watchdog`, `jobs`,
    /// `permits`, `process-lock` or `broker`.
    pub capability: &'static str,
    /// The Redis command (`EVALSHA`, `SCARD`), the statement's first word
    /// (`SELECT`, `INSERT`, `BEGIN`, `COMMIT`) or the capability's function.
    #[schema(value_type = String)]
    pub op: Text,
    /// The keys of a Redis command, or the table of a statement.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<Box<str>>,
    /// The call's transaction it ran in (1 for its first).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transaction: Option<u32>,
    /// That transaction's isolation level.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub isolation: Option<&'static str>,
    /// Rows returned (a query) or changed (any other statement).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<u64>,
    /// The integers it read: an integer reply under `reply`, or the
    /// integer columns of a single-row result under their names.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = BTreeMap<String, i64>)]
    pub read: BTreeMap<Text, i64>,
    /// `ok`, or the error it answered (`deadlock: ...`).
    #[schema(value_type = String)]
    pub reply: Text,
    /// When it started, in microseconds since the call's own start.
    pub start_us: u64,
    pub duration_us: u64,
    /// `compensate` for the calls of the compensation that followed a call
    /// ended midway.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub phase: Option<&'static str>,
}

/// The trace of one call, as the store collects it.
#[derive(Debug)]
pub struct CallTrace {
    /// When the call started: every `start_us` counts from here.
    pub started: Instant,
    pub calls: Vec<TracedCall>,
    /// Capability calls past `MAX_CALLS`, counted and not kept.
    pub calls_dropped: u32,
    /// Transactions begun so far.
    transactions: u32,
    /// `false`: nothing is recorded (`COUPONLAB_TRACES=off`).
    recording: bool,
}

impl Default for CallTrace {
    fn default() -> Self {
        Self::starting(Instant::now())
    }
}

/// A capability call being traced: made when it starts, recorded when it
/// answers.
pub struct Pending {
    started: Instant,
    /// `None` when the trace records nothing.
    call: Option<TracedCall>,
}

impl Pending {
    pub fn target(mut self, target: impl Into<Box<str>>) -> Self {
        if let Some(call) = &mut self.call {
            call.target = Some(target.into());
        }
        self
    }

    pub fn in_transaction(mut self, transaction: u32, isolation: &'static str) -> Self {
        if let Some(call) = &mut self.call {
            call.transaction = Some(transaction);
            call.isolation = Some(isolation);
        }
        self
    }
}

impl CallTrace {
    pub fn starting(started: Instant) -> Self {
        Self {
            started,
            calls: Vec::with_capacity(8),
            calls_dropped: 0,
            transactions: 0,
            recording: true,
        }
    }

    /// A trace that records, or one that records nothing.
    pub fn recording(recording: bool) -> Self {
        Self {
            recording,
            calls: Vec::with_capacity(if recording { 8 } else { 0 }),
            ..Self::starting(Instant::now())
        }
    }

    /// Whether calls are recorded: a caller skips the work of describing
    /// one (parsing a statement, joining keys) when they are not.
    pub fn is_recording(&self) -> bool {
        self.recording
    }

    /// Starts tracing one capability call.
    pub fn start(&self, capability: &'static str, op: impl Into<Text>) -> Pending {
        Pending {
            started: Instant::now(),
            call: self.recording.then(|| TracedCall {
                capability,
                op: op.into(),
                target: None,
                transaction: None,
                isolation: None,
                rows: None,
                read: BTreeMap::new(),
                reply: Cow::Borrowed("ok"),
                start_us: 0,
                duration_us: 0,
                phase: None,
            }),
        }
    }

    /// The number of the transaction a `BEGIN` opens.
    pub fn next_transaction(&mut self) -> u32 {
        self.transactions += 1;
        self.transactions
    }

    /// Records a call that answered: `rows` and `read` as it brought them,
    /// `Err` with the error it answered.
    pub fn finish(&mut self, pending: Pending, answer: Result<Read, String>) {
        let Pending {
            started,
            call: Some(mut call),
        } = pending
        else {
            return;
        };
        call.start_us = micros(started.saturating_duration_since(self.started));
        call.duration_us = micros(started.elapsed());
        match answer {
            Ok(read) => {
                call.rows = read.rows;
                call.read = read.values;
            }
            Err(err) => call.reply = short(&err),
        }
        self.push(call);
    }

    fn push(&mut self, call: TracedCall) {
        if self.calls.len() < MAX_CALLS {
            self.calls.push(call);
        } else {
            self.calls_dropped += 1;
        }
    }

    /// Appends the calls of the compensation that ran after this call.
    pub fn append_compensation(&mut self, compensation: CallTrace) {
        let offset = micros(compensation.started.saturating_duration_since(self.started));
        for mut call in compensation.calls {
            call.start_us += offset;
            call.phase = Some("compensate");
            self.push(call);
        }
        self.calls_dropped += compensation.calls_dropped;
    }
}

/// What a call read: rows, and the integers that decide.
#[derive(Debug, Default)]
pub struct Read {
    pub rows: Option<u64>,
    pub values: BTreeMap<Text, i64>,
}

impl Read {
    pub fn rows(rows: u64) -> Self {
        Self {
            rows: Some(rows),
            values: BTreeMap::new(),
        }
    }

    /// A reply read as one integer, under `reply`.
    pub fn integer(value: Option<i64>) -> Self {
        let mut values = BTreeMap::new();
        if let Some(value) = value {
            values.insert(Cow::Borrowed("reply"), value);
        }
        Self { rows: None, values }
    }

    /// A result of `rows` rows: a single row's integer columns are kept by
    /// name (the coupon's `issued_count` and `total_count`, a `COUNT(*)`).
    pub fn result<'a>(
        rows: usize,
        columns: impl IntoIterator<Item = (&'a str, Option<i64>)>,
    ) -> Self {
        let mut read = Self::rows(rows as u64);
        if rows == 1 {
            for (name, value) in columns {
                if read.values.len() == MAX_READ {
                    break;
                }
                if let Some(value) = value {
                    read.values.insert(Cow::Owned(name.to_string()), value);
                }
            }
        }
        read
    }
}

/// The first word of a statement (its kind) and the table it names.
pub fn statement_shape(statement: &str) -> (Text, Option<Box<str>>) {
    /// The kinds a trace names without a copy.
    const KINDS: [&str; 8] = [
        "SELECT", "INSERT", "UPDATE", "DELETE", "REPLACE", "BEGIN", "COMMIT", "ROLLBACK",
    ];
    let mut words = statement.split_whitespace();
    let first = words.next().unwrap_or("");
    let kind: Text = match KINDS.iter().find(|kind| kind.eq_ignore_ascii_case(first)) {
        Some(kind) => Cow::Borrowed(kind),
        None => Cow::Owned(first.to_ascii_uppercase()),
    };
    let after = match &*kind {
        "SELECT" | "DELETE" => "FROM",
        "INSERT" | "REPLACE" => "INTO",
        "UPDATE" => "",
        _ => return (kind, None),
    };
    let table = if after.is_empty() {
        words.next()
    } else {
        words
            .by_ref()
            .position(|word| word.eq_ignore_ascii_case(after))
            .and_then(|_| words.next())
    };
    let table = table.map(|table| {
        table
            .trim_matches(|c: char| c == '`' || c == '(' || c == ',' || c == ';')
            .into()
    });
    (kind, table)
}

/// An error's text as a trace keeps it: its first 120 characters.
fn short(text: &str) -> Text {
    match text.char_indices().nth(120) {
        Some((end, _)) => Cow::Owned(format!("{}…", &text[..end])),
        None => Cow::Owned(text.to_string()),
    }
}

fn micros(duration: std::time::Duration) -> u64 {
    duration.as_micros() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_statement_is_known_by_its_kind_and_table() {
        let shape = |s: &str| {
            let (kind, table) = statement_shape(s);
            (kind.to_string(), table.map(|t| t.to_string()))
        };
        let of = |kind: &str, table: Option<&str>| (kind.to_string(), table.map(str::to_string));
        assert_eq!(
            shape("SELECT total_count, issued_count FROM coupons WHERE id = ?"),
            of("SELECT", Some("coupons"))
        );
        assert_eq!(
            shape("insert into `coupon_issues` (coupon_id) VALUES (?)"),
            of("INSERT", Some("coupon_issues"))
        );
        assert_eq!(
            shape("UPDATE coupons SET issued_count = issued_count + 1"),
            of("UPDATE", Some("coupons"))
        );
        assert_eq!(shape("SELECT 1"), of("SELECT", None));
        assert_eq!(shape("DO RELEASE_ALL_LOCKS()"), of("DO", None));
    }

    #[test]
    fn a_trace_keeps_its_first_calls_and_counts_the_rest() {
        let mut trace = CallTrace::default();
        for _ in 0..MAX_CALLS + 3 {
            let pending = trace.start("redis", "SET");
            trace.finish(pending, Ok(Read::default()));
        }
        assert_eq!((trace.calls.len(), trace.calls_dropped), (MAX_CALLS, 3));
        let pending = trace.start("redis", "GET");
        trace.finish(pending, Err("refused".into()));
        assert_eq!(trace.calls_dropped, 4);
    }

    #[test]
    fn only_a_single_row_has_its_integers_read() {
        let one = Read::result(1, [("issued_count", Some(99)), ("name", None)]);
        assert_eq!(one.values.get("issued_count"), Some(&99));
        assert_eq!(one.values.len(), 1);
        assert!(
            Read::result(2, [("issued_count", Some(1))])
                .values
                .is_empty()
        );
    }
}
