//! `cargo xtask bench --budget`: where one sold-out REDIS_LUA request's
//! time goes at one connection, stage by stage, in couponlab and in the
//! native twin side by side, and in the same lab for the same method in
//! Python and JavaScript; written to `docs/performance.md`.
//!
//! Both servers run with `COUPONLAB_BUDGET=<file>` (see the host's
//! `budget` module): each request's time in the server is split into the
//! stages it marks, and written out when the server stops. wrk's mean at
//! one connection, less the server's, is what lies outside the handler's
//! task: wrk, the kernel's loopback, hyper reading and writing, and the
//! hop from the connection's task to the handler's and back. Then what
//! wasmtime itself costs for the call, measured alone
//! (`wasmtime_call_benchmark`): a store, `InstancePre::instantiate` and one
//! export call of the same component, with no server around it, and of
//! its Python and JavaScript twins.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde_json::{Value, json};

use super::{
    Options, database_url, figure, host_benchmark, sold_out_coupon, sold_out_script, start_lab,
    start_twin, write_script, wrk_run,
};
use crate::api::Api;
use crate::markers;
use crate::paths::root;

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
    (
        "store",
        "a fresh store: host state, limits (WASI only once an interpreter calls it)",
    ),
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

pub(super) fn main(options: &Options, wrk: &Path) -> anyhow::Result<()> {
    let database = database_url()?;
    let dir = root().join("target").join("bench");
    std::fs::create_dir_all(&dir)?;
    let lab_file = dir.join("budget-couponlab.json");
    let twin_file = dir.join("budget-twin.json");
    for file in [&lab_file, &twin_file] {
        let _ = std::fs::remove_file(file);
    }
    let lab_writes_to = lab_file.display().to_string();
    let lab = start_lab(&database, ("COUPONLAB_BUDGET", &lab_writes_to))?;
    let api = Api::new(&lab.base_url())?;
    let twin_writes_to = ("COUPONLAB_BUDGET", twin_file.display().to_string());
    let twin = start_twin(&database, &[twin_writes_to], None)?;

    let (coupon, first) = sold_out_coupon(&api)?;
    // The lab's REDIS_LUA, the twin's, then the lab's other languages.
    let runs = [
        ("couponlab", lab.process(), LAB_METHOD),
        ("native twin", &twin, LAB_METHOD),
        ("couponlab", lab.process(), LANGUAGES[0]),
        ("couponlab", lab.process(), LANGUAGES[1]),
    ];
    let mut scripts = Vec::new();
    for (_, process, method) in runs {
        let body = json!({ "memberId": first + 1, "method": method }).to_string();
        let script = write_script(&format!("budget-{method}.lua"), &sold_out_script(&body))?;
        wrk_run(wrk, process, &script, &coupon, 1, "2s")?;
        scripts.push(script);
    }
    println!(
        "budget at one connection: {} rounds of {}",
        options.rounds, options.duration
    );
    let mut means = vec![Vec::new(); runs.len()];
    for round in 0..options.rounds {
        for (index, (server, process, method)) in runs.iter().enumerate() {
            let run = wrk_run(wrk, process, &scripts[index], &coupon, 1, &options.duration)?;
            println!(
                "  round {}: {server} {method}: mean {:.0} µs, p50 {:.0} µs",
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
    let benchmark = host_benchmark("wasmtime_call_benchmark")?;
    let alone_of = |method: &str| figure(&benchmark, &format!("wasmtime alone, {method}: "));
    let alone = alone_of(LAB_METHOD)?;
    let means: Vec<f64> = means.iter().map(|runs| mean(runs)).collect();
    let mut markdown = markdown(
        options,
        [
            &lab_budget["methods"][LAB_METHOD],
            &twin_budget["methods"][LAB_METHOD],
        ],
        [means[0], means[1]],
        &alone,
    );
    markdown.push_str(&languages(&lab_budget, &means));
    let _ = writeln!(
        markdown,
        "\nMeasured alone the same way, with the capabilities stubbed: PY_REDIS_LUA {}; JS_REDIS_LUA {}.",
        alone_of(LANGUAGES[0])?,
        alone_of(LANGUAGES[1])?,
    );
    markers::write_between(&options.out(), "budget", &markdown)?;
    println!("\n{markdown}\nwritten to {}", options.out().display());
    Ok(())
}

/// The method the lab and the twin are compared on, and the same written
/// in Python and JavaScript.
const LAB_METHOD: &str = "REDIS_LUA";
const LANGUAGES: [&str; 2] = ["PY_REDIS_LUA", "JS_REDIS_LUA"];

/// The same stages for REDIS_LUA in each language, on the same lab.
fn languages(lab: &Value, means: &[f64]) -> String {
    let methods = [LAB_METHOD, LANGUAGES[0], LANGUAGES[1]];
    let wrk_means = [means[0], means[2], means[3]];
    let mut out = String::from(
        "\nThe same sold-out call written in Rust, Python and JavaScript, on the same lab (means, µs):\n\n| stage | REDIS_LUA | PY_REDIS_LUA | JS_REDIS_LUA |\n|---|---:|---:|---:|\n",
    );
    let mean_of = |method: &str, stage: Option<&str>| {
        figures(&lab["methods"][method], stage).map_or(0.0, |(mean, _)| mean)
    };
    for (stage, _) in STAGES {
        let _ = writeln!(
            out,
            "| {stage} | {:.1} | {:.1} | {:.1} |",
            mean_of(methods[0], Some(stage)),
            mean_of(methods[1], Some(stage)),
            mean_of(methods[2], Some(stage)),
        );
    }
    let totals = methods.map(|method| mean_of(method, None));
    let _ = writeln!(
        out,
        "| **in the server** | {:.1} | {:.1} | {:.1} |\n| outside | {:.1} | {:.1} | {:.1} |\n| **wrk, one connection** | {:.1} | {:.1} | {:.1} |",
        totals[0],
        totals[1],
        totals[2],
        wrk_means[0] - totals[0],
        wrk_means[1] - totals[1],
        wrk_means[2] - totals[2],
        wrk_means[0],
        wrk_means[1],
        wrk_means[2],
    );
    out
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
         a sold-out coupon (one EVALSHA), couponlab's REDIS_LUA and `native-twin` (then \
         PY_REDIS_LUA and JS_REDIS_LUA on the same lab) alternating run by run, {} and {} \
         REDIS_LUA requests timed in each server. Means add up; medians are \
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
        "\nWhat wasmtime itself costs for the call, measured alone (`cargo test --release --workspace --lib -- wasmtime_call_benchmark --ignored`: REDIS_LUA's component, no server, no Redis): {alone}."
    );
    out
}
