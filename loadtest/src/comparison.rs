//! The modes' runs: `compare` and `spike` run each method in turn on a
//! coupon of its own, `capacity` raises one method's arrival rate step by
//! step; each writes its report and says which claims a method broke.

use std::collections::BTreeMap;

use anyhow::bail;
use clap::Args;

use crate::answers::Strategies;
use crate::api::Api;
use crate::durations::duration_text;
use crate::progress::Progress;
use crate::provenance;
use crate::report::{self, Provenance};
use crate::rounds::{self, MethodRounds};
use crate::run::{Arrivals, Measured, Run};
use crate::runner::Runner;

/// `compare` or `spike`: each of `methods` on its own coupon of `total`,
/// `rounds` times.
pub struct Comparison {
    pub methods: Vec<String>,
    pub total: u64,
    pub arrivals: Arrivals,
    pub rounds: u32,
}

/// `capacity`: `method`'s rate raised from `start` by `step` up to `max`,
/// `duration` a step, while failures and p99 stay within their bounds.
#[derive(Args)]
pub struct Capacity {
    /// The method whose capacity is searched
    #[arg(long)]
    method: String,
    /// The first arrival rate, requests a second
    #[arg(long, default_value_t = 200)]
    start: u64,
    /// How much each step raises the rate
    #[arg(long, default_value_t = 200)]
    step: u64,
    /// The highest rate tried
    #[arg(long, default_value_t = 5000)]
    max: u64,
    /// How long each step lasts: 500ms, 10s, 2m, 1h
    #[arg(long, default_value = "5s", value_parser = duration_text)]
    duration: String,
    /// The share of 503s and errors a step may have and still hold
    #[arg(long, default_value_t = 0.01)]
    max_failure_rate: f64,
    /// The p99 latency a step may have and still hold, milliseconds
    #[arg(long, default_value_t = 100.0)]
    max_p99_ms: f64,
}

/// The methods' figures of one invocation, and the claims they broke.
pub struct Report {
    /// Method → claims it makes that this run broke, with the figure.
    broken: Vec<(String, &'static str, u64)>,
}

impl Report {
    /// A method that claims a guarantee and broke it fails the run, loudly,
    /// unless `allowed` (a demonstration of what breaks).
    pub fn check_claims(self, allowed: bool) -> anyhow::Result<()> {
        if self.broken.is_empty() {
            return Ok(());
        }
        eprintln!("\n!!! BROKEN CLAIMS: a method broke a guarantee it claims (README, `claims`):");
        for (method, claim, figure) in &self.broken {
            eprintln!("!!!   {method} claims `{claim}`; this run broke it {figure} times");
        }
        if allowed {
            eprintln!("!!! (--allow-broken: reported, not failed)");
            return Ok(());
        }
        bail!(
            "{} broken claims (pass --allow-broken to demonstrate them without failing)",
            self.broken.len()
        )
    }
}

/// Records what each measured run broke of the claims of its method.
fn broken_claims(method: &str, measured: &Measured, into: &mut Vec<(String, &'static str, u64)>) {
    if let Some(verification) = &measured.row.verification {
        for claim in verification.broken_claims(&measured.claims) {
            into.push((
                method.to_string(),
                claim.word(),
                verification.breaking(claim),
            ));
        }
    }
}

/// Runs each method on its own coupon, on each runner's engine, and
/// writes the comparison.
pub fn compare(runners: &[Runner], comparison: &Comparison) -> anyhow::Result<Report> {
    let runner = &runners[0];
    let mut methods = comparison.methods.clone();
    if methods == ["ALL"] {
        methods = loaded_methods(&runner.api)?;
    }
    let total = comparison.total;
    let members = comparison.arrivals.members()?;
    let rounds = comparison.rounds;
    // Method by method, each engine's runs side by side.
    let runs: Vec<(&String, &Runner)> = methods
        .iter()
        .flat_map(|method| runners.iter().map(move |runner| (method, runner)))
        .collect();
    let engine_of = |runner: &Runner| runner.engine.filter(|_| runners.len() > 1);
    let mut measured: Vec<MethodRounds> = runs
        .iter()
        .map(|(method, runner)| MethodRounds {
            method: crate::engines::key(method, engine_of(runner)),
            rounds: Vec::new(),
        })
        .collect();
    let mut broken = Vec::new();
    let mut progress = Progress::new(runs.len() * rounds as usize);
    for round in 1..=rounds {
        for (i, (method, runner)) in runs.iter().enumerate() {
            let run = Run {
                method,
                total,
                members,
                arrivals: &comparison.arrivals,
                round: (rounds > 1).then_some(round),
                engine: engine_of(runner),
            };
            let place = progress.line(
                (rounds > 1).then_some((round, rounds)),
                runner.engine,
                (i + 1, runs.len()),
                method,
            );
            println!(
                "{place}: {}",
                match &comparison.arrivals {
                    Arrivals::Spike { .. } =>
                        format!("{members} members at once on a coupon of {total}"),
                    Arrivals::Rate { rate, duration } =>
                        format!("{rate} req/s for {duration} on a coupon of {total}"),
                }
            );
            let run = run.execute(runner)?;
            progress.ended_one();
            said(&run);
            broken_claims(&measured[i].method, &run, &mut broken);
            measured[i].rounds.push(run);
        }
    }
    let (rows, raw) = rounds::combine(measured);
    let (title, mut description) = match &comparison.arrivals {
        Arrivals::Spike { .. } => (
            "Event open",
            format!(
                "Each method on its own coupon of {total}: {members} distinct members send one request each, all at second zero."
            ),
        ),
        Arrivals::Rate { rate, duration } => (
            "Methods side by side",
            format!(
                "Each method on its own coupon of {total}: {rate} requests/s for {duration}, every request from a distinct member."
            ),
        ),
    };
    description.push_str(&rounds::described(rounds));
    if runners.len() > 1 {
        description.push_str(&engines_described(runners)?);
    }
    let provenance = provenance::describe(&runner.sources, &runner.k6, &raw)?;
    report::write(&runner.out, title, &description, &rows, &raw, &provenance)?;
    println!("\nreport: {}", runner.out.join("report.md").display());
    print!(
        "{}",
        report::markdown(title, &description, &rows, &Provenance::read(&provenance)?)
            .lines()
            .skip(6)
            .collect::<Vec<_>>()
            .join("\n")
    );
    println!();
    Ok(Report { broken })
}

/// The engines side by side, as each runner's lab names its own.
fn engines_described(runners: &[Runner]) -> anyhow::Result<String> {
    let mut engines = Vec::new();
    for runner in runners {
        let loaded = Strategies::read(&runner.api)?;
        engines.push((runner.engine.unwrap_or("?"), loaded.engine));
    }
    let named: Vec<(&str, &serde_json::Value)> = engines
        .iter()
        .map(|(name, engine)| (*name, engine))
        .collect();
    Ok(crate::engines::described(&named))
}

/// One run's figures, as the run ends.
fn said(measured: &Measured) {
    let row = &measured.row;
    println!(
        "      {:.0} req/s, p99 {:.1} ms, 2xx {}, 409 {}, 503 {}, rows {} of {}{}",
        row.requests_per_second,
        row.p99_ms,
        row.accepted,
        row.conflicts,
        row.unavailable,
        row.issue_rows,
        row.total,
        row.drain_ms
            .map_or(String::new(), |ms| format!(", drained in {ms:.0} ms"))
    );
    if let Some(verification) = &row.verification {
        println!("      verified: {}", verification.verdict);
    }
}

/// `--methods all`: every method the server has loaded, in its order.
fn loaded_methods(api: &Api) -> anyhow::Result<Vec<String>> {
    let loaded = Strategies::read(api)?;
    let methods: Vec<String> = loaded
        .strategies
        .into_iter()
        .map(|strategy| strategy.method)
        .collect();
    if methods.is_empty() {
        bail!("--methods all: the server has no method loaded");
    }
    Ok(methods)
}

/// Raises the arrival rate on one method until failures or p99 pass their
/// bound (over `rounds` rounds a step, their medians); reports the highest
/// rate that held.
pub fn capacity(runner: &Runner, search: &Capacity, rounds: u32) -> anyhow::Result<Report> {
    let Capacity {
        method,
        start,
        step,
        max,
        duration,
        max_failure_rate,
        max_p99_ms,
    } = search;
    let (start, step, max) = (*start, *step, *max);
    let mut rows = Vec::new();
    let mut raw = BTreeMap::new();
    let mut broken = Vec::new();
    let mut held = None;
    let mut rate = start;
    while rate <= max {
        let arrivals = Arrivals::Rate {
            rate,
            duration: duration.clone(),
        };
        // A total no run can exhaust: every request does the full work.
        let members = arrivals.members()?;
        let mut step_rounds = MethodRounds {
            method: format!("{method} @ {rate}/s"),
            rounds: Vec::new(),
        };
        for round in 1..=rounds {
            let of_rounds = if rounds > 1 {
                format!(" (round {round}/{rounds})")
            } else {
                String::new()
            };
            println!("{method} at {rate} req/s for {duration}{of_rounds}");
            let run = Run {
                method,
                total: members,
                members,
                arrivals: &arrivals,
                round: (rounds > 1).then_some(round),
                engine: None,
            };
            let mut measured = run.execute(runner)?;
            broken_claims(method, &measured, &mut broken);
            measured.row.method = step_rounds.method.clone();
            step_rounds.rounds.push(measured);
        }
        let (mut step_rows, step_raw) = rounds::combine(vec![step_rounds]);
        let row = step_rows.remove(0);
        let holds = row.failure_rate() <= *max_failure_rate
            && row.p99_ms <= *max_p99_ms
            && row.dropped == 0;
        println!(
            "      {:.0} req/s achieved, p99 {:.1} ms, failures {:.2}%, dropped {}: {}",
            row.requests_per_second,
            row.p99_ms,
            row.failure_rate() * 100.0,
            row.dropped,
            if holds { "held" } else { "did not hold" }
        );
        raw.extend(step_raw);
        rows.push(row);
        if !holds {
            break;
        }
        held = Some(rate);
        rate += step;
    }
    let verdict = match held {
        // Every step held: the limit lies beyond the search.
        Some(rate) if rate + step > max => format!(
            "{method} held every step up to **{rate} req/s**, the last one below --max {max}; raise --max to search further"
        ),
        Some(rate) => format!("The highest arrival rate that held for {method}: **{rate} req/s**"),
        None => format!("{method} did not hold even {start} req/s"),
    };
    let description = format!(
        "{verdict} (bounds: failures ≤ {:.1}%, p99 ≤ {max_p99_ms} ms, no dropped iterations; {duration} per step, on a coupon no step can sell out).{}",
        max_failure_rate * 100.0,
        rounds::described(rounds)
    );
    let provenance = provenance::describe(&runner.sources, &runner.k6, &raw)?;
    report::write(
        &runner.out,
        "Capacity of one coupon",
        &description,
        &rows,
        &raw,
        &provenance,
    )?;
    println!(
        "\n{verdict}\nreport: {}",
        runner.out.join("report.md").display()
    );
    Ok(Report { broken })
}
