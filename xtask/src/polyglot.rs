//! The strategies in Python (`strategies/python/`) and JavaScript
//! (`strategies/js/`), built with their ecosystems' own tools against the
//! same WIT as the Rust ones: componentize-py from PyPI
//! (`strategies/python/requirements.txt`) and componentize-js from npm
//! (`strategies/js/toolchain/package-lock.json`), both pinned and installed
//! under the target directory when missing or when the pins change.
//!
//! Each method is a directory holding `app.py` or `app.js`, whose first
//! line names its world (`# world: issuer`, `// world: stream-issuer`);
//! those under `testing/` are the host's test fixtures, built, never
//! installed. Everything goes to `strategies/target/polyglot/`, beside the
//! Rust components, where the host's tests read them.
//! It is built with its language's sdk (`sdk/`) and with
//! `couponlab_contract`, which this module writes from the contract crate
//! and `lua/`: the key names, stream fields and scripts the Rust sdk and
//! the host use, never typed out again.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use anyhow::{Context, bail};
use couponlab_contract::{ISSUE_STREAM, fields, keys};

use crate::{root, run};

mod toolchains;
use toolchains::toolchain;

/// The file a method's directory builds, and where it was built.
pub struct Built {
    pub file: String,
    pub path: PathBuf,
    /// A test fixture: not to be installed.
    pub fixture: bool,
}

/// A coupon id no key is made of otherwise: the contract's functions are
/// called with it and split around it.
const SENTINEL: u64 = 987_654_321_987;

/// The folder of a language's test fixtures.
const FIXTURES: &str = "testing";

#[derive(Clone, Copy)]
enum Language {
    Python,
    JavaScript,
}

impl Language {
    fn dir(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::JavaScript => "js",
        }
    }

    fn app(self) -> &'static str {
        match self {
            Language::Python => "app.py",
            Language::JavaScript => "app.js",
        }
    }

    fn comment(self) -> &'static str {
        match self {
            Language::Python => "#",
            Language::JavaScript => "//",
        }
    }
}

/// Where the staged sources, the toolchains and the built components are.
fn work_dir() -> PathBuf {
    root().join("strategies").join("target").join("polyglot")
}

/// A language's builds that run at once: each keeps one core busy for
/// seconds, and on a cold `cargo xtask test` the last of them may come
/// after the host's build, with both cores free.
const BUILDS_AT_ONCE: usize = 2;

/// Installs each language's toolchain and builds its methods and fixtures
/// into `strategies/target/polyglot/out`, the two languages at once: an
/// install waits mostly on the network, and neither language's builds wait
/// for the other's. The components' build runs this beside the Rust ones'.
pub fn build() -> anyhow::Result<Vec<Built>> {
    std::fs::create_dir_all(work_dir().join("out"))?;
    on_threads(
        [Language::Python, Language::JavaScript].map(|language| move || build_language(language)),
    )
}

/// A language's toolchain installed, then its methods and fixtures built,
/// [`BUILDS_AT_ONCE`] at a time.
fn build_language(language: Language) -> anyhow::Result<Vec<Built>> {
    let methods = methods(language)?;
    if methods.is_empty() {
        return Ok(Vec::new());
    }
    let tool = toolchain(language)?;
    let next = AtomicUsize::new(0);
    let worker = || {
        let mut built = Vec::new();
        while let Some((method, fixture)) = methods.get(next.fetch_add(1, Ordering::Relaxed)) {
            built.push(build_method(language, &tool, method, *fixture)?);
        }
        Ok(built)
    };
    on_threads(std::iter::repeat_n(&worker, BUILDS_AT_ONCE))
}

/// Runs each of `jobs` on a thread of its own; what they all built, or the
/// first failure.
fn on_threads<J>(jobs: impl IntoIterator<Item = J>) -> anyhow::Result<Vec<Built>>
where
    J: FnOnce() -> anyhow::Result<Vec<Built>> + Send,
{
    let built = std::thread::scope(|scope| {
        let threads: Vec<_> = jobs.into_iter().map(|job| scope.spawn(job)).collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("a polyglot build thread panicked"))
            .collect::<anyhow::Result<Vec<_>>>()
    })?;
    Ok(built.into_iter().flatten().collect())
}

/// One method's component built with `tool`, unless it is up to date.
fn build_method(
    language: Language,
    tool: &Path,
    method: &Path,
    fixture: bool,
) -> anyhow::Result<Built> {
    let work = work_dir();
    let name = method
        .file_name()
        .unwrap()
        .to_string_lossy()
        .replace('-', "_");
    let file = format!("{name}.wasm");
    let path = work.join("out").join(&file);
    let sources = work.join(language.dir()).join(&name);
    stage(language, method, &sources)?;
    let world = world(language, method)?;
    // Building takes seconds a component: one whose sources, WIT and
    // toolchain are what its last build had is not built again.
    let inputs = format!("{:016x}", fingerprint(&sources, tool)?);
    let recorded = work.join("out").join(format!("{name}.inputs"));
    if path.is_file() && std::fs::read_to_string(&recorded).is_ok_and(|r| r == inputs) {
        return Ok(Built {
            file,
            path,
            fixture,
        });
    }
    println!("building {file} ({})", language.dir());
    let mut command = Command::new(tool);
    match language {
        Language::Python => command
            .arg("-d")
            .arg(root().join("wit"))
            .args(["-w", &world, "componentize", "app", "-p"])
            .arg(&sources)
            .arg("-o")
            .arg(&path),
        // Nothing of WASI's HTTP: the host gives components no network.
        Language::JavaScript => command
            .arg(sources.join("app.js"))
            .arg("--wit")
            .arg(root().join("wit"))
            .args(["-n", &world, "-d", "http", "fetch-event", "-o"])
            .arg(&path),
    };
    run(&mut command).with_context(|| format!("cannot build {}", method.display()))?;
    std::fs::write(&recorded, inputs)?;
    Ok(Built {
        file,
        path,
        fixture,
    })
}

/// A hash of what a build reads: the staged sources (app, sdk, contract),
/// the WIT, and the toolchain as installed (its directory's copy of the
/// pins).
fn fingerprint(sources: &Path, tool: &Path) -> anyhow::Result<u64> {
    let mut files = Vec::new();
    for dir in [sources.to_path_buf(), root().join("wit")] {
        for entry in std::fs::read_dir(&dir)? {
            files.push(entry?.path());
        }
    }
    files.sort();
    let toolchain = tool
        .ancestors()
        .find(|dir| dir.join("installed-from").is_file());
    files.extend(toolchain.map(|dir| dir.join("installed-from")));
    let mut bytes = Vec::new();
    for file in files.iter().filter(|file| file.is_file()) {
        bytes.extend(file.to_string_lossy().as_bytes());
        bytes.extend(std::fs::read(file)?);
    }
    Ok(crate::installed::fnv1a(&bytes))
}

/// The method directories of a language (those holding an app), and its
/// test fixtures', each marked whether it is a fixture.
fn methods(language: Language) -> anyhow::Result<Vec<(PathBuf, bool)>> {
    let dir = root().join("strategies").join(language.dir());
    let mut methods = Vec::new();
    for (parent, fixture) in [(dir.clone(), false), (dir.join(FIXTURES), true)] {
        let Ok(entries) = std::fs::read_dir(&parent) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            if path.join(language.app()).is_file() {
                methods.push((path, fixture));
            }
        }
    }
    methods.sort();
    Ok(methods)
}

/// The world a method's first line names.
fn world(language: Language, method: &Path) -> anyhow::Result<String> {
    let app = method.join(language.app());
    let text = std::fs::read_to_string(&app)?;
    let first = text.lines().next().unwrap_or_default();
    let prefix = format!("{} world: ", language.comment());
    match first.strip_prefix(&prefix) {
        Some(world) if !world.trim().is_empty() => Ok(world.trim().to_string()),
        _ => bail!(
            "{} must start with `{prefix}<world>` (issuer, stream-issuer, ...)",
            app.display()
        ),
    }
}

/// Puts the method's app, the sdk and the contract in one directory.
fn stage(language: Language, method: &Path, sources: &Path) -> anyhow::Result<()> {
    std::fs::remove_dir_all(sources).ok();
    std::fs::create_dir_all(sources)?;
    let sdk = root().join("strategies").join(language.dir()).join("sdk");
    for dir in [method, sdk.as_path()] {
        for entry in std::fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_file() {
                std::fs::copy(&path, sources.join(path.file_name().unwrap()))?;
            }
        }
    }
    let (file, text) = match language {
        Language::Python => ("couponlab_contract.py", contract(&PYTHON)?),
        Language::JavaScript => ("couponlab_contract.js", contract(&JAVASCRIPT)?),
    };
    std::fs::write(sources.join(file), text)?;
    Ok(())
}

/// How one language writes the contract's names and texts.
struct Syntax {
    comment: &'static str,
    /// A function of a coupon id: name, prefix, suffix (each a JSON string).
    function: fn(&str, &str, &str) -> String,
    constant: fn(&str, &str) -> String,
}

const PYTHON: Syntax = Syntax {
    comment: "#",
    function: |name, prefix, suffix| {
        format!("def {name}(coupon_id):\n    return {prefix} + str(coupon_id) + {suffix}\n\n")
    },
    constant: |name, value| format!("{name} = {value}\n"),
};

const JAVASCRIPT: Syntax = Syntax {
    comment: "//",
    function: |name, prefix, suffix| {
        let name = camel(name);
        format!(
            "export function {name}(couponId) {{\n  return {prefix} + String(couponId) + {suffix};\n}}\n\n"
        )
    },
    constant: |name, value| format!("export const {name} = {value};\n"),
};

fn camel(snake: &str) -> String {
    let mut parts = snake.split('_');
    let first = parts.next().unwrap_or_default().to_string();
    parts.fold(first, |mut name, part| {
        let mut chars = part.chars();
        if let Some(c) = chars.next() {
            name.extend(c.to_uppercase());
            name.push_str(chars.as_str());
        }
        name
    })
}

/// The contract module of one language.
fn contract(syntax: &Syntax) -> anyhow::Result<String> {
    let json = |text: &str| serde_json::to_string(text).expect("a string serializes");
    let mut text = format!(
        "{} Written by `cargo xtask strategies` from the contract crate and lua/: do not edit.\n\n",
        syntax.comment
    );
    let sentinel = SENTINEL.to_string();
    let functions = [
        ("total", keys::total(SENTINEL)),
        ("issued", keys::issued(SENTINEL)),
        ("count", keys::count(SENTINEL)),
        ("lock", keys::lock(SENTINEL)),
        ("issue_stream", ISSUE_STREAM.key(SENTINEL)),
    ];
    for (name, sample) in functions {
        let (prefix, suffix) = sample
            .split_once(&sentinel)
            .with_context(|| format!("the contract's {name} does not hold its coupon id"))?;
        text.push_str(&(syntax.function)(name, &json(prefix), &json(suffix)));
    }
    for (name, value) in [
        ("FIELD_MEMBER_ID", fields::MEMBER_ID),
        ("FIELD_COUPON_ID", fields::COUPON_ID),
    ] {
        text.push_str(&(syntax.constant)(name, &json(value)));
    }
    for (name, file) in [
        ("RESERVE_LUA", "reserve.lua"),
        ("RESERVE_AND_ENQUEUE_LUA", "reserve_and_enqueue.lua"),
    ] {
        let path = root().join("lua").join(file);
        let script = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        text.push_str(&(syntax.constant)(name, &json(&script)));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contract_is_written_in_each_language_from_the_crate() {
        let python = contract(&PYTHON).unwrap();
        assert!(
            python.contains(
                "def issued(coupon_id):\n    return \"coupon:issued:{\" + str(coupon_id) + \"}\""
            ),
            "{python}"
        );
        assert!(
            python.contains("FIELD_MEMBER_ID = \"memberId\""),
            "{python}"
        );
        let js = contract(&JAVASCRIPT).unwrap();
        assert!(
            js.contains("export function issueStream(couponId) {\n  return \"coupon:issue:stream:{\" + String(couponId) + \"}\";"),
            "{js}"
        );
        assert!(js.contains("export const RESERVE_LUA = \"--"), "{js}");
    }
}
