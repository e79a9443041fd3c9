//! One sample of a running soak: what the server, its database, Redis,
//! the recorder and the issue requests say at that moment.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use couponlab_contract::{ISSUE_STREAM, WRITE_BEHIND_STREAM};

use super::Load;
use super::report::{FIGURES, Sample};
use crate::api::Api;
use crate::idle::ScratchDatabase;
use crate::proc_stats;
use crate::server::Server;

/// Reads every figure once, in the order of [`FIGURES`].
pub(super) fn take(
    server: &Server,
    api: &Api,
    db: &ScratchDatabase,
    redis: &mut redis::Connection,
    load: &Load,
    started: Instant,
) -> anyhow::Result<Sample> {
    let pid = server.process().pid();
    let coupons = load.coupons.lock().unwrap().clone();
    let read = Instant::now();
    api.get(&format!("/lab/coupons/{}/result", coupons[2]))?;
    let result_ms = read.elapsed().as_secs_f64() * 1e3;
    let mut latencies = std::mem::take(&mut *load.latencies_us.lock().unwrap());
    latencies.sort_unstable();
    let p99_ms = latencies
        .get(latencies.len() * 99 / 100)
        .map_or(0.0, |&us| us as f64 / 1e3);
    let connections = db.connections()?;
    let info: String = redis::cmd("INFO").arg("memory").query(redis)?;
    let used_memory: f64 = info
        .lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|bytes| bytes.trim().parse().ok())
        .unwrap_or(0.0);
    let keys: u64 = redis::cmd("DBSIZE").query(redis)?;
    let (entries, pending) = stream_figures(redis)?;
    let metrics = api.get_text("/metrics")?;
    let recorded = metrics
        .lines()
        .find_map(|line| line.strip_prefix("couponlab_recorded_coupons{state=\"live\"} "))
        .and_then(|n| n.trim().parse::<f64>().ok())
        .unwrap_or(0.0);
    let values = vec![
        proc_stats::rss_kib(pid).unwrap_or(0) as f64 / 1024.0,
        proc_stats::open_fds(pid).unwrap_or(0) as f64,
        connections as f64,
        used_memory / (1024.0 * 1024.0),
        keys as f64,
        entries as f64,
        pending as f64,
        recorded,
        result_ms,
        p99_ms,
    ];
    Ok(Sample {
        at_s: started.elapsed().as_secs_f64(),
        accepted: load.accepted.load(Ordering::Relaxed),
        coupons: db.coupons()?,
        values,
    })
}

/// Entries and pending entries over every stream of both kinds.
fn stream_figures(redis: &mut redis::Connection) -> anyhow::Result<(u64, u64)> {
    let (mut entries, mut pending) = (0, 0);
    for kind in [ISSUE_STREAM, WRITE_BEHIND_STREAM] {
        let pattern = format!("{}*", kind.prefix);
        let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query(redis)?;
        for key in keys.iter().filter(|key| !key.ends_with(":dead")) {
            entries += redis::cmd("XLEN").arg(key).query::<u64>(redis)?;
            let summary: redis::Value = redis::cmd("XPENDING")
                .arg(key)
                .arg(kind.group)
                .query(redis)
                .unwrap_or(redis::Value::Nil);
            if let redis::Value::Array(fields) = summary
                && let Some(redis::Value::Int(count)) = fields.first()
            {
                pending += *count as u64;
            }
        }
    }
    Ok((entries, pending))
}

/// A sample as one line of the soak's progress.
pub(super) fn progress(sample: &Sample, duration: Duration) -> String {
    let mut line = format!(
        "[{:>5.0}/{} s] accepted {}",
        sample.at_s,
        duration.as_secs(),
        sample.accepted
    );
    for ((name, unit, _), value) in FIGURES.iter().zip(&sample.values) {
        let _ = write!(line, " · {name} {value:.1}{unit}");
    }
    line
}
