//! The `couponlab` binary's command line, run as a user runs it: a bad
//! argument is refused before anything is started, with what was expected.
//!
//! Being an integration test of this package, it also makes `cargo test`
//! build the binary, which the lab's tests (`tests/lab`) start as processes
//! of their own and `cargo xtask run` serves.

use std::process::{Command, Output};

fn couponlab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_couponlab"))
        .args(args)
        .output()
        .expect("the couponlab binary starts")
}

#[test]
fn the_version_is_the_packages() {
    let output = couponlab(&["--version"]);
    assert!(output.status.success());
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        format!("couponlab {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn an_unknown_consumer_is_refused_with_the_ones_there_are() {
    let output = couponlab(&["consume", "nobody"]);
    assert_eq!(output.status.code(), Some(2), "clap's usage error");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("invalid value 'nobody'"), "{said}");
    assert!(said.contains("possible values"), "{said}");
}

#[test]
fn check_without_a_file_says_which_argument_is_missing() {
    let output = couponlab(&["check"]);
    assert_eq!(output.status.code(), Some(2), "clap's usage error");
    let said = String::from_utf8_lossy(&output.stderr);
    assert!(said.contains("<FILE.wasm>"), "{said}");
}
