//! Cargo as xtask runs it: in the environment a person's shell gives it.
//! `cargo xtask` is `cargo run`, which hands xtask its own package's
//! variables (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*`, ...) and a library path;
//! a nested cargo that inherits them reruns every build script that watches
//! one (ring's watches `CARGO_MANIFEST_DIR`) and rebuilds all above it, so
//! `cargo test --release` typed by hand and any `cargo xtask` command
//! rebuilt part of the tree each time, both ways. Without them the two are
//! one build, which [`nothing_left_to_build`] checks.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

use crate::root;

/// Variables `cargo run` sets for the program it runs, by exact name.
const SET_BY_CARGO_RUN: [&str; 5] = [
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
];
/// The prefix of the package variables `cargo run` sets.
const PACKAGE_VARIABLES: &str = "CARGO_PKG_";
/// The library path `cargo run` prepends its target and toolchain to.
const LIBRARY_PATH: &str = "LD_LIBRARY_PATH";

/// A cargo command without what `cargo run` added to xtask's environment.
pub fn command() -> Command {
    let mut command = Command::new(binary());
    for (name, _) in std::env::vars_os() {
        let name = name.to_string_lossy();
        if SET_BY_CARGO_RUN.contains(&name.as_ref()) || name.starts_with(PACKAGE_VARIABLES) {
            command.env_remove(name.as_ref());
        }
    }
    let toolchains = rustup_home().join("toolchains");
    if let Some(paths) = std::env::var_os(LIBRARY_PATH) {
        match own_library_paths(&paths, &[&crate::target_dir(), &toolchains]) {
            Some(kept) => command.env(LIBRARY_PATH, kept),
            None => command.env_remove(LIBRARY_PATH),
        };
    }
    command
}

/// The cargo that runs xtask, else the one on the path.
pub fn binary() -> String {
    std::env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn rustup_home() -> PathBuf {
    std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".rustup")))
        .unwrap_or_default()
}

/// `paths` without the entries under `added` (what cargo prepended); `None`
/// when nothing is left.
fn own_library_paths(paths: &std::ffi::OsStr, added: &[&Path]) -> Option<std::ffi::OsString> {
    let kept: Vec<PathBuf> = std::env::split_paths(paths)
        .filter(|path| !added.iter().any(|dir| path.starts_with(dir)))
        .collect();
    if kept.is_empty() {
        return None;
    }
    std::env::join_paths(kept).ok()
}

/// Runs `args` (a build) again and fails naming each unit it compiled:
/// right after the same build, a build in a person's environment must
/// find everything fresh, or typing the command by hand would rebuild.
pub fn nothing_left_to_build(args: &[&str]) -> anyhow::Result<()> {
    let output = command()
        .args(args)
        .arg("--message-format=json")
        .current_dir(root())
        .output()
        .context("cannot run cargo")?;
    if !output.status.success() {
        bail!(
            "cargo {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let rebuilt = compiled_units(&String::from_utf8_lossy(&output.stdout));
    if !rebuilt.is_empty() {
        bail!(
            "`cargo {}` right after the same build compiled {} unit(s) again ({}): a variable of \
             the environment differs between xtask's build and one typed by hand",
            args.join(" "),
            rebuilt.len(),
            rebuilt.join(", ")
        );
    }
    println!("cargo {}: nothing left to build", args.join(" "));
    Ok(())
}

/// The units cargo's JSON messages say it compiled rather than found fresh.
fn compiled_units(messages: &str) -> Vec<String> {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact" && message["fresh"] == false)
        .map(|message| {
            message["target"]["name"]
                .as_str()
                .unwrap_or("?")
                .to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cargo_runs_additions_to_the_library_path_are_dropped_and_the_rest_kept() {
        let paths = std::env::join_paths([
            "/ws/target/release",
            "/ws/target/release/deps",
            "/home/me/.rustup/toolchains/stable/lib",
            "/opt/lib",
        ])
        .unwrap();
        let kept = own_library_paths(
            &paths,
            &[
                Path::new("/ws/target"),
                Path::new("/home/me/.rustup/toolchains"),
            ],
        );
        assert_eq!(kept, Some("/opt/lib".into()));
        let only_cargos = std::env::join_paths(["/ws/target/debug"]).unwrap();
        assert_eq!(
            own_library_paths(&only_cargos, &[Path::new("/ws/target")]),
            None
        );
    }

    #[test]
    fn only_units_compiled_again_are_named() {
        let messages = [
            r#"{"reason":"compiler-artifact","fresh":true,"target":{"name":"tokio"}}"#,
            r#"{"reason":"compiler-artifact","fresh":false,"target":{"name":"ring"}}"#,
            r#"{"reason":"build-script-executed","fresh":false}"#,
            "not json",
        ]
        .join("\n");
        assert_eq!(compiled_units(&messages), ["ring"]);
    }
}
