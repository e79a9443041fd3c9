//! What a report needs to be reproduced: the commit, the exact command, the
//! versions of everything measured and measuring, the cores.

use std::collections::BTreeMap;
use std::process::Command;

use serde_json::{Value, json};

use crate::k6::K6;
use crate::paths::root;
use crate::truth::Sources;

/// The provenance of a report whose methods' figures are `methods`: each
/// fault that fired in each method's run, and the rest.
pub fn describe(
    sources: &Sources,
    k6: &K6,
    methods: &BTreeMap<String, Value>,
) -> anyhow::Result<Value> {
    let (database, redis) = sources.versions()?;
    let faults: Vec<String> = methods
        .iter()
        .flat_map(|(method, figures)| {
            figures["faults"]
                .as_array()
                .into_iter()
                .flatten()
                .map(move |fired| {
                    format!(
                        "{method}: `{}` fired at {:.0} ms, ended at {:.0} ms into the load; {}",
                        fired["fault"].as_str().unwrap_or_default(),
                        fired["firedAtMs"].as_f64().unwrap_or_default(),
                        fired["endedAtMs"].as_f64().unwrap_or_default(),
                        fired["note"].as_str().unwrap_or_default()
                    )
                })
        })
        .collect();
    Ok(json!({
        "faults": faults,
        "commit": commit(),
        "command": command(),
        "versions": {
            "redis": redis,
            "database": database,
            "k6": k6.version()?,
            "rust": first_line("rustc", &["--version"]),
        },
        "cores": std::thread::available_parallelism().map_or(0, usize::from),
        // Nothing in a run is drawn at random: member n sends request n in
        // k6's iteration order, and the fault proxies add fixed latency.
        "seeds": "none: no random choices (member n sends request n, in k6's iteration order)",
    }))
}

/// What any report of the runner's records, k6 or not: the commit, the
/// command, the compiler and the cores.
pub fn basic() -> Value {
    json!({
        "commit": commit(),
        "command": command(),
        "versions": { "rust": first_line("rustc", &["--version"]) },
        "cores": std::thread::available_parallelism().map_or(0, usize::from),
    })
}

/// `git rev-parse HEAD`, marked `-dirty` when the work tree has changes.
fn commit() -> String {
    let head = first_line("git", &["rev-parse", "HEAD"]);
    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(root())
        .output()
        .is_ok_and(|out| !out.stdout.is_empty());
    if dirty { format!("{head}-dirty") } else { head }
}

/// The command line as typed: `cargo xtask loadtest ...`, each argument
/// quoted when the shell would need it.
fn command() -> String {
    let mut words = vec!["cargo".to_string(), "xtask".to_string()];
    words.extend(std::env::args().skip(1).map(|arg| {
        if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || "'\"$*?&;|<>".contains(c))
        {
            format!("'{}'", arg.replace('\'', r"'\''"))
        } else {
            arg
        }
    }));
    words.join(" ")
}

fn first_line(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .current_dir(root())
        .output()
        .ok()
        .and_then(|out| {
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .next()
                .map(str::to_string)
        })
        .unwrap_or_else(|| format!("{program}: unavailable"))
}
