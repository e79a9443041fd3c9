//! What the tasks install from the machine's package manager and into
//! virtual environments: Debian's tools (`wrk`, `promtool`, Chromium,
//! `galera-4`, …) and fresh Python environments for the pinned Python
//! tools. A leaf: the services, the topologies and the builds all use it.

use std::process::Command;

use anyhow::{Context, bail};

use crate::run;

/// `binary` (under `/usr/bin`), installed from Debian's `package` when
/// missing: `wrk` for the bench, `promtool` and `prometheus` for the
/// metrics tests.
pub fn ensure_debian(binary: &str, package: &str) -> anyhow::Result<std::path::PathBuf> {
    let path = std::path::Path::new("/usr/bin").join(binary);
    if !path.exists() {
        println!("installing {binary}");
        install_debian(package)?;
    }
    Ok(path)
}

/// `apt-get install package`. Its output is shown only if it fails: it
/// runs beside the build, whose output it would bury.
pub fn install_debian(package: &str) -> anyhow::Result<()> {
    println!("apt-get install {package}");
    let install = || apt_get(&["install", "-y", "-q", package]);
    if install().is_err() {
        // Package lists older than the archive name files it no longer has.
        apt_get(&["update", "-q"])?;
        install()?;
    }
    Ok(())
}

/// `apt-get args`, its output kept and printed only when it fails.
fn apt_get(args: &[&str]) -> anyhow::Result<()> {
    let mut command = Command::new("apt-get");
    command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
    let shown = format!("{command:?}");
    let output = command
        .output()
        .with_context(|| format!("cannot start {shown}"))?;
    if !output.status.success() {
        print!("{}", String::from_utf8_lossy(&output.stdout));
        eprint!("{}", String::from_utf8_lossy(&output.stderr));
        bail!("{shown} failed with {}", output.status);
    }
    Ok(())
}

/// A new virtual environment at `dir` from Debian's python3 (with
/// python3-venv, which Debian ships apart).
pub fn fresh_venv(dir: &std::path::Path) -> anyhow::Result<()> {
    let python = ensure_debian("python3", "python3")?;
    let has_venv = Command::new(&python)
        .args(["-c", "import ensurepip, venv"])
        .output()
        .is_ok_and(|output| output.status.success());
    if !has_venv {
        install_debian("python3-venv")?;
    }
    std::fs::remove_dir_all(dir).ok();
    run(Command::new(python).args(["-m", "venv"]).arg(dir))
}
