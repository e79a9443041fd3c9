//! `cargo xtask strategies`: build the `strategies/` workspace for
//! wasm32-unknown-unknown, linked into components whose only imports are
//! the lab's WIT (`strategies/.cargo/config.toml`), and the Python and
//! JavaScript methods ([`crate::polyglot`]), and install each component
//! into the strategy directory.
//!
//! What is installed is what the workspace has now: the strategy crates that
//! `cargo metadata` lists, each as the `.wasm` its cdylib builds. A file left
//! in the target directory by a crate since removed or renamed is not
//! installed, and neither are the sdk (no cdylib) and the test fixtures
//! under `strategies/testing/`.
//!
//! The task records what it installed, with a hash of each file, in
//! [`installed::RECORD`] in the strategy directory. A file it installed earlier whose
//! crate is gone is removed if it is still exactly what the task wrote; any
//! other `.wasm` there (a file dropped in by hand, or one changed since) is
//! left alone and named in a note.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::{installed, root, run, strategy_dir};

const TARGET: &str = "wasm32-unknown-unknown";
/// Where the host's tests read every built component, fixtures included
/// (`tests/lab/common.rs`), below the workspace's target directory: the
/// directory a wasm32-wasip2 build left them in, kept under that name so
/// the tests find this build's components where they look.
const TESTS_READ: &str = "wasm32-wasip2/release";
/// Crates under this folder of the workspace are test fixtures: built for
/// the host's tests, never installed.
const FIXTURES: &str = "testing";

/// `cargo xtask strategies [--check]`.
pub fn main(args: &[String]) -> anyhow::Result<()> {
    let check = match args {
        [] => false,
        [flag] if flag == "--check" => true,
        _ => bail!("usage: cargo xtask strategies [--check]"),
    };
    let dir = strategy_dir();
    build_and_install(&dir)?;
    if check {
        check_installed(&dir)?;
    }
    Ok(())
}

/// Runs `couponlab check` on every installed component: each one's canary
/// against the lab's servers (`DATABASE_URL`, `REDIS_URL` as `couponlab`
/// reads them, the local ones by default).
fn check_installed(dir: &Path) -> anyhow::Result<()> {
    crate::services::ensure()?;
    crate::build_release()?;
    let files = installed::read_record(dir)?
        .into_keys()
        .map(|file| dir.join(file));
    println!("proving every installed component (couponlab check)");
    run(Command::new(crate::release_binary("couponlab"))
        .arg("check")
        .args(files)
        .env("COUPONLAB_STRATEGY_DIR", dir)
        .current_dir(root()))
}

pub fn build_and_install(dir: &Path) -> anyhow::Result<()> {
    ensure_target()?;
    let workspace = root().join("strategies");
    // The host's tests read the components from `strategies/target`, so the
    // build goes there even when CARGO_TARGET_DIR names the host's target.
    let target_dir = workspace.join("target");
    // The Python and JavaScript components (their toolchains installed
    // first) build beside the Rust ones, not after them: after, the
    // JavaScript builds were the last half minute of a cold `cargo xtask
    // test`, after the host's build had ended.
    let polyglot = std::thread::spawn(crate::polyglot::build);
    println!("building strategy components ({TARGET}, release)");
    let rust = run(crate::cargo::command()
        .args(["build", "--release", "--workspace", "--target", TARGET])
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(&workspace));
    let polyglot = polyglot
        .join()
        .map_err(|_| anyhow::anyhow!("building the Python and JavaScript components panicked"))?;
    rust?;

    let components = components(&metadata(&workspace)?)?;
    let built = target_dir.join(TARGET).join("release");
    let tests_read = target_dir.join(TESTS_READ);
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    std::fs::create_dir_all(&tests_read)
        .with_context(|| format!("cannot create {}", tests_read.display()))?;
    let mut installed = BTreeMap::new();
    for component in &components {
        let from = built.join(&component.file);
        if !from.is_file() {
            bail!(
                "the build of {} left no {}",
                component.package,
                from.display()
            );
        }
        installed::install(&from, &tests_read.join(&component.file))?;
        if !component.fixture {
            let hash = installed::install(&from, &dir.join(&component.file))?;
            installed.insert(component.file.clone(), hash);
        }
    }
    for built in polyglot?.into_iter().filter(|b| !b.fixture) {
        let hash = installed::install(&built.path, &dir.join(&built.file))?;
        installed.insert(built.file, hash);
    }

    installed::record(dir, &installed)?;
    println!(
        "installed {} components into {}",
        installed.len(),
        dir.display()
    );
    Ok(())
}

/// One strategy crate of the workspace and the file its build produces.
#[derive(Debug, PartialEq, Eq)]
struct Component {
    package: String,
    /// `<lib name>.wasm` (the lib name is the package name with `_` for `-`).
    file: String,
    /// Under [`FIXTURES`]: built for the tests, never installed.
    fixture: bool,
}

fn metadata(workspace: &Path) -> anyhow::Result<Value> {
    let output = crate::cargo::command()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .current_dir(workspace)
        .output()
        .context("cannot run cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed in {}: {}",
            workspace.display(),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    serde_json::from_slice(&output.stdout).context("cargo metadata printed no JSON")
}

/// The workspace's strategy crates from `cargo metadata --no-deps` output:
/// every member with a cdylib target, the fixtures under [`FIXTURES`]
/// marked. Sorted by file name.
fn components(metadata: &Value) -> anyhow::Result<Vec<Component>> {
    let field = |value: &Value, name: &str| -> anyhow::Result<String> {
        value[name]
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("cargo metadata: no {name:?} in {value}"))
    };
    let fixtures = Path::new(&field(metadata, "workspace_root")?).join(FIXTURES);
    let members: BTreeSet<&str> = metadata["workspace_members"]
        .as_array()
        .context("cargo metadata: no workspace_members")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut components = Vec::new();
    for package in metadata["packages"]
        .as_array()
        .context("cargo metadata: no packages")?
    {
        if !members.contains(field(package, "id")?.as_str()) {
            continue;
        }
        let fixture = Path::new(&field(package, "manifest_path")?).starts_with(&fixtures);
        let cdylib = package["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|target| {
                target["kind"]
                    .as_array()
                    .is_some_and(|kinds| kinds.iter().any(|kind| kind == "cdylib"))
            });
        if let Some(target) = cdylib {
            components.push(Component {
                package: field(package, "name")?,
                file: format!("{}.wasm", field(target, "name")?.replace('-', "_")),
                fixture,
            });
        }
    }
    components.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(components)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn package(name: &str, dir: &str, kind: &str) -> Value {
        json!({
            "name": name,
            "id": format!("path+file:///ws/{dir}#{name}@0.1.0"),
            "manifest_path": format!("/ws/{dir}/Cargo.toml"),
            "targets": [{ "name": name.replace('-', "_"), "kind": [kind] }],
        })
    }

    fn metadata(packages: &[Value]) -> Value {
        let members: Vec<Value> = packages.iter().map(|p| p["id"].clone()).collect();
        json!({ "packages": packages, "workspace_members": members, "workspace_root": "/ws" })
    }

    #[test]
    fn components_are_the_cdylib_members_with_the_fixtures_marked() {
        let metadata = metadata(&[
            package("couponlab-sdk", "sdk", "lib"),
            package("redis-lua", "redis-lua", "cdylib"),
            package("read-committed", "read-committed", "cdylib"),
            package("test-build-a", "testing/build-a", "cdylib"),
        ]);
        let names: Vec<(String, String, bool)> = components(&metadata)
            .unwrap()
            .into_iter()
            .map(|c| (c.package, c.file, c.fixture))
            .collect();
        assert_eq!(
            names,
            [
                ("read-committed".into(), "read_committed.wasm".into(), false),
                ("redis-lua".into(), "redis_lua.wasm".into(), false),
                ("test-build-a".into(), "test_build_a.wasm".into(), true),
            ]
        );
    }

    #[test]
    fn a_package_that_is_not_a_workspace_member_is_not_installed() {
        let mut metadata = metadata(&[
            package("redis-lua", "redis-lua", "cdylib"),
            package("gone", "gone", "cdylib"),
        ]);
        metadata["workspace_members"] = json!([metadata["packages"][0]["id"]]);
        let files: Vec<String> = components(&metadata)
            .unwrap()
            .into_iter()
            .map(|c| c.file)
            .collect();
        assert_eq!(files, ["redis_lua.wasm"]);
    }

    #[test]
    fn a_fixture_folder_is_matched_by_path_not_by_name() {
        // `testing-tools` is not under `testing/`.
        let metadata = metadata(&[package("testing-tools", "testing-tools", "cdylib")]);
        assert!(!components(&metadata).unwrap()[0].fixture);
    }
}
