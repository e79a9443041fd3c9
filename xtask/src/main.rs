//! Build and development chores, in Rust so they need nothing beyond cargo.
//!
//! - `cargo xtask strategies`: build every strategy component and install it
//!   into the strategy directory (a running server picks it up).
//! - `cargo xtask run [-- <couponlab serve flags>]`: make sure Redis and
//!   MySQL/MariaDB answer, build, and serve.
//! - `cargo xtask test [-- <cargo test args>]`: the same preparation, then
//!   the whole test suite.
//! - `cargo xtask services [--galera] [--sentinel]`: only make sure Redis and
//!   MySQL/MariaDB answer (and, with `--galera`, the Galera cluster; with
//!   `--sentinel`, the Redis primary, replicas and Sentinels).
//! - `cargo xtask cluster up|down [--replicas 1]`: a local Redis Cluster of
//!   three masters (with a replica each).
//! - `cargo xtask sentinel up|down|status`: a local Redis primary with two
//!   replicas behind three Sentinels.
//! - `cargo xtask galera up|down|status`: a local MariaDB Galera cluster of
//!   three nodes on ports 3307-3309.
//! - `cargo xtask new NAME --lang rust|python|js`: a strategy to start from.
//! - `cargo xtask loadtest | bench | idle | soak | api-check [options]`: the
//!   load runner (`loadtest/`, `loadtest/README.md`), run once what it needs
//!   is built and installed.
//!
//! Modules: `cargo` runs cargo as a person's shell would (so xtask's builds
//! and those typed by hand are one), `strategies` builds and installs the components, `polyglot`
//! the Python and JavaScript ones, `installed` keeps the record of what was
//! installed; `new` writes a strategy; `services`
//! makes sure Redis and MySQL answer, `packages` installs Debian's tools
//! and fresh Python environments; `cluster`
//! starts and stops the Redis Cluster, `sentinel` the Redis Sentinels and
//! their nodes, `galera` the Galera cluster; `suite`
//! runs the whole test suite and times its phases; `runner`
//! runs the load runner after what its task needs, `tools` installs the
//! Python tools it calls; `layers`, a test, keeps the host's floors and
//! the load runner and the sdk free of circles.

mod cargo;
mod cluster;
mod galera;
mod installed;
#[cfg(test)]
mod layers;
mod new;
mod packages;
mod polyglot;
mod runner;
mod sentinel;
mod services;
mod strategies;
mod suite;
mod tools;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (task, rest) = match args.split_first() {
        Some((task, rest)) => (task.as_str(), rest),
        None => ("help", &[][..]),
    };
    // One `--` separates xtask's arguments from those it passes on; a second
    // one is passed on (`cargo xtask test -- -- a b`: two test filters).
    let rest: Vec<String> = match rest.split_first() {
        Some((first, after)) if first == "--" => after.to_vec(),
        _ => rest.to_vec(),
    };
    match task {
        "strategies" => strategies::main(&rest),
        "new" => new::main(&rest),
        "services" => services::main(&rest),
        "run" => {
            services::ensure()?;
            build_all(&strategy_dir(), || Ok(()))?;
            run(Command::new(release_binary("couponlab"))
                .arg("serve")
                .args(&rest)
                .current_dir(root()))
        }
        "test" => suite::main(&rest),
        task if runner::TASKS.contains(&task) => runner::main(task, &rest),
        "cluster" => cluster::main(&rest),
        "galera" => galera::main(&rest),
        "sentinel" => sentinel::main(&rest),
        "help" | "--help" | "-h" => {
            println!(
                "usage: cargo xtask <strategies | new | run | test | services | loadtest | bench | idle | soak | cluster | sentinel | galera | api-check> [-- args]"
            );
            Ok(())
        }
        other => bail!("unknown task {other:?}; try `cargo xtask help`"),
    }
}

/// The repository root (the parent of `xtask/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the repository")
        .to_path_buf()
}

/// A release binary of the workspace, where cargo put it: under
/// `CARGO_TARGET_DIR` when that is set, else the repository's `target/`.
pub fn release_binary(name: &str) -> PathBuf {
    target_dir().join("release").join(name)
}

/// Where cargo builds: `CARGO_TARGET_DIR` when set, else `target/`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"))
}

/// Where components are installed: `COUPONLAB_STRATEGY_DIR`, as the server
/// reads it, or `strategies/dist`.
fn strategy_dir() -> PathBuf {
    match std::env::var_os("COUPONLAB_STRATEGY_DIR") {
        Some(dir) => root().join(dir),
        None => root().join("strategies").join("dist"),
    }
}

/// What the tests need besides the build: Debian's tools, and the Python
/// tools the load test smoke and the API check run.
fn prepare_for_tests() -> anyhow::Result<()> {
    for (binary, package) in [
        // The metrics tests check the exposition and scrape it.
        ("promtool", "prometheus"),
        // The console tests drive a headless Chromium through WebDriver.
        ("chromium", "chromium"),
        ("chromedriver", "chromium-driver"),
        // The cluster tests start their own Redis Cluster.
        ("redis-server", "redis-server"),
        ("redis-cli", "redis-tools"),
        // The broker tests kill and restart a NATS server of their own.
        ("nats-server", "nats-server"),
    ] {
        packages::ensure_debian(binary, package)?;
    }
    tools::ensure_k6()?;
    tools::ensure_schemathesis()
}

/// Builds the host's release binaries ([`build_release`]) and, beside that
/// build, builds and installs every component into `dir` after `prepare`
/// (what else the task needs installed). The host's build keeps both cores
/// busy until its last crates, which compile one or two at a time; the work
/// beside it runs at the lowest CPU priority, so it takes what the build
/// leaves (and the downloads, which wait on the network) instead of minutes
/// before it.
pub fn build_all(
    dir: &Path,
    prepare: impl FnOnce() -> anyhow::Result<()> + Send + 'static,
) -> anyhow::Result<()> {
    let dir = dir.to_path_buf();
    let beside = std::thread::spawn(move || -> anyhow::Result<()> {
        lower_this_threads_priority();
        prepare()?;
        strategies::build_and_install(&dir)
    });
    let host = build_release();
    let components = beside
        .join()
        .map_err(|_| anyhow::anyhow!("building the components panicked"))?;
    host.and(components)
}

/// Gives the calling thread the least CPU priority (nice 19); what it starts
/// inherits it. Linux keeps a nice value per thread, which `renice` sets
/// given the thread's id; where that fails the work runs at the usual
/// priority, only slower beside the build.
fn lower_this_threads_priority() {
    let Ok(link) = std::fs::read_link("/proc/thread-self") else {
        return;
    };
    let Some(thread) = link.file_name() else {
        return;
    };
    let _ = Command::new("renice")
        .args(["-n", "19", "-p"])
        .arg(thread)
        .stdout(std::process::Stdio::null())
        .status();
}

/// `cargo xtask <task> up|down|status` of a topology the project starts
/// (the Galera cluster, the Sentinels and their Redis).
fn up_down_status(
    task: &str,
    args: &[String],
    up: fn() -> anyhow::Result<()>,
    down: fn() -> anyhow::Result<()>,
    status: fn(),
) -> anyhow::Result<()> {
    match args.first().map(String::as_str) {
        Some("up") => up(),
        Some("down") => down(),
        Some("status") => {
            status();
            Ok(())
        }
        _ => anyhow::bail!("usage: cargo xtask {task} up|down|status"),
    }
}

/// Builds the release binaries exactly as `cargo xtask test` builds them
/// (the whole workspace, its tests included), so that `run`, `test` and
/// the load runner (a binary of that build, and the server it serves) share
/// one build: a build of the server package alone resolves its
/// dependencies' features differently, and cargo would compile wasmtime
/// and the rest a second time.
pub fn build_release() -> anyhow::Result<()> {
    run_cargo(&RELEASE_BUILD)
}

/// The one release build of the workspace, its tests included.
const RELEASE_BUILD: [&str; 4] = ["test", "--release", "--workspace", "--no-run"];

/// Runs cargo from the repository root, as a person's shell would.
fn run_cargo(args: &[&str]) -> anyhow::Result<()> {
    run(cargo::command().args(args).current_dir(root()))
}

/// Runs a command, failing with its name when it fails.
pub fn run(command: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{command:?}");
    let status = command
        .status()
        .with_context(|| format!("cannot start {shown}"))?;
    if !status.success() {
        bail!("{shown} failed with {status}");
    }
    Ok(())
}
