//! `cargo xtask bench --budget`: where one sold-out REDIS_LUA request's
//! time goes at one connection, stage by stage, in couponlab and in the
//! native twin side by side, written to `docs/performance.md`.
//!
//! Both servers run with `COUPONLAB_BUDGET=<file>` (see the host's
//! `budget` module): each request's time in the server is split into the
//! stages it marks, and written out when the server stops. wrk's mean at
//! one connection, less the server's, is what lies outside the handler's
//! task: wrk, the kernel's loopback, hyper reading and writing, and the
//! hop from the connection's task to the handler's and back. Then what
//! wasmtime itself costs for the call, measured alone
//! (`wasmtime_call_benchmark`): a store, `InstancePre::instantiate` and one
//! export call of the same component, with no server around it.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::{Value, json};

use super::{
    Options, Process, REDIS_URL, database_url, host_benchmark, sold_out_coupon, sold_out_script,
    start_lab, write_script, wrk_run,
};
use crate::loadtest::Api;
use crate::root;

/// The stages the servers mark, in the order a request passes them, and
/// what each covers.
const STAGES: [(&str, &str); 10] = [
    (
        "extract",
        "the handler's task started, the route matched, path and JSON body read",
    ),
    (
        "handler",
        "checks, the method looked up, the arrival recorded",
    ),
    ("store", "a fresh store: host state, WASI context, limits"),
    (
        "instantiate",
        "a pool slot taken, the component instantiated in it",
    ),
    (
        "boundary",
        "the export looked up, arguments lowered, results lifted",
    ),
    ("guest", "wasm running"),
    (
        "host-calls",
        "host calls, each with its Redis round trip (the twin: its EVALSHA)",
    ),
    (
        "teardown",
        "the store dropped, its slot reset, the call's clean-up awaited",
    ),
    ("record", "the trace kept, the request recorded, metrics"),
    ("respond", "the answer turned into a response"),
];

pub(super) fn main(options: &Options, wrk: &Path, dist: &Path) -> anyhow::Result<()> {
    let database = database_url()?;
    let dir = root().join("target").join("bench");
    std::fs::create_dir_all(&dir)?;
    let lab_file = dir.join("budget-couponlab.json");
    let twin_file = dir.join("budget-twin.json");
    for file in [&lab_file, &twin_file] {
        let _ = std::fs::remove_file(file);
    }
    let lab = start_lab(
        &database,
        dist,
        ("COUPONLAB_BUDGET", lab_file.display().to_string()),
    )?;
    let api = Api::new(&lab.base_url())?;
    lab.wait_until_answering(&api)?;
    let twin = Process::start(
        "native-twin",
        &[],
        &[
            ("DATABASE_URL", database),
            ("REDIS_URL", REDIS_URL.into()),
            ("COUPONLAB_BUDGET", twin_file.display().to_string()),
        ],
        "--bind",
    )?;
    twin.wait_until_listening()?;

    let (coupon, first) = sold_out_coupon(&api)?;
    let body = json!({ "memberId": first + 1, "method": "REDIS_LUA" }).to_string();
    let script = write_script("budget.lua", &sold_out_script(&body))?;
    let servers = [("couponlab", &lab), ("native twin", &twin)];
    for (_, process) in servers {
        wrk_run(wrk, process, &script, &coupon, 1, "2s")?;
    }
    println!(
        "budget at one connection: {} rounds of {}",
        options.rounds, options.duration
    );
    let mut means = [Vec::new(), Vec::new()];
    for round in 0..options.rounds {
        for (index, (server, process)) in servers.iter().enumerate() {
            let run = wrk_run(wrk, process, &script, &coupon, 1, &options.duration)?;
            println!(
                "  round {}: {server}: mean {:.0} µs, p50 {:.0} µs",
                round + 1,
                run.mean_us,
                run.p50_us
            );
            means[index].push(run.mean_us);
        }
    }
    // Stopped, each server writes its budget.
    drop(lab);
    drop(twin);
    let lab_budget = read(&lab_file)?;
    let twin_budget = read(&twin_file)?;
    let alone = host_benchmark("wasmtime_call_benchmark", "wasmtime alone: ")?;
    let markdown = markdown(
        options,
        [&lab_budget, &twin_budget],
        [mean(&means[0]), mean(&means[1])],
        &alone,
    );
    crate::write_between_markers(&options.out, "budget", &markdown)?;
    println!("\n{markdown}\nwritten to {}", options.out.display());
    Ok(())
}

fn read(file: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("the server wrote no budget to {}", file.display()))?;
    Ok(serde_json::from_str(&text)?)
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// A stage's (or the total's) mean and median in a server's budget; `None`
/// where the server has no such stage.
fn figures(budget: &Value, stage: Option<&str>) -> Option<(f64, f64)> {
    let at = match stage {
        Some(stage) => &budget["stages"][stage],
        None => &budget["total"],
    };
    let (mean, p50) = (at["mean_us"].as_f64()?, at["p50_us"].as_f64()?);
    (mean > 0.0).then_some((mean, p50))
}

fn cell(figures: Option<(f64, f64)>) -> String {
    match figures {
        Some((mean, p50)) => format!("{mean:.1} | {p50:.1}"),
        None => "— | —".into(),
    }
}

fn markdown(options: &Options, budgets: [&Value; 2], wrk_means: [f64; 2], alone: &str) -> String {
    let [lab, twin] = budgets;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Measured by `cargo xtask bench --budget --duration {} --rounds {}`: one connection, \
         a sold-out coupon (one EVALSHA), couponlab's REDIS_LUA and `native-twin` alternating \
         run by run, {} and {} requests timed in each server. Means add up; medians are \
         each stage's own. µs.\n",
        options.duration, options.rounds, lab["requests"], twin["requests"],
    );
    out.push_str("| stage | what | couponlab mean | p50 | twin mean | p50 | added mean |\n|---|---|---:|---:|---:|---:|---:|\n");
    for (stage, what) in STAGES {
        let (lab_stage, twin_stage) = (figures(lab, Some(stage)), figures(twin, Some(stage)));
        let added = lab_stage.map_or(0.0, |f| f.0) - twin_stage.map_or(0.0, |f| f.0);
        let _ = writeln!(
            out,
            "| {stage} | {what} | {} | {} | {added:+.1} |",
            cell(lab_stage),
            cell(twin_stage)
        );
    }
    let (lab_total, twin_total) = (figures(lab, None), figures(twin, None));
    let _ = writeln!(
        out,
        "| **in the server** | the stages together | {} | {} | {:+.1} |",
        cell(lab_total),
        cell(twin_total),
        lab_total.map_or(0.0, |f| f.0) - twin_total.map_or(0.0, |f| f.0)
    );
    let outside =
        |index: usize, total: Option<(f64, f64)>| wrk_means[index] - total.map_or(0.0, |f| f.0);
    let _ = writeln!(
        out,
        "| outside | wrk's mean less the server's: wrk, loopback, hyper's read and write, the hops to the handler's task and back | {:.1} | | {:.1} | | {:+.1} |",
        outside(0, lab_total),
        outside(1, twin_total),
        outside(0, lab_total) - outside(1, twin_total),
    );
    let _ = writeln!(
        out,
        "| **wrk, one connection** | mean latency | {:.1} | | {:.1} | | {:+.1} |",
        wrk_means[0],
        wrk_means[1],
        wrk_means[0] - wrk_means[1]
    );
    let _ = writeln!(
        out,
        "\nWhat wasmtime itself costs for the call, measured alone (`cargo test --release -p couponlab --lib -- wasmtime_call_benchmark --ignored`: REDIS_LUA's component, no server, no Redis): {alone}."
    );
    out
}
