//! `cargo xtask test`: the whole suite, and where its time goes. Each
//! phase is timed and the times are printed at the end (and, for the test
//! binaries, the ten slowest tests), so a slower suite says which part
//! grew. The test binaries run under cargo-nextest when it is installed (a
//! process for each test, several at once: `.config/nextest.toml`), else
//! under `cargo test`; a run given arguments is someone iterating on a few
//! tests, and takes them as `cargo test` does.

use std::time::{Duration, Instant};

use anyhow::Context;

use crate::{RELEASE_BUILD, build_all, cargo, prepare_for_tests, root, run, runner, services};

/// How many of the slowest tests are named.
const SLOWEST: usize = 10;

pub fn main(rest: &[String]) -> anyhow::Result<()> {
    let mut phases = Phases::starting_now();
    services::ensure()?;
    // The Galera tests' three nodes (`tests/lab/galera.rs`) start beside
    // the build: a quarter of a minute spent mostly waiting for each other.
    let galera = std::thread::spawn(crate::galera::up);
    let built = build_all(&crate::strategy_dir(), prepare_for_tests);
    galera
        .join()
        .map_err(|_| anyhow::anyhow!("starting the Galera cluster panicked"))??;
    built?;
    cargo::nothing_left_to_build(&RELEASE_BUILD)?;
    phases.done("services, tools, build");
    if !rest.is_empty() {
        let mut test = vec!["test", "--release", "--workspace"];
        test.extend(rest.iter().map(String::as_str));
        return run(cargo::command().args(&test).current_dir(root()));
    }
    if nextest_installed() {
        run(cargo::command()
            .args(["nextest", "run", "--release", "--workspace"])
            .current_dir(root()))?;
        print_slowest()?;
    } else {
        println!(
            "cargo-nextest is not installed: the tests run under cargo test, one binary at a time"
        );
        run(cargo::command()
            .args(["test", "--release", "--workspace"])
            .current_dir(root()))?;
    }
    phases.done("test binaries");
    for (run, took) in runner::smoke()? {
        phases.took(run, took);
    }
    phases.print();
    Ok(())
}

/// The suite's phases, each with how long it took.
struct Phases {
    done: Vec<(String, Duration)>,
    since: Instant,
    /// The suite's start: phases that ran side by side (the two engines'
    /// soaks) make the sum of their times more than the suite took.
    started: Instant,
}

impl Phases {
    fn starting_now() -> Phases {
        let now = Instant::now();
        Phases {
            done: Vec::new(),
            since: now,
            started: now,
        }
    }

    fn done(&mut self, phase: &str) {
        let now = Instant::now();
        self.done.push((phase.to_string(), now - self.since));
        self.since = now;
    }

    /// A phase timed by its own runner, which ended just now.
    fn took(&mut self, phase: String, took: Duration) {
        self.done.push((phase, took));
        self.since = Instant::now();
    }

    fn print(&self) {
        println!("cargo xtask test took {}:", minutes(self.started.elapsed()));
        for (phase, took) in &self.done {
            println!("  {:>9}  {phase}", minutes(*took));
        }
    }
}

/// `12 min 5 s`.
fn minutes(took: Duration) -> String {
    let seconds = took.as_secs();
    format!("{} min {:>2} s", seconds / 60, seconds % 60)
}

fn nextest_installed() -> bool {
    cargo::command()
        .args(["nextest", "--version"])
        .output()
        .is_ok_and(|output| output.status.success())
}

/// Prints the slowest tests of the run nextest just made, from its JUnit
/// report (`.config/nextest.toml`).
fn print_slowest() -> anyhow::Result<()> {
    let report = crate::target_dir().join("nextest/default/junit.xml");
    let xml = std::fs::read_to_string(&report)
        .with_context(|| format!("cannot read {}", report.display()))?;
    let mut times = test_times(&xml);
    times.sort_by(|a, b| b.1.total_cmp(&a.1));
    println!("the {SLOWEST} slowest tests:");
    for (test, seconds) in times.iter().take(SLOWEST) {
        println!("  {seconds:>7.1} s  {test}");
    }
    Ok(())
}

/// Each `<testcase name=".." classname=".." time="..">` of a JUnit report:
/// the binary and test's name, and its seconds.
fn test_times(xml: &str) -> Vec<(String, f64)> {
    xml.split("<testcase ")
        .skip(1)
        .filter_map(|case| {
            let tag = case.split('>').next()?;
            let attribute = |name: &str| {
                let start = tag.find(&format!("{name}=\""))? + name.len() + 2;
                let end = start + tag[start..].find('"')?;
                Some(tag[start..end].to_string())
            };
            let seconds = attribute("time")?.parse().ok()?;
            let test = format!("{} {}", attribute("classname")?, attribute("name")?);
            Some((test, seconds))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_test_case_is_read_with_its_time() {
        let xml = r#"<testsuites><testsuite name="couponlab-tests::lab">
            <testcase name="brokers::a" classname="couponlab-tests::lab" timestamp="x" time="12.5">
            </testcase><testcase name="b" classname="xtask" time="0.25"/></testsuite></testsuites>"#;
        assert_eq!(
            test_times(xml),
            [
                ("couponlab-tests::lab brokers::a".to_string(), 12.5),
                ("xtask b".to_string(), 0.25)
            ]
        );
        assert_eq!(minutes(Duration::from_secs(725)), "12 min  5 s");
    }
}
