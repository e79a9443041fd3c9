//! The runner's command line, run as xtask runs it: every task xtask hands
//! over is one the runner knows, and a bad argument is refused before any
//! server is started.
//!
//! Being an integration test of this package, it also makes `cargo test`
//! build the runner's binary, which `cargo xtask test` ends with and the
//! other runner tasks start.

use std::process::Command;

const RUNNER: &str = env!("CARGO_BIN_EXE_couponlab-loadtest");

#[test]
fn every_task_xtask_hands_over_is_the_runners() {
    for task in ["loadtest", "bench", "idle", "soak", "api-check"] {
        let help = Command::new(RUNNER).args([task, "--help"]).output();
        let help = help.expect("the runner starts");
        let said = String::from_utf8_lossy(&help.stderr);
        assert!(help.status.success(), "{task}: {said}");
    }
}

#[test]
fn an_unknown_task_is_refused_with_the_usage() {
    let refused = Command::new(RUNNER).arg("stress").output();
    let refused = refused.expect("the runner starts");
    assert_eq!(refused.status.code(), Some(2), "clap's usage error");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("unrecognized subcommand 'stress'"), "{said}");
    assert!(said.contains("Usage: cargo xtask"), "{said}");
}
