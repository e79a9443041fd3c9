//! `cargo xtask loadtest smoke`, the checked runs `cargo xtask test` ends
//! with: the runner end to end on a short, slow run of two rounds, one
//! spike on two engines side by side, then short spikes under faults whose verification figures are checked against a recount
//! of the per-request records and the rows.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{Context, bail};

use crate::comparison::{Comparison, compare};
use crate::engines::Engine;
use crate::faults::FaultPlan;
use crate::k6::K6;
use crate::paths::{root, target_dir};
use crate::records;
use crate::report::distribution::{Entry, Results};
use crate::report::why::Trace;
use crate::run::Arrivals;
use crate::runner::Runner;
use crate::spread::Spread;
use crate::verification::Verification;

pub fn smoke() -> anyhow::Result<()> {
    println!("load test smoke run: k6 against a server of its own");
    let out = root().join("target").join("loadtest-smoke");
    std::fs::remove_dir_all(&out).ok();
    // Checked figures only: the smoke run writes to no Prometheus.
    let runner = Runner::serving(
        FaultPlan::default(),
        false,
        K6::find(None)?,
        out.clone(),
        None,
    )?;
    let comparison = Comparison {
        methods: methods_named("PESSIMISTIC,REDIS_STREAM_ATOMIC"),
        total: 10,
        arrivals: Arrivals::Rate {
            rate: 20,
            duration: "2s".into(),
        },
        rounds: 2,
    };
    compare(std::slice::from_ref(&runner), &comparison)?.check_claims(false)?;
    drop(runner);
    let results = Results::read(&out)?;
    let chart = std::fs::read_to_string(out.join("chart.svg"))?;
    let html = std::fs::read_to_string(out.join("report.html"))?;
    for method in ["PESSIMISTIC", "REDIS_STREAM_ATOMIC"] {
        let entry = results.method(method)?;
        // 10 issued of 10, none over, in both rounds.
        let flat = |value| Spread {
            median: value,
            min: value,
            max: value,
        };
        let expected = [("total", 10.0), ("rows", 10.0), ("over-issued", 0.0)]
            .map(|(name, v)| (name, flat(v)));
        for (figure, spread) in expected {
            if entry.spread.get(figure) != Some(&spread) || entry.rounds.len() != 2 {
                bail!(
                    "unexpected smoke figures for {method} over {} rounds: {figure} {:?}",
                    entry.rounds.len(),
                    entry.spread.get(figure)
                );
            }
        }
        if !chart.contains(&format!(">{method}</text>")) {
            bail!("the smoke chart has no bar for {method}");
        }
        if !html.contains(&format!("<tr data-method=\"{method}\">")) {
            bail!("the smoke report.html has no row for {method}");
        }
        // Every request has its record: 20/s for 2 s.
        if told_success(&out, &format!("{method}-round1"))?.len() < 10 {
            bail!("the smoke run recorded too few successes for {method}");
        }
        // Why: one request's calls, read from the server's traces.
        let example = entry.example_trace.as_ref().map(Trace::read).transpose()?;
        let traced = |trace: &Trace| {
            let capabilities = trace.calls.iter().map(|call| call.capability.as_str());
            capabilities.into_iter().any(|c| c == "sql" || c == "redis")
        };
        if !example.as_ref().is_some_and(traced) {
            bail!("the smoke results have no example trace for {method} with its calls");
        }
    }
    screenshot(&out.join("report.html"), "report.png")?;
    println!("load test smoke run: report, chart and records as expected");
    engines()?;
    under_faults()
}

/// One spike on MariaDB, MariaDB with snapshot isolation and PostgreSQL,
/// two rounds: READ COMMITTED over-issues on MariaDB and PostgreSQL,
/// REPEATABLE READ over-issues on MariaDB alone and is refused instead on
/// the other two, PESSIMISTIC and REDIS_LUA sell out exactly everywhere,
/// and every figure has its spread.
fn engines() -> anyhow::Result<()> {
    println!("load test smoke run: a spike on mariadb, mariadb-si and postgres, 2 rounds");
    let out = root().join("target").join("loadtest-engines");
    std::fs::remove_dir_all(&out).ok();
    let engines = [
        Engine::MariaDb,
        Engine::MariaDbSnapshotIsolation,
        Engine::Postgres,
    ];
    let runners = engines
        .into_iter()
        .enumerate()
        .map(|(n, engine)| {
            let k6 = K6::find(None)?;
            Runner::serving(
                FaultPlan::default(),
                false,
                k6,
                out.clone(),
                Some((n, engine)),
            )
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let comparison = Comparison {
        methods: methods_named("READ_COMMITTED,REPEATABLE_READ,PESSIMISTIC,REDIS_LUA"),
        total: 50,
        arrivals: Arrivals::Spike { members: 1000 },
        rounds: 2,
    };
    compare(&runners, &comparison)?.check_claims(false)?;
    drop(runners);
    let results = Results::read(&out)?;
    if !results
        .description
        .contains("Engines side by side: **mariadb**")
    {
        bail!("the engines' report does not open with its engines");
    }
    let over_issued = |key: &str| -> anyhow::Result<u64> {
        let entry = results.method(key)?;
        if !entry.spread.contains_key("over-issued") {
            bail!("{key} has no spread over its rounds: {:?}", entry.spread);
        }
        Ok(verification(entry)?.over_issued)
    };
    for key in [
        "READ_COMMITTED@mariadb",
        "READ_COMMITTED@postgres",
        "REPEATABLE_READ@mariadb",
    ] {
        if over_issued(key)? == 0 {
            bail!("{key} did not over-issue");
        }
    }
    for engine in ["mariadb-si", "postgres"] {
        let key = format!("REPEATABLE_READ@{engine}");
        let refused = answered(results.method(&key)?, "SERIALIZATION_FAILURE");
        if over_issued(&key)? != 0 || refused == 0 {
            bail!("{key} over-issued or refused nothing");
        }
    }
    for method in ["PESSIMISTIC", "REDIS_LUA"] {
        for engine in ["mariadb", "mariadb-si", "postgres"] {
            let key = format!("{method}@{engine}");
            let issued = answered(results.method(&key)?, "ISSUED");
            if over_issued(&key)? != 0 || issued != 50 {
                bail!("{key} did not sell out exactly: {issued} issued");
            }
        }
    }
    println!(
        "      over-issued: READ_COMMITTED {} / {} / {}, REPEATABLE_READ {} / {} / {} (mariadb / mariadb-si / postgres)",
        over_issued("READ_COMMITTED@mariadb")?,
        over_issued("READ_COMMITTED@mariadb-si")?,
        over_issued("READ_COMMITTED@postgres")?,
        over_issued("REPEATABLE_READ@mariadb")?,
        over_issued("REPEATABLE_READ@mariadb-si")?,
        over_issued("REPEATABLE_READ@postgres")?,
    );
    Ok(())
}

/// A killed server loses what REDIS_PUBSUB acknowledged and nothing of
/// REDIS_STREAM_ATOMIC's; a cut Redis link makes REDIS_LUA neither
/// over-issue nor strand stock.
fn under_faults() -> anyhow::Result<()> {
    let out = root().join("target").join("loadtest-faults");
    std::fs::remove_dir_all(&out).ok();

    println!("load test smoke run: kill-server during a spike");
    // The slowed database keeps the subscriber behind the 202s when the
    // server dies, so something acknowledged is still unconfirmed.
    let dir = out.join("kill-server");
    let faults = ["db-latency=20@0s+3s", "kill-server@0.3s"];
    let runner = spike(&faults, "REDIS_PUBSUB,REDIS_STREAM_ATOMIC", 600, 200, &dir)?;
    for (method, lost_expected) in [("REDIS_PUBSUB", true), ("REDIS_STREAM_ATOMIC", false)] {
        let (reported, recounted) = acked_but_lost(&runner, &dir, method)?;
        if reported != recounted || (reported > 0) != lost_expected {
            bail!(
                "{method} after kill-server: ackedButLost {reported}, recounted {recounted} (expected {})",
                if lost_expected { "> 0" } else { "0" }
            );
        }
        println!("      {method}: ackedButLost {reported}, as recounted");
    }
    drop(runner);

    println!("load test smoke run: redis-cut during a spike");
    let dir = out.join("redis-cut");
    spike(&["redis-cut@0.1s+1s"], "REDIS_LUA", 3000, 1500, &dir)?;
    let verification = verification(Results::read(&dir)?.method("REDIS_LUA")?)?.clone();
    if verification.over_issued != 0 || verification.stranded_stock != 0 {
        bail!("REDIS_LUA after redis-cut: {verification:?}");
    }
    println!("      REDIS_LUA: no over-issue, no stranded stock");
    Ok(())
}

/// A spike of `members` asking for `total` coupons of each of `methods`
/// under `faults`, its report in `dir` and its claims checked; the runner,
/// for reading the rows after.
fn spike(
    faults: &[&str],
    methods: &str,
    members: u64,
    total: u64,
    dir: &Path,
) -> anyhow::Result<Runner> {
    let plan = FaultPlan::parse(faults)?;
    let runner = Runner::serving(plan, false, K6::find(None)?, dir.to_path_buf(), None)?;
    let comparison = Comparison {
        methods: methods_named(methods),
        total,
        arrivals: Arrivals::Spike { members },
        rounds: 1,
    };
    compare(std::slice::from_ref(&runner), &comparison)?.check_claims(false)?;
    Ok(runner)
}

/// A picture of `page` as a person's browser shows it at 1280 px, for
/// looking at afterwards: `<target>/artifacts/<name>`.
fn screenshot(page: &Path, name: &str) -> anyhow::Result<()> {
    let artifacts = target_dir().join("artifacts");
    std::fs::create_dir_all(&artifacts)?;
    let picture = artifacts.join(name);
    crate::run(
        Command::new("chromium")
            .args([
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                "--window-size=1280,1600",
            ])
            .arg(format!("--screenshot={}", picture.display()))
            .arg(format!("file://{}", page.display()))
            .stderr(Stdio::null()),
    )?;
    println!("load test smoke run: {} written", picture.display());
    Ok(())
}

/// The runner's `ackedButLost` for `method`, and the same figure counted
/// here from the CSV of records and the rows read again.
fn acked_but_lost(runner: &Runner, dir: &Path, method: &str) -> anyhow::Result<(u64, u64)> {
    let results = Results::read(dir)?;
    let figures = results.method(method)?;
    let (reported, coupon) = (verification(figures)?.acked_but_lost, figures.coupon_id);
    let rows = runner.sources.truth(coupon)?.rows;
    let recounted = told_success(dir, method)?
        .iter()
        .filter(|member| !rows.contains_key(member))
        .count() as u64;
    Ok((reported, recounted))
}

/// The members `requests-<RUN>.csv` (`METHOD`, or `METHOD-roundN`) says
/// were told 200 or 202.
fn told_success(dir: &Path, run: &str) -> anyhow::Result<BTreeSet<u64>> {
    let records = records::read_csv(&dir.join(format!("requests-{run}.csv")))?;
    Ok(records
        .iter()
        .filter(|record| record.told_success())
        .map(|record| record.member)
        .collect())
}

/// The runner's verification of a run, which every run of the smoke has.
fn verification(entry: &Entry) -> anyhow::Result<&Verification> {
    entry
        .verification
        .as_ref()
        .context("a run without its verification")
}

/// The requests the server answered with `outcome`.
fn answered(entry: &Entry, outcome: &str) -> u64 {
    entry.result.requests.answered(outcome)
}

fn methods_named(list: &str) -> Vec<String> {
    list.split(',').map(String::from).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::report::{self, Row, figures};

    /// What the smoke reads is what the report writes: the headings of the
    /// spreads, the verification's names, the coupon and the outcomes.
    #[test]
    fn the_smoke_reads_results_json_as_the_report_writes_it() {
        let round = |rows: u64| Row {
            method: "PESSIMISTIC".into(),
            total: 10,
            issue_rows: rows,
            ..Row::default()
        };
        let row = figures::combined(&[round(10), round(12)], 0);
        let verified = Verification {
            acked_but_lost: 2,
            ..Verification::default()
        };
        let mut entry = report::tests::entry(7, json!({ "ISSUED": 10 }));
        entry["verification"] = json!(verified);
        entry["rounds"] = json!([entry.clone(), entry.clone()]);
        let methods = [("PESSIMISTIC".to_string(), entry)].into_iter().collect();
        let dir = std::env::temp_dir().join(format!("couponlab-smoke-{}", std::process::id()));
        report::write(&dir, "t", "d", &[row], &methods, &Value::Null).unwrap();
        let results = Results::read(&dir).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        let read = results.method("PESSIMISTIC").unwrap();
        let rows = read.spread["rows"];
        assert_eq!((rows.median, rows.min, rows.max), (11.0, 10.0, 12.0));
        assert_eq!(read.spread["total"].median, 10.0);
        assert_eq!((read.coupon_id, read.rounds.len()), (7, 2));
        assert_eq!(verification(read).unwrap().acked_but_lost, 2);
        assert_eq!(
            (answered(read, "ISSUED"), answered(read, "SOLD_OUT")),
            (10, 0)
        );
        assert!(results.method("REDIS_LUA").is_err());
    }
}
