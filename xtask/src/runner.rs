//! `cargo xtask loadtest | bench | idle | soak | api-check`: the load
//! runner (`loadtest/`, a crate of its own) run once what its task needs
//! is there. The runner is a binary of the release build, so that build
//! comes first; a task that serves a lab needs Redis and MySQL answering,
//! and, when the lab is this checkout's, its components built and
//! installed; and the tools the task calls are installed beside the build.
//! The arguments go to the runner as they were given.

use std::ffi::OsStr;
use std::io::{BufRead, BufReader};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::{build_all, build_release, packages, release_binary, services, strategy_dir, tools};

/// The load runner's binary.
const RUNNER: &str = "couponlab-loadtest";

/// The xtask tasks that are the runner's.
pub const TASKS: [&str; 5] = ["loadtest", "bench", "idle", "soak", "api-check"];

pub fn main(task: &str, args: &[String]) -> anyhow::Result<()> {
    let needs = Needs::of(task, args);
    if needs.lab {
        services::ensure()?;
    }
    let profiling = needs.profiling;
    if needs.components {
        build_all(&strategy_dir(), move || needs.install_tools())?;
    } else {
        build_release()?;
        needs.install_tools()?;
    }
    if profiling {
        build_profiling()?;
    }
    run(task, args)
}

/// Builds the servers callgrind counts with line tables (the `profiling`
/// profile), which the release build leaves out: its instructions are
/// split by each line's source file. A build of its own, beside the
/// release one, made only for `bench --instructions`.
fn build_profiling() -> anyhow::Result<()> {
    const PROFILING_BUILD: [&str; 6] = [
        "build",
        "--profile",
        "profiling",
        "-p",
        "couponlab",
        "--bins",
    ];
    crate::run(
        crate::cargo::command()
            .args(PROFILING_BUILD)
            .current_dir(crate::root()),
    )
}

/// The checked runs `cargo xtask test` ends with, on what it built: the
/// load runner end to end (under faults too, and on each engine), the soak
/// and the API check on each engine (half a minute's soak and half the
/// check's examples each). The two engines' soaks run at once, and so do
/// their API checks: each engine's lab has a database and a Redis of its
/// own, and none of them keeps a core busy. Answers how long each took.
pub fn smoke() -> anyhow::Result<Vec<(String, Duration)>> {
    let started = Instant::now();
    run("loadtest", &["smoke"])?;
    let mut took = vec![(
        "load test smoke (engines, faults)".into(),
        started.elapsed(),
    )];
    took.extend(on_both_engines("soak", |engine| {
        vec!["smoke", "--engine", engine, "--duration", "30s"]
    })?);
    took.extend(on_both_engines("api-check", |engine| {
        vec!["--engine", engine, "--max-examples", API_CHECK_EXAMPLES]
    })?);
    Ok(took)
}

/// The engines the checked runs cover.
const ENGINES: [&str; 2] = ["mariadb", "postgres"];

/// Runs the runner's `task` on each engine at once, each line it prints
/// marked with its engine; answers how long each took.
fn on_both_engines(
    task: &'static str,
    args: impl Fn(&'static str) -> Vec<&'static str> + Sync,
) -> anyhow::Result<Vec<(String, Duration)>> {
    std::thread::scope(|scope| {
        let runs: Vec<_> = ENGINES
            .map(|engine| {
                let args = args(engine);
                scope.spawn(move || -> anyhow::Result<(String, Duration)> {
                    let started = Instant::now();
                    run_marked(task, &args, &format!("[{task} {engine}] "))?;
                    Ok((format!("{task} on {engine}"), started.elapsed()))
                })
            })
            .into_iter()
            .collect();
        runs.into_iter()
            .map(|run| run.join().expect("a checked run's thread panicked"))
            .collect()
    })
}

/// [`run`], each line of the runner's output printed after `mark`.
fn run_marked(task: &str, args: &[&str], mark: &str) -> anyhow::Result<()> {
    let binary = release_binary(RUNNER);
    let mut child = Command::new(&binary)
        .arg(task)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start the load runner {}", binary.display()))?;
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    std::thread::scope(|scope| {
        scope.spawn(|| stdout.map(|out| print_marked(out, mark)));
        scope.spawn(|| stderr.map(|err| print_marked(err, mark)));
    });
    let status = child.wait()?;
    exit_unless_passed(task, status)
}

fn print_marked(output: impl std::io::Read, mark: &str) {
    for line in BufReader::new(output).lines().map_while(Result::ok) {
        println!("{mark}{line}");
    }
}

/// Examples an operation of each engine's API check in `cargo xtask test`:
/// half the check's default of 100, so both engines cost what one did.
const API_CHECK_EXAMPLES: &str = "50";

/// Runs the runner's `task` with `args`, as built; a failure ends xtask
/// with the runner's exit code, the runner having said why.
fn run(task: &str, args: &[impl AsRef<OsStr>]) -> anyhow::Result<()> {
    let binary = release_binary(RUNNER);
    let status = Command::new(&binary)
        .arg(task)
        .args(args)
        .status()
        .with_context(|| format!("cannot start the load runner {}", binary.display()))?;
    exit_unless_passed(task, status)
}

/// A failure ends xtask with the runner's exit code, the runner having
/// said why.
fn exit_unless_passed(task: &str, status: ExitStatus) -> anyhow::Result<()> {
    match status.code() {
        Some(0) => Ok(()),
        Some(code) => std::process::exit(code),
        None => bail!("{RUNNER} {task} ended with {status}"),
    }
}

/// A tool the runner calls.
#[derive(Clone, Copy)]
enum Tool {
    /// A binary of Debian's: its name, and its package.
    Debian(&'static str, &'static str),
    K6,
    Schemathesis,
}

/// A Redis of the run's own: the server, and the client that asks it.
const OWN_REDIS: [Tool; 2] = [
    Tool::Debian("redis-server", "redis-server"),
    Tool::Debian("redis-cli", "redis-tools"),
];

/// A NATS server of the run's own.
const OWN_NATS: Tool = Tool::Debian("nats-server", "nats-server");

/// What a runner task needs besides the runner.
#[derive(Default)]
struct Needs {
    /// It serves a lab: Redis and MySQL must answer.
    lab: bool,
    /// The lab is this checkout's: the components are built and installed.
    components: bool,
    /// The servers are counted under callgrind: built with line tables.
    profiling: bool,
    tools: Vec<Tool>,
}

impl Needs {
    fn of(task: &str, args: &[String]) -> Needs {
        let given = |flag: &str| args.iter().any(|arg| arg == flag);
        if given("--help") || given("-h") || given("help") {
            return Needs::default();
        }
        let lab = |components: bool, tools: &[Tool]| Needs {
            lab: true,
            components,
            profiling: false,
            tools: tools.to_vec(),
        };
        match task {
            // The smoke takes a picture of its report.
            "loadtest" if args.first().is_some_and(|mode| mode == "smoke") => {
                lab(true, &[Tool::K6, Tool::Debian("chromium", "chromium")])
            }
            // `--fault redis-restart` and `nats-restart` give the served lab
            // a Redis and a NATS server of its own.
            "loadtest" if given("--serve") => {
                lab(true, &[Tool::K6, OWN_REDIS[0], OWN_REDIS[1], OWN_NATS])
            }
            "loadtest" => Needs {
                tools: vec![Tool::K6],
                ..Needs::default()
            },
            // `--instructions` runs both servers under callgrind.
            "bench" if given("--instructions") => Needs {
                profiling: true,
                ..lab(
                    true,
                    &[
                        Tool::Debian("valgrind", "valgrind"),
                        Tool::Debian("callgrind_control", "valgrind"),
                    ],
                )
            },
            "bench" => lab(
                true,
                &[
                    Tool::Debian("wrk", "wrk"),
                    Tool::Debian("redis-benchmark", "redis-tools"),
                ],
            ),
            // `--server PATH` measures another build, with its components.
            "idle" => lab(!given("--server"), &OWN_REDIS),
            "soak" => lab(true, &OWN_REDIS),
            // api-check
            _ => lab(true, &[Tool::Schemathesis]),
        }
    }

    fn install_tools(&self) -> anyhow::Result<()> {
        for tool in &self.tools {
            match *tool {
                Tool::Debian(binary, package) => {
                    packages::ensure_debian(binary, package)?;
                }
                Tool::K6 => tools::ensure_k6()?,
                Tool::Schemathesis => tools::ensure_schemathesis()?,
            }
        }
        Ok(())
    }
}
