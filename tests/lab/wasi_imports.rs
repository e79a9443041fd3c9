//! What a component imports. A Rust strategy, from `cargo xtask new` as
//! from the workspace, imports the lab's interfaces and no WASI one: no
//! instantiation links WASI for it, no call builds a WASI context. A
//! Python or JavaScript one imports WASI (its interpreter needs it) and is
//! served beside it. A Rust panic, with no stderr to land on, reaches the
//! lab's log through the sdk's hook.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{Setup, component, outcome};

/// Every interface or module name `wasm` imports, its nested components'
/// and core modules' included.
fn imports(wasm: &Path) -> Vec<String> {
    let bytes = std::fs::read(wasm).unwrap_or_else(|err| panic!("{}: {err}", wasm.display()));
    let mut names = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(&bytes) {
        match payload.unwrap() {
            wasmparser::Payload::ComponentImportSection(section) => {
                for import in section {
                    names.push(import.unwrap().name.name.to_string());
                }
            }
            wasmparser::Payload::ImportSection(section) => {
                for import in section.into_imports() {
                    names.push(import.unwrap().module.to_string());
                }
            }
            _ => {}
        }
    }
    names
}

fn wasi_imports(wasm: &Path) -> Vec<String> {
    imports(wasm)
        .into_iter()
        .filter(|name| name.starts_with("wasi"))
        .collect()
}

/// The repository's root.
fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A cargo command without the variables `cargo test` gives this process
/// for its own package: a nested build that inherits them rebuilds what
/// watches them.
fn cargo(dir: &Path) -> Command {
    let mut command = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    command.current_dir(dir);
    for (name, _) in std::env::vars() {
        if name.starts_with("CARGO_PKG_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
            ]
            .contains(&name.as_str())
        {
            command.env_remove(name);
        }
    }
    command
}

fn succeeds(command: &mut Command) {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A checkout holding only the strategies workspace's settings (its
/// manifest with no members yet, its lock file and its build
/// configuration), the sdk and the contract taken from this one.
fn empty_checkout(at: &Path) {
    let strategies = repository().join("strategies");
    let manifest = std::fs::read_to_string(strategies.join("Cargo.toml")).unwrap();
    let start = manifest.find("members = [").expect("a members list");
    let end = start + manifest[start..].find(']').unwrap() + 1;
    let manifest = format!(
        "{}members = [\n    \"testing/*\",\n]{}",
        &manifest[..start],
        &manifest[end..]
    )
    .replace(
        "path = \"../contract\"",
        &format!("path = {:?}", repository().join("contract")),
    )
    .replace(
        "path = \"sdk\"",
        &format!("path = {:?}", strategies.join("sdk")),
    );
    std::fs::create_dir_all(at.join("strategies/.cargo")).unwrap();
    std::fs::write(at.join("strategies/Cargo.toml"), manifest).unwrap();
    for file in ["Cargo.lock", ".cargo/config.toml"] {
        std::fs::copy(strategies.join(file), at.join("strategies").join(file)).unwrap();
    }
}

/// `cargo xtask new` writes a Rust strategy into an empty checkout; built
/// as the workspace builds every strategy, it imports the lab's interfaces
/// and not one of WASI's.
#[test]
fn a_rust_strategy_from_cargo_xtask_new_imports_no_wasi() {
    let checkout = std::env::temp_dir().join(format!("couponlab-wasi-{}", std::process::id()));
    std::fs::remove_dir_all(&checkout).ok();
    empty_checkout(&checkout);
    succeeds(
        cargo(&repository())
            .args([
                "xtask",
                "new",
                "wasi-imports-probe",
                "--lang",
                "rust",
                "--into",
            ])
            .arg(&checkout),
    );
    // Its fixtures' folder, which the scaffold adds the crate before, is
    // not there to load.
    let manifest = checkout.join("strategies/Cargo.toml");
    let members = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, members.replace("    \"testing/*\",\n", "")).unwrap();
    // The workspace's own target directory: the sdk and its dependencies
    // are built there already, for the same target and profile.
    let target = repository().join("strategies/target");
    succeeds(
        cargo(&checkout.join("strategies"))
            .args([
                "build",
                "--release",
                "--offline",
                "-p",
                "wasi-imports-probe",
            ])
            .arg("--target-dir")
            .arg(&target),
    );
    let built = target.join("wasm32-unknown-unknown/release/wasi_imports_probe.wasm");
    let imports = imports(&built);
    assert!(
        imports
            .iter()
            .any(|name| name.starts_with("couponlab:strategy/redis@")),
        "{imports:?}"
    );
    assert_eq!(wasi_imports(&built), Vec::<String>::new(), "{imports:?}");
    std::fs::remove_dir_all(&checkout).ok();
}

/// REDIS_LUA, built by the workspace, imports no WASI; JS_REDIS_LUA imports
/// it. One lab serves both, each issuing to a member and refusing the
/// member's second request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_that_imports_wasi_is_served_beside_one_that_does_not() {
    assert_eq!(wasi_imports(&component("redis_lua")), Vec::<String>::new());
    let interpreter = wasi_imports(&component("js_redis_lua"));
    assert!(
        interpreter.iter().any(|name| name.starts_with("wasi:cli/")),
        "{interpreter:?}"
    );
    let lab = Setup::with(&["redis_lua", "js_redis_lua"]).start().await;
    for method in ["REDIS_LUA", "JS_REDIS_LUA"] {
        let (members, coupon) = lab.members_and_coupon(1, 10).await;
        let issued = lab.issue(coupon, members[0], method).await;
        assert_eq!(issued.status, 200, "{method}: {}", issued.body);
        let again = lab.issue(coupon, members[0], method).await;
        assert_eq!(outcome(&again), "DUPLICATE", "{method}: {}", again.body);
    }
    lab.finish().await;
}

/// TEST_LUA_TRAP panics on a member's second request: its message, logged
/// by the sdk's panic hook, is in the 500 of the call it ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_panic_reaches_the_log_and_the_message_of_its_call() {
    let lab = Setup::with(&["test_lua_trap"]).start().await;
    let (members, coupon) = lab.members_and_coupon(1, 10).await;
    lab.issue(coupon, members[0], "REDIS_LUA").await.expect_ok();
    let again = lab.issue(coupon, members[0], "REDIS_LUA").await;
    let message = again.fails_with(500);
    let said = format!("member {} asked twice", members[0]);
    assert!(
        message.contains("logged: panicked at") && message.contains(&said),
        "{message}"
    );
    lab.finish().await;
}
