//! What every client was told, one record per request, from k6 itself:
//! `loadtest/issue.js` emits one `issue_request` sample per request (value:
//! latency; tags: status, outcome; metadata: member), `k6 run --out
//! json=FILE` writes each sample as a line, and this module keeps those
//! lines and writes them as `requests-<METHOD>.csv` beside the report.

use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::Path;

use anyhow::Context;
use serde_json::Value;

/// The metric `loadtest/issue.js` records each request's answer under.
pub const METRIC: &str = "issue_request";

/// One request as its client saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub member: u64,
    /// The HTTP status; 0 when no answer came.
    pub status: u16,
    /// The envelope's outcome name, `TIMED_OUT` or `NO_ANSWER`.
    pub outcome: String,
    pub latency_ms: f64,
    /// When k6 recorded the answer (RFC 3339, k6's clock).
    pub time: String,
    /// The error message the client read (empty on success).
    pub message: String,
}

impl Record {
    /// Told the coupon is theirs (200 issued or 202 accepted).
    pub fn told_success(&self) -> bool {
        matches!(self.status, 200 | 202)
    }
}

/// Reads the `issue_request` points of a k6 JSON output file.
pub fn read_k6_json(path: &Path) -> anyhow::Result<Vec<Record>> {
    let file = std::fs::File::open(path)
        .with_context(|| format!("k6 wrote no per-request output {}", path.display()))?;
    let mut records = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line?;
        // Most lines are k6's own metrics: skip them before parsing.
        if !line.contains(METRIC) {
            continue;
        }
        let point: Value = serde_json::from_str(&line)
            .with_context(|| format!("unreadable k6 output line: {line}"))?;
        if point["type"] != "Point" || point["metric"] != METRIC {
            continue;
        }
        let data = &point["data"];
        let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
        let member = text(&data["metadata"]["member"]);
        let status = text(&data["tags"]["status"]);
        records.push(Record {
            member: member
                .parse()
                .with_context(|| format!("a record without its member: {line}"))?,
            status: status
                .parse()
                .with_context(|| format!("a record without its status: {line}"))?,
            outcome: text(&data["tags"]["outcome"]),
            latency_ms: data["value"].as_f64().unwrap_or(0.0),
            time: text(&data["time"]),
            message: text(&data["metadata"]["message"]),
        });
    }
    Ok(records)
}

/// The records as CSV, one line each, in the order k6 wrote them.
pub fn csv(method: &str, coupon: u64, records: &[Record]) -> String {
    let mut out = String::from("method,coupon,member,status,outcome,latency_ms,time,message\n");
    for r in records {
        // RFC 4180: the message quoted, its quotes doubled.
        let _ = writeln!(
            out,
            "{method},{coupon},{},{},{},{:.3},{},\"{}\"",
            r.member,
            r.status,
            r.outcome,
            r.latency_ms,
            r.time,
            r.message.replace('"', "\"\"")
        );
    }
    out
}

/// The records of a `requests-<METHOD>.csv` that [`csv`] wrote.
pub fn read_csv(path: &Path) -> anyhow::Result<Vec<Record>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("no request records {}", path.display()))?;
    let mut records = Vec::new();
    for line in text.lines().skip(1) {
        // The message, last and quoted, may hold commas: the first seven
        // fields are split off before it.
        let fields: Vec<&str> = line.splitn(8, ',').collect();
        let [_, _, member, status, outcome, latency_ms, time, message] = fields[..] else {
            anyhow::bail!("a request record of fewer fields: {line}");
        };
        let message = message.strip_prefix('"').unwrap_or(message);
        let message = message.strip_suffix('"').unwrap_or(message);
        records.push(Record {
            member: member
                .parse()
                .with_context(|| format!("member of {line}"))?,
            status: status
                .parse()
                .with_context(|| format!("status of {line}"))?,
            outcome: outcome.to_string(),
            latency_ms: latency_ms
                .parse()
                .with_context(|| format!("latency of {line}"))?,
            time: time.to_string(),
            message: message.replace("\"\"", "\""),
        });
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_issue_request_points_become_records() {
        let dir = std::env::temp_dir().join(format!("couponlab-records-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("k6.json");
        let lines = [
            r#"{"type":"Metric","data":{"name":"issue_request","type":"trend"},"metric":"issue_request"}"#,
            r#"{"metric":"http_req_duration","type":"Point","data":{"time":"t","value":1.5,"tags":{"status":"200"}}}"#,
            r#"{"metric":"issue_request","type":"Point","data":{"time":"2026-12-01T10:00:00Z","value":1.5,"tags":{"outcome":"ISSUED","status":"200"},"metadata":{"member":"7"}}}"#,
            r#"{"metric":"issue_request","type":"Point","data":{"time":"2026-12-01T10:00:01Z","value":500,"tags":{"outcome":"TIMED_OUT","status":"0"},"metadata":{"member":"8","message":"request timeout, \"k6\""}}}"#,
        ];
        std::fs::write(&path, lines.join("\n")).unwrap();
        let records = read_k6_json(&path).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(records.len(), 2, "{records:?}");
        assert_eq!((records[0].member, records[0].status), (7, 200));
        assert!(records[0].told_success());
        assert_eq!(records[1].outcome, "TIMED_OUT");
        assert!(!records[1].told_success());
        let csv = csv("REDIS_LUA", 3, &records);
        assert_eq!(
            csv.lines().nth(2),
            Some(
                r#"REDIS_LUA,3,8,0,TIMED_OUT,500.000,2026-12-01T10:00:01Z,"request timeout, ""k6""""#
            )
        );
        let written = dir.join("requests.csv");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&written, &csv).unwrap();
        let read = read_csv(&written).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        assert_eq!(read, records, "the CSV reads back as written");
    }
}
