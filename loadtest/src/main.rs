//! The couponlab load runner: what `cargo xtask loadtest | bench | idle |
//! soak | api-check` run, once xtask has made sure of Redis and MySQL,
//! built the release binaries (this one among them) and the components,
//! and installed the tools the task calls (`loadtest/README.md`).
//!
//! - `modes`: `loadtest`'s modes and common flags, and the runners they set
//!   up; `comparison`: compare, spike and capacity, run and reported;
//!   `engines`: `--engines`, one served lab per engine; `durations`:
//!   `500ms`, `10s`, `2m`, `1h`;
//! - `runner`: what every run shares; `run`: one method's run, its drain
//!   and its join; `rounds`: `--rounds N`, a method's rounds as one row;
//!   `spread`: a figure's median and range; `progress`: where a long
//!   invocation is and about how long is left;
//! - `k6`: k6's command and figures; `records`: what every client was told;
//!   `histograms`: latency as a distribution, and a run second by second;
//! - `truth`: the rows and Redis read directly; `verification`: their join
//!   with the records, and the claims each figure breaks;
//! - `faults`: `--fault` (`spec` one value, `plan` a run's, `injector` run
//!   while the load runs, `target` what a fault does and undoes);
//! - `launcher`: the one way a server starts; `server`: the lab a run serves
//!   (`restart`: killed and started again); `own_redis`, `own_nats`: a
//!   Redis and a NATS server of the run's own;
//! - `report`: report.md, chart.svg, results.json (`figures` the table's
//!   figures, `chart` chart.svg, `html` report.html, `markup` the HTML
//!   parts both reports share, `why` the anomalies and a trace, `charts`
//!   the uPlot charts, `distribution` what results.json keeps to draw them);
//!   `provenance`: commit, command and versions;
//! - `smoke`: the checked runs `cargo xtask test` ends with; `diff`: two
//!   runs' reports overlaid, and a report redrawn from its results.json;
//! - `bench` (`wrk`, `report`, `budget`), `idle`, `soak` (`sample`,
//!   `verdict`, `report`), `api_check`: the other subcommands;
//! - `api`: the lab's API; `paths`: where things are; `markers`: figures
//!   written into a document; `process_log`: a child's log; `proc_stats`: a
//!   process's figures from `/proc`.

mod answers;
mod api;
mod api_check;
mod bench;
mod comparison;
mod diff;
mod durations;
mod engines;
mod faults;
mod galera;
mod histograms;
mod idle;
mod k6;
mod launcher;
mod markers;
mod modes;
mod own_nats;
mod own_redis;
mod paths;
mod proc_stats;
mod process_log;
mod progress;
mod provenance;
mod records;
mod report;
mod rounds;
mod run;
mod runner;
mod server;
mod smoke;
mod soak;
mod spread;
mod truth;
mod verification;

use std::process::Command;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// The couponlab load runner.
#[derive(Parser)]
#[command(bin_name = "cargo xtask", args_override_self = true)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// k6 runs of the methods, each joined with what the database and Redis
    /// hold, and a report (loadtest/reports/<UTC time>/)
    Loadtest {
        #[command(subcommand)]
        task: Loadtest,
    },
    /// couponlab against its native twin under wrk, written to
    /// docs/performance.md
    Bench(bench::Options),
    /// What a lab costs at rest as its coupons pile up
    Idle(idle::Options),
    /// A long run at a constant rate, judged on whether what the lab holds
    /// stays flat
    Soak(soak::Command),
    /// Schemathesis against a served lab's OpenAPI document
    ApiCheck(api_check::Options),
}

#[derive(Subcommand)]
enum Loadtest {
    #[command(flatten)]
    Mode(modes::Mode),
    /// Two runs' reports overlaid in one: curves, seconds, differences and
    /// what changed
    Diff(diff::Diff),
    /// A run's report written again from its results.json and request
    /// records
    Redraw(diff::Redraw),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().task {
        Task::Loadtest {
            task: Loadtest::Mode(mode),
        } => modes::main(mode),
        Task::Loadtest {
            task: Loadtest::Diff(options),
        } => diff::diff(&options),
        Task::Loadtest {
            task: Loadtest::Redraw(options),
        } => diff::redraw(&options),
        Task::Bench(options) => bench::main(&options),
        Task::Idle(options) => idle::main(&options),
        Task::Soak(command) => soak::main(command),
        Task::ApiCheck(options) => api_check::check(&options),
    }
}

/// Runs a command, failing with its name when it fails.
fn run(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("cannot start {command:?}"))?;
    anyhow::ensure!(status.success(), "{command:?} failed with {status}");
    Ok(())
}
