//! `cargo xtask strategies`: build the `strategies/` workspace for
//! wasm32-wasip2, and the Python and JavaScript methods
//! ([`crate::polyglot`]), and install each component into the strategy
//! directory.
//!
//! What is installed is what the workspace has now: the strategy crates that
//! `cargo metadata` lists, each as the `.wasm` its cdylib builds. A file left
//! in the target directory by a crate since removed or renamed is not
//! installed, and neither are the sdk (no cdylib) and the test fixtures
//! under `strategies/testing/`.
//!
//! The task records what it installed, with a hash of each file, in
//! [`RECORD`] in the strategy directory. A file it installed earlier whose
//! crate is gone is removed if it is still exactly what the task wrote; any
//! other `.wasm` there (a file dropped in by hand, or one changed since) is
//! left alone and named in a note.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::{root, run, strategy_dir};

const TARGET: &str = "wasm32-wasip2";
/// Crates under this folder of the workspace are test fixtures: built for
/// the host's tests, never installed.
const FIXTURES: &str = "testing";
/// The strategy directory's record of what this task installed: one line per
/// file, `<hash> <file name>` (the server only loads `*.wasm`).
const RECORD: &str = ".xtask-installed";

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
    let files = read_record(dir)?.into_keys().map(|file| dir.join(file));
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
    println!("building strategy components ({TARGET}, release)");
    run(Command::new(cargo())
        .args(["build", "--release", "--workspace", "--target", TARGET])
        .arg("--target-dir")
        .arg(&target_dir)
        .current_dir(&workspace))?;

    let components = components(&metadata(&workspace)?)?;
    let built = target_dir.join(TARGET).join("release");
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
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
        let hash = install(&from, &dir.join(&component.file))?;
        installed.insert(component.file.clone(), hash);
    }
    for built in crate::polyglot::build()?.into_iter().filter(|b| !b.fixture) {
        let hash = install(&built.path, &dir.join(&built.file))?;
        installed.insert(built.file, hash);
    }

    let recorded = read_record(dir)?;
    let stale = stale(dir, &recorded, &installed)?;
    for file in &stale.removed {
        let path = dir.join(file);
        std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
        println!("removed {file}: installed earlier, its crate is no longer in the workspace");
    }
    write_record(dir, &installed)?;
    for file in &stale.kept {
        println!(
            "note: left {file} in place: no crate of the workspace builds it, and this task has no record of installing it as it is"
        );
    }
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
}

fn metadata(workspace: &Path) -> anyhow::Result<Value> {
    let output = Command::new(cargo())
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
/// every member with a cdylib target, except the fixtures under
/// [`FIXTURES`]. Sorted by file name.
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
        if !members.contains(field(package, "id")?.as_str())
            || Path::new(&field(package, "manifest_path")?).starts_with(&fixtures)
        {
            continue;
        }
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
            });
        }
    }
    components.sort_by(|a, b| a.file.cmp(&b.file));
    Ok(components)
}

/// Copies `from` next to `to` under a temporary name, then renames it into
/// place: a watching server sees either the old file or the whole new one.
/// An unchanged file is left alone. Returns the hash of what `to` holds.
fn install(from: &Path, to: &Path) -> anyhow::Result<u64> {
    let bytes = std::fs::read(from).with_context(|| format!("cannot read {}", from.display()))?;
    let hash = fnv1a(&bytes);
    if std::fs::read(to).is_ok_and(|existing| existing == bytes) {
        return Ok(hash);
    }
    let partial = to.with_extension("wasm.partial");
    std::fs::write(&partial, &bytes)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, to)
        .with_context(|| format!("cannot rename into {}", to.display()))?;
    Ok(hash)
}

/// The `.wasm` files of the strategy directory that are no crate's now.
#[derive(Debug, Default, PartialEq, Eq)]
struct Stale {
    /// Installed by this task, still byte for byte what it wrote: to remove.
    removed: Vec<String>,
    /// Anything else: dropped in by hand, or changed since it was installed.
    kept: Vec<String>,
}

/// Sorts the `.wasm` files in `dir` that are not in `installed` by whether
/// `recorded` proves this task wrote them as they are.
fn stale(
    dir: &Path,
    recorded: &BTreeMap<String, u64>,
    installed: &BTreeMap<String, u64>,
) -> anyhow::Result<Stale> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("cannot read {}", dir.display()))? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "wasm")
            && path.is_file()
            && let Some(name) = path.file_name().and_then(|n| n.to_str())
        {
            files.push(name.to_string());
        }
    }
    files.sort();
    let mut stale = Stale::default();
    for file in files {
        if installed.contains_key(&file) {
            continue;
        }
        let ours = match recorded.get(&file) {
            Some(&hash) => std::fs::read(dir.join(&file)).is_ok_and(|bytes| fnv1a(&bytes) == hash),
            None => false,
        };
        if ours {
            stale.removed.push(file);
        } else {
            stale.kept.push(file);
        }
    }
    Ok(stale)
}

fn read_record(dir: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let path = dir.join(RECORD);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(err) => return Err(err).with_context(|| format!("cannot read {}", path.display())),
    };
    Ok(parse_record(&text))
}

/// `<16 hex digits> <file name>` lines; a line of another shape is ignored,
/// so the files it would have named are treated as not installed by the task.
fn parse_record(text: &str) -> BTreeMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (hash, file) = line.split_once(' ')?;
            let hash = u64::from_str_radix(hash, 16).ok()?;
            (file.ends_with(".wasm") && !file.contains('/')).then(|| (file.to_string(), hash))
        })
        .collect()
}

/// Replaces the record with what this run installed (write, then rename).
fn write_record(dir: &Path, installed: &BTreeMap<String, u64>) -> anyhow::Result<()> {
    let text: String = installed
        .iter()
        .map(|(file, hash)| format!("{hash:016x} {file}\n"))
        .collect();
    let path = dir.join(RECORD);
    let partial: PathBuf = dir.join(format!("{RECORD}.partial"));
    std::fs::write(&partial, text)
        .with_context(|| format!("cannot write {}", partial.display()))?;
    std::fs::rename(&partial, &path)
        .with_context(|| format!("cannot rename into {}", path.display()))
}

/// FNV-1a, 64 bits: tells whether a file is still the one the task wrote.
/// Not a defence against anyone; a file changed by hand just has to differ.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
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
    fn components_are_the_cdylib_members_outside_the_fixtures() {
        let metadata = metadata(&[
            package("couponlab-sdk", "sdk", "lib"),
            package("redis-lua", "redis-lua", "cdylib"),
            package("read-committed", "read-committed", "cdylib"),
            package("test-build-a", "testing/build-a", "cdylib"),
        ]);
        let names: Vec<(String, String)> = components(&metadata)
            .unwrap()
            .into_iter()
            .map(|c| (c.package, c.file))
            .collect();
        assert_eq!(
            names,
            [
                ("read-committed".into(), "read_committed.wasm".into()),
                ("redis-lua".into(), "redis_lua.wasm".into()),
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
        assert_eq!(components(&metadata).unwrap().len(), 1);
    }

    #[test]
    fn the_record_reads_back_what_was_written() {
        let dir = scratch("record");
        let installed = BTreeMap::from([
            ("a.wasm".to_string(), 1u64),
            ("b.wasm".to_string(), u64::MAX),
        ]);
        write_record(&dir, &installed).unwrap();
        assert_eq!(read_record(&dir).unwrap(), installed);
        assert_eq!(
            parse_record("zz a.wasm\n0001 ../x.wasm\n0002 notes.txt\n0003 ok.wasm\n"),
            BTreeMap::from([("ok.wasm".to_string(), 3u64)])
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn only_files_the_task_wrote_and_nobody_changed_are_stale_to_remove() {
        let dir = scratch("stale");
        let write = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
        write("current.wasm", b"current");
        write("removed_crate.wasm", b"old build");
        write("changed_by_hand.wasm", b"someone's own");
        write("dropped_in.wasm", b"hand-made");
        write("notes.txt", b"not a component");
        let recorded = BTreeMap::from([
            ("current.wasm".to_string(), fnv1a(b"previous build")),
            ("removed_crate.wasm".to_string(), fnv1a(b"old build")),
            ("changed_by_hand.wasm".to_string(), fnv1a(b"old build")),
            ("vanished.wasm".to_string(), fnv1a(b"x")),
        ]);
        let installed = BTreeMap::from([("current.wasm".to_string(), fnv1a(b"current"))]);
        assert_eq!(
            stale(&dir, &recorded, &installed).unwrap(),
            Stale {
                removed: vec!["removed_crate.wasm".into()],
                kept: vec!["changed_by_hand.wasm".into(), "dropped_in.wasm".into()],
            }
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("xtask-strategies-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
