//! The Python and JavaScript toolchains, each pinned (`strategies/python/
//! requirements.txt`, `strategies/js/toolchain/package-lock.json`) and
//! installed once into a directory of its own under the polyglot work
//! directory; a change of the pins installs again.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use super::{Language, work_dir};
use crate::{packages, root, run};

/// A language's componentize tool, installed if it is not (`pip install`,
/// `npm ci`: mostly a wait on the network, which is why each language's
/// install and builds run beside the Rust components' build).
pub(super) fn toolchain(language: Language) -> anyhow::Result<PathBuf> {
    match language {
        Language::Python => ensure_componentize_py(&work_dir()),
        Language::JavaScript => ensure_componentize_js(&work_dir()),
    }
}

/// componentize-py as pinned, in a virtual environment of its own.
fn ensure_componentize_py(work: &Path) -> anyhow::Result<PathBuf> {
    let pins = root()
        .join("strategies")
        .join("python")
        .join("requirements.txt");
    let venv = work.join("python-venv");
    let tool = venv.join("bin").join("componentize-py");
    ensure_pinned(&pins, &venv, &tool, |venv| {
        packages::fresh_venv(venv)?;
        run(Command::new(venv.join("bin").join("pip"))
            .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
            .arg(&pins))
    })?;
    Ok(tool)
}

/// componentize-js as pinned by its lock file, with `npm ci`.
fn ensure_componentize_js(work: &Path) -> anyhow::Result<PathBuf> {
    let toolchain = root().join("strategies").join("js").join("toolchain");
    let pins = toolchain.join("package-lock.json");
    let dir = work.join("js-toolchain");
    let tool = dir
        .join("node_modules")
        .join(".bin")
        .join("componentize-js");
    ensure_pinned(&pins, &dir, &tool, |dir| {
        let npm = packages::ensure_debian("npm", "npm")?;
        packages::ensure_debian("node", "nodejs")?;
        std::fs::create_dir_all(dir)?;
        for file in ["package.json", "package-lock.json"] {
            std::fs::copy(toolchain.join(file), dir.join(file))?;
        }
        run(Command::new(npm)
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .current_dir(dir))
    })?;
    Ok(tool)
}

/// Installs into `dir` with `install` unless `dir` holds a copy of `pins`
/// as they are now and `tool` is there: a change of the pins installs again.
fn ensure_pinned(
    pins: &Path,
    dir: &Path,
    tool: &Path,
    install: impl FnOnce(&Path) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let wanted = std::fs::read(pins).with_context(|| format!("cannot read {}", pins.display()))?;
    let copy = dir.join("installed-from");
    if tool.is_file() && std::fs::read(&copy).is_ok_and(|installed| installed == wanted) {
        return Ok(());
    }
    println!("installing {} into {}", pins.display(), dir.display());
    std::fs::remove_dir_all(dir).ok();
    install(dir)?;
    if !tool.is_file() {
        bail!(
            "installing from {} left no {}",
            pins.display(),
            tool.display()
        );
    }
    std::fs::write(copy, wanted)?;
    Ok(())
}
