//! `cargo xtask strategies`: build the `strategies/` workspace for
//! wasm32-wasip2 and install each component into the strategy directory.

use std::path::Path;
use std::process::Command;

use anyhow::Context;

use crate::{root, run};

const TARGET: &str = "wasm32-wasip2";
/// Test fixtures (crates under `strategies/testing/`, named `test-*`) are
/// built for the host's tests but never installed.
const FIXTURE_PREFIX: &str = "test_";

pub fn build_and_install(dir: &Path) -> anyhow::Result<()> {
    ensure_target()?;
    let workspace = root().join("strategies");
    println!("building strategy components ({TARGET}, release)");
    run(Command::new(cargo())
        .args(["build", "--release", "--workspace", "--target", TARGET])
        .current_dir(&workspace))?;

    let built = workspace.join("target").join(TARGET).join("release");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let mut installed = 0;
    for entry in
        std::fs::read_dir(&built).with_context(|| format!("cannot read {}", built.display()))?
    {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        if !name.ends_with(".wasm") || name.starts_with(FIXTURE_PREFIX) {
            continue;
        }
        install(&path, &dir.join(name))?;
        installed += 1;
    }
    println!("installed {installed} components into {}", dir.display());
    Ok(())
}

/// Copies `from` next to `to` under a temporary name, then renames it into
/// place: a watching server sees either the old file or the whole new one.
/// An unchanged file is left alone.
fn install(from: &Path, to: &Path) -> anyhow::Result<()> {
    let bytes = std::fs::read(from).with_context(|| format!("cannot read {}", from.display()))?;
    if std::fs::read(to).is_ok_and(|existing| existing == bytes) {
        return Ok(());
    }
    let partial = to.with_extension("wasm.partial");
    std::fs::write(&partial, &bytes)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, to)
        .with_context(|| format!("cannot rename into {}", to.display()))?;
    Ok(())
}

fn ensure_target() -> anyhow::Result<()> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output();
    match installed {
        Ok(output)
            if String::from_utf8_lossy(&output.stdout)
                .lines()
                .any(|l| l.trim() == TARGET) =>
        {
            Ok(())
        }
        Ok(_) => {
            println!("adding the {TARGET} target");
            run(Command::new("rustup").args(["target", "add", TARGET]))
        }
        // No rustup: the toolchain may still have the target; the build will tell.
        Err(_) => Ok(()),
    }
}

fn cargo() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}
