//! wrk, as the bench drives it: the Lua scripts of its requests, one run,
//! and what wrk reports, read.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::Context;

use crate::launcher::Launched;
use crate::paths::root;

pub(super) fn write_script(name: &str, source: &str) -> anyhow::Result<PathBuf> {
    let dir = root().join("target").join("bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(name);
    std::fs::write(&path, source)?;
    Ok(path)
}

/// The same POST again and again.
pub(super) fn sold_out_script(body: &str) -> String {
    let body = body.replace('\\', "\\\\").replace('"', "\\\"");
    format!(
        "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nwrk.body = \"{body}\"\n"
    )
}

/// Members one issue run may use: each of wrk's (at most two) threads
/// counts through its own half, at up to 50,000 requests a second for 10 s.
pub(super) const ISSUE_MEMBERS: u64 = 1_000_000;

/// A fresh member per request, from the pool starting at `first`.
pub(super) fn issue_script(first: u64) -> String {
    format!(
        r#"wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local threads = 0
function setup(thread)
  thread:set("id", threads)
  threads = threads + 1
end
function init(args)
  next_member = {first} + id * {half}
end
function request()
  next_member = next_member + 1
  return wrk.format(nil, nil, nil, '{{"memberId": ' .. next_member .. ', "method": "REDIS_LUA"}}')
end
function response(status, headers, body)
  if status ~= 200 then
    io.write("REFUSED ", status, " ", body, "\n")
  end
end
"#,
        half = ISSUE_MEMBERS / 2 - 1
    )
}

/// What one wrk run measured.
#[derive(Debug, Clone, Copy)]
pub(super) struct Run {
    pub(super) requests_per_s: f64,
    /// Answers other than 2xx, per second (the sold-out pair's 409s).
    pub(super) refused_per_s: f64,
    pub(super) p50_us: f64,
    pub(super) p99_us: f64,
    /// wrk's mean latency: the figure a budget's stages add up to.
    pub(super) mean_us: f64,
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} req/s, p50 {:.0} µs, p99 {:.0} µs",
            self.requests_per_s, self.p50_us, self.p99_us
        )
    }
}

pub(super) fn wrk_run(
    wrk: &Path,
    process: &Launched,
    script: &Path,
    coupon: &str,
    connections: u32,
    duration: &str,
) -> anyhow::Result<Run> {
    let threads = connections.min(2);
    let url = format!("{}/lab/coupons/{coupon}/issue", process.base_url());
    let output = Command::new(wrk)
        .args([
            "--latency",
            "-t",
            &threads.to_string(),
            "-c",
            &connections.to_string(),
        ])
        .args(["-d", duration, "-s"])
        .arg(script)
        .arg(&url)
        .output()
        .context("cannot run wrk")?;
    let text = String::from_utf8_lossy(&output.stdout);
    anyhow::ensure!(output.status.success(), "wrk failed: {text}");
    if let Some(refused) = text.lines().find(|line| line.starts_with("REFUSED ")) {
        println!("  (refused answers, the first: {refused})");
    }
    parse_wrk(&text).with_context(|| format!("cannot read wrk's report:\n{text}"))
}

/// Reads `Requests/sec` and the 50 % and 99 % lines of `--latency`.
fn parse_wrk(text: &str) -> Option<Run> {
    let percentile = |label: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|line| line.strip_prefix(label))
            .and_then(|value| micros(value.trim()))
    };
    let requests_per_s: f64 = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Requests/sec:"))?
        .trim()
        .parse()
        .ok()?;
    // "  120000 requests in 10.00s, 20.00MB read"
    let seconds = text.lines().find_map(|line| {
        let (_, rest) = line.trim().split_once(" requests in ")?;
        Some(micros(rest.split(',').next()?.trim())? / 1e6)
    })?;
    let refused: f64 = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Non-2xx or 3xx responses:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0.0);
    // "    Latency   251.00us  120.00us   3.00ms   90.00%"
    let mean_us = text
        .lines()
        .find_map(|line| line.trim().strip_prefix("Latency "))
        .and_then(|rest| micros(rest.split_whitespace().next()?))?;
    Some(Run {
        mean_us,
        requests_per_s,
        refused_per_s: refused / seconds,
        p50_us: percentile("50.000%").or_else(|| percentile("50%"))?,
        p99_us: percentile("99.000%").or_else(|| percentile("99%"))?,
    })
}

/// `221.00us`, `7.10ms`, `1.02s` in microseconds.
fn micros(value: &str) -> Option<f64> {
    let (number, factor) = if let Some(n) = value.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = value.strip_suffix("ms") {
        (n, 1_000.0)
    } else if let Some(n) = value.strip_suffix('s') {
        (n, 1_000_000.0)
    } else {
        return None;
    };
    Some(number.trim().parse::<f64>().ok()? * factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrk_reports_are_read() {
        let text = "Running 10s test @ http://x\n  2 threads and 50 connections\n  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency   301.50us  120.00us   9.00ms   90.00%\n  Latency Distribution\n     50%  221.00us\n     75%  400.00us\n     90%    1.20ms\n     99%    7.10ms\n  120000 requests in 10.00s, 20.00MB read\nRequests/sec:  12200.50\nTransfer/sec:      2.00MB\n";
        let run = parse_wrk(text).unwrap();
        assert_eq!(run.requests_per_s, 12200.5);
        assert_eq!(run.refused_per_s, 0.0);
        assert_eq!(run.p50_us, 221.0);
        assert_eq!(run.p99_us, 7100.0);
        assert_eq!(run.mean_us, 301.5);
        assert_eq!(micros("1.5s"), Some(1_500_000.0));
    }
}
