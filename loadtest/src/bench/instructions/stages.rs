//! A callgrind dump split by whose code ran, read from callgrind's own
//! format: each line's own instructions (a call's inclusive cost is not its
//! caller's), so nothing is counted twice. A line of code belongs to the
//! crate or the lab's module its source file is in, so code the compiler
//! inlined counts to where it was written, not to the function it was
//! inlined into; the standard library's generic code counts to the function
//! it was compiled for. The C library's copies and fills (`memcpy`,
//! `memset`) are charged to the calls that asked for them: a slot's reset
//! is the pool's work, not the C library's.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, ensure};

/// The rows, in the order a request passes them: a function goes in the
/// first row one of whose prefixes its owner starts with, or in `other`.
/// An owner is a path: `hyper::…` for a crate's code, `couponlab::http::…`
/// for the lab's, `guest` for code compiled at run time.
const ROWS: &[(&str, &[&str])] = &[
    (
        "HTTP (hyper, httparse)",
        &[
            "hyper::",
            "hyper_util::",
            "httparse::",
            "http::",
            "http_body",
            "httpdate::",
        ],
    ),
    (
        "axum and the lab's handler",
        &[
            "axum::",
            "axum_core::",
            "tower::",
            "tower_http::",
            "matchit::",
            "mime::",
            "couponlab::http::",
        ],
    ),
    (
        "JSON (serde_json)",
        &[
            "serde_json::",
            "serde::",
            "serde_core::",
            "serde_path_to_error::",
            "itoa::",
            "ryu::",
        ],
    ),
    ("traces", &["couponlab::traces::"]),
    (
        "recorder",
        &[
            "couponlab::recorder::",
            "couponlab::issuing::",
            "hdrhistogram::",
        ],
    ),
    ("metrics", &["couponlab::metrics::", "prometheus::"]),
    (
        "spans and logs (tracing)",
        &[
            "tracing::",
            "tracing_core::",
            "tracing_subscriber::",
            "sharded_slab::",
        ],
    ),
    (
        "the script watch",
        &[
            "couponlab::runtime::redis::runaway",
            "couponlab::runtime::redis::scripts",
        ],
    ),
    (
        "host calls, the lab's side",
        &[
            "couponlab::runtime::redis::",
            "couponlab::runtime::sql::",
            "couponlab::runtime::bindings::",
            "couponlab::runtime::clock::",
            "couponlab::runtime::log::",
            "couponlab::runtime::permits::",
            "couponlab::runtime::trace::",
            "sha1_smol::",
        ],
    ),
    ("host calls, the Redis client", &["redis::", "combine::"]),
    ("host calls, the SQL client", &["sqlx", "crossbeam_queue::"]),
    ("the lab's call around wasmtime", &["couponlab::runtime::"]),
    (
        "WASI context",
        &[
            "wasmtime_wasi::",
            "cap_rand::",
            "rand::",
            "rand_core::",
            "chacha20::",
            "rand_chacha::",
        ],
    ),
    (
        "instance pool (slots taken, reset)",
        &[
            "wasmtime::runtime::vm::instance::allocator::pooling",
            "wasmtime::runtime::vm::cow",
            "wasmtime::runtime::vm::sys::unix::pagemap",
        ],
    ),
    (
        "wasmtime: the store made and dropped",
        &["wasmtime::runtime::store"],
    ),
    (
        "wasmtime: instantiation",
        &[
            "wasmtime::runtime::component::instance",
            "wasmtime::runtime::component::component",
            "wasmtime::runtime::instance",
            "wasmtime::runtime::instantiate",
            "wasmtime::runtime::module",
            "wasmtime::runtime::vm::instance",
            "wasmtime::runtime::vm::component",
            "wasmtime::runtime::vm::table",
            "wasmtime::runtime::vm::memory",
            "wasmtime_environ::",
            "cranelift_bforest::",
        ],
    ),
    (
        "wasmtime: crossings (calls, lifting and lowering, fibers)",
        &[
            "wasmtime::runtime::component::func",
            "wasmtime::runtime::func",
            "wasmtime::runtime::fiber",
            "wasmtime::runtime::vm::traphandlers",
            "wasmtime_internal_fiber::",
        ],
    ),
    ("wasmtime, elsewhere", &["wasmtime", "cranelift"]),
    ("guest (compiled wasm)", &["guest"]),
    (
        "tokio (tasks, timers, sockets)",
        &[
            "tokio::",
            "tokio_util::",
            "mio::",
            "futures_util::",
            "futures_core::",
        ],
    ),
    (
        "allocator (mimalloc)",
        &["libmimalloc_sys::", "mimalloc::", "alloc::alloc::"],
    ),
    (
        "the lab elsewhere (the twin: its handler)",
        &["couponlab::"],
    ),
];

/// The C library's copies and fills, charged to their callers.
const CHARGED_TO_CALLERS: [&str; 4] = ["memcpy", "memmove", "memset", "memcmp"];

/// The rows of wasmtime's own work: the fresh instance, its call and its
/// teardown, which any embedder pays.
const WASMTIME_OWN: [&str; 6] = [
    "WASI context",
    "instance pool (slots taken, reset)",
    "wasmtime: the store made and dropped",
    "wasmtime: instantiation",
    "wasmtime: crossings (calls, lifting and lowering, fibers)",
    "wasmtime, elsewhere",
];

/// The row of the component's own code.
const GUEST: &str = "guest (compiled wasm)";

/// Whose code a line is: the crate or lab module of its source file, else
/// the function's own path; `guest` for code with neither.
fn owner(file: &str, function: &str) -> String {
    if file == "???" && function.starts_with("0x") {
        return "guest".to_string();
    }
    if let Some((_, registry)) = file.split_once("/index.crates.io-")
        && let Some(package) = registry.split('/').nth(1)
    {
        let name = package.rsplit_once('-').map_or(package, |(name, _)| name);
        return format!("{}::", name.replace('-', "_"));
    }
    for (root, name) in [
        ("/vendor/wasmtime/src/", "wasmtime"),
        ("/host/src/", "couponlab"),
    ] {
        if let Some((_, module)) = file.split_once(root) {
            let module = module.trim_end_matches(".rs").trim_end_matches("/mod");
            return format!("{name}::{}::", module.replace('/', "::"));
        }
    }
    function_path(function).to_string()
}

fn row_of(file: &str, function: &str) -> usize {
    let owner = owner(file, function);
    ROWS.iter()
        .position(|(_, prefixes)| prefixes.iter().any(|p| owner.starts_with(p)))
        .unwrap_or(ROWS.len())
}

/// The path that says whose a function is: its name without generic
/// arguments, the implementing type's for a trait method, the dropped
/// type's for drop glue.
fn function_path(function: &str) -> &str {
    let mut name = function.trim();
    loop {
        let stripped = name
            .trim_start_matches('<')
            .trim_start_matches("core::ptr::drop_in_place<");
        if stripped == name {
            break;
        }
        name = stripped;
    }
    let end = name.find(['<', ' ', '(', '\'']).unwrap_or(name.len());
    &name[..end]
}

fn charged_to_callers(function: &str) -> bool {
    CHARGED_TO_CALLERS
        .iter()
        .any(|name| function.contains(name))
}

/// The program's total in a dump (its `summary:` line).
pub(super) fn total(dump: &Path) -> anyhow::Result<u64> {
    let text =
        std::fs::read_to_string(dump).with_context(|| format!("cannot read {}", dump.display()))?;
    summary(&text).with_context(|| format!("no summary in {}", dump.display()))
}

fn summary(dump: &str) -> Option<u64> {
    dump.lines()
        .find_map(|line| line.strip_prefix("summary:"))
        .and_then(|total| total.trim().parse().ok())
}

/// Each row's instructions per request: the dump's lines' own counts, by
/// row, scaled from the dump's total to `per_request`.
pub(super) fn split(dump: &Path, per_request: u64) -> anyhow::Result<Vec<(&'static str, u64)>> {
    let text =
        std::fs::read_to_string(dump).with_context(|| format!("cannot read {}", dump.display()))?;
    split_dump(&text, per_request).with_context(|| format!("cannot split {}", dump.display()))
}

/// Names in a dump are written once with their number (`fn=(12) name`) and
/// then by number alone (`fn=(12)`).
#[derive(Default)]
struct Names(HashMap<String, String>);

impl Names {
    fn read(&mut self, value: &str) -> String {
        let value = value.trim();
        match value.split_once(") ") {
            Some((number, name)) if value.starts_with('(') => {
                self.0.insert(number.to_string(), name.to_string());
                name.to_string()
            }
            _ => match value.strip_suffix(')') {
                Some(number) if value.starts_with('(') => {
                    self.0.get(number).cloned().unwrap_or_default()
                }
                _ => value.to_string(),
            },
        }
    }
}

/// [`split`] of a dump's text, in callgrind's format: `fl=` and `fn=`
/// name the function the cost lines below belong to, `fi=` and `fe=` the
/// file of code inlined into it, `cfn=` and `calls=` a call whose
/// inclusive cost is the next line (not the caller's own).
fn split_dump(dump: &str, per_request: u64) -> anyhow::Result<Vec<(&'static str, u64)>> {
    let dump_total = summary(dump).context("no summary")?;
    ensure!(dump_total > 0, "it counted nothing");
    let (mut files, mut functions) = (Names::default(), Names::default());
    let (mut file, mut inlined, mut function, mut called) =
        (String::new(), String::new(), String::new(), String::new());
    let mut call_cost_next = false;
    let mut counts = vec![0u64; ROWS.len() + 1];
    for line in dump.lines() {
        let cost = || -> u64 {
            let mut fields = line.split_whitespace();
            fields.next();
            fields.next().and_then(|n| n.parse().ok()).unwrap_or(0)
        };
        if line.starts_with(|c: char| c.is_ascii_digit() || "+-*".contains(c)) {
            if std::mem::take(&mut call_cost_next) {
                // A copy's or fill's cost goes to whoever asked for it.
                if charged_to_callers(&called) {
                    counts[row_of(&inlined, &function)] += cost();
                }
            } else if !charged_to_callers(&function) {
                counts[row_of(&inlined, &function)] += cost();
            }
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        match key {
            "fl" => {
                file = files.read(value);
                inlined = file.clone();
            }
            "fi" | "fe" => inlined = files.read(value),
            "fn" => {
                function = functions.read(value);
                inlined = file.clone();
            }
            "cfi" | "cfl" => {
                files.read(value);
            }
            "cfn" => called = functions.read(value),
            "calls" => call_cost_next = true,
            _ => {}
        }
    }
    let names = ROWS.iter().map(|(row, _)| *row).chain(["other"]);
    Ok(names
        .zip(counts)
        .map(|(row, count)| (row, share(count, per_request, dump_total)))
        .collect())
}

/// `whole` scaled by `part / of`, without overflow.
fn share(whole: u64, part: u64, of: u64) -> u64 {
    (u128::from(whole) * u128::from(part) / u128::from(of.max(1))) as u64
}

/// The lab's split beside the twin's, as a Markdown table: each part's
/// instructions per request in both, and what the lab spends more.
pub(super) fn table(lab: &[(&'static str, u64)], twin: &[(&'static str, u64)]) -> String {
    let mut out = String::from(
        "| part | couponlab | native twin | the lab's extra |\n|---|---:|---:|---:|\n",
    );
    let mut line = |part: &str, lab: u64, twin: u64| {
        let extra = lab as i64 - twin as i64;
        out.push_str(&format!("| {part} | {lab} | {twin} | {extra:+} |\n"));
    };
    for ((part, lab), (_, twin)) in lab.iter().zip(twin) {
        line(part, *lab, *twin);
    }
    line(
        "*wasmtime's own: the WASI context, the pool and the four wasmtime rows*",
        wasmtime_own(lab),
        wasmtime_own(twin),
    );
    line(
        "*all*",
        lab.iter().map(|(_, n)| n).sum(),
        twin.iter().map(|(_, n)| n).sum(),
    );
    out
}

/// What wasmtime itself does for the request: the store and its WASI
/// context, the fresh instance, the boundary, the slot's reset.
pub(super) fn wasmtime_own(rows: &[(&'static str, u64)]) -> u64 {
    rows.iter()
        .filter(|(row, _)| WASMTIME_OWN.contains(row))
        .map(|(_, instructions)| instructions)
        .sum()
}

/// What the component's own code did for the request.
pub(super) fn guest(rows: &[(&'static str, u64)]) -> u64 {
    rows.iter()
        .filter(|(row, _)| *row == GUEST)
        .map(|(_, instructions)| instructions)
        .sum()
}

#[cfg(test)]
mod tests;
