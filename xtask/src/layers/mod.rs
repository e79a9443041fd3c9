//! The crates' layering, kept (`docs/architecture.md`, *Layers*). In the
//! host every top-level module stands on a floor and imports only from the
//! floors below its own; in the host, the load runner and the sdk no
//! modules (files) take from each other in a circle. What a module takes is read with a parser
//! ([`reader`]). A failure names the file and the line; `cargo test -p
//! xtask layers -- --nocapture` prints each crate's module graph.

mod reader;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use self::reader::{Module, Taken};

/// The host's top-level modules by floor, lowest first; `lib` is `lib.rs`.
/// Each inner list is one floor: modules on it import none of each other.
const HOST_FLOORS: &[&[&str]] = &[
    // Leaves.
    &[
        "budget",
        "metrics",
        "telemetry",
        "redis_target",
        "db_target",
        "recently",
        "credentials",
        "outcome",
    ],
    &["runtime"],
    // The lab's state, each above the one before.
    &["traces"],
    &["config"],
    &["db"],
    &["recorder"],
    &["confirmations"],
    &["settlements"],
    &["redis_claim"],
    &["lab"],
    // The roles, each above the one before.
    &["announcements"],
    &["snapshots"],
    &["issuing"],
    &["consumers"],
    &["canary"],
    &["results"],
    &["http"],
    &["lib"],
];

/// Circles the load runner still has, each by its modules: they fail the
/// check once broken, so the list only shrinks.
const LOADTEST_CIRCLES: &[&[&str]] = &[];

/// The crate whose sources are under `src` (from the repository's root):
/// every file's module and what it takes from the others. `skipped`: the
/// top-level files and folders read as users of the crate (binaries).
fn read(src: &str, skipped: &[&str]) -> (PathBuf, Vec<Taken>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let src = root.join(src);
    let files: Vec<(PathBuf, Module)> = reader::files(&src)
        .into_iter()
        .filter(|(file, _)| {
            let first = file.strip_prefix(&src).unwrap().components().next();
            let first = first.unwrap().as_os_str().to_string_lossy();
            !skipped.contains(&first.trim_end_matches(".rs"))
        })
        .collect();
    let known: BTreeSet<Module> = files.iter().map(|(_, module)| module.clone()).collect();
    let mut taken = Vec::new();
    for (file, module) in &files {
        let source = std::fs::read_to_string(file).expect("a readable file");
        let read = reader::taken(file, module, &source, &known)
            .unwrap_or_else(|err| panic!("{}: {err}", file.display()));
        taken.extend(read);
    }
    (src, taken)
}

fn named(module: &[String]) -> String {
    if module.is_empty() {
        "(root)".into()
    } else {
        module.join("::")
    }
}

/// The top-level module of `module`, `lib` for the root.
fn top_level(module: &[String]) -> &str {
    module.first().map_or("lib", String::as_str)
}

fn floor(module: &str) -> Option<usize> {
    HOST_FLOORS.iter().position(|floor| floor.contains(&module))
}

fn at(src: &Path, taken: &Taken) -> String {
    let file = taken.file.strip_prefix(src).unwrap_or(&taken.file);
    format!("{}:{}", file.display(), taken.line)
}

/// Module → the modules it takes from, printed top down.
fn graph(taken: &[Taken], of: impl Fn(&[String]) -> String) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for taken in taken {
        let (from, to) = (of(&taken.from), of(&taken.to));
        if from != to {
            graph.entry(from).or_default().insert(to);
        }
    }
    for (module, takes) in &graph {
        let takes: Vec<&str> = takes.iter().map(String::as_str).collect();
        println!("{module:<24} -> {}", takes.join(", "));
    }
    graph
}

/// The circles of `graph`: each the modules that reach each other, two or
/// more, sorted.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> BTreeSet<Vec<String>> {
    let reach = |start: &String| {
        let mut seen = BTreeSet::new();
        let mut next = vec![start.clone()];
        while let Some(module) = next.pop() {
            for to in graph.get(&module).into_iter().flatten() {
                if seen.insert(to.clone()) {
                    next.push(to.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|module| (module, reach(module))).collect();
    reached
        .iter()
        .filter(|(module, reach)| reach.contains(**module))
        .map(|(module, reach)| {
            let mut circle: Vec<String> = reach
                .iter()
                .filter(|other| {
                    reached
                        .get(other)
                        .is_some_and(|back| back.contains(*module))
                })
                .cloned()
                .collect();
            circle.sort();
            circle
        })
        .collect()
}

/// Fails on every circle of the crate under `src` that is not `known`, and
/// on a known one that is gone.
fn no_circles(src: &str, skipped: &[&str], known: &[&[&str]]) {
    let (src_dir, taken) = read(src, skipped);
    let graph = graph(&taken, named);
    let found = circles(&graph);
    let known: BTreeSet<Vec<String>> = known
        .iter()
        .map(|circle| circle.iter().map(|m| m.to_string()).collect())
        .collect();
    let new: Vec<String> = found
        .difference(&known)
        .map(|circle| {
            let edges: Vec<String> = taken
                .iter()
                .filter(|t| circle.contains(&named(&t.from)) && circle.contains(&named(&t.to)))
                .map(|t| {
                    format!(
                        "  {}: {} takes from {}",
                        at(&src_dir, t),
                        named(&t.from),
                        named(&t.to)
                    )
                })
                .collect();
            format!("{}:\n{}", circle.join(" <-> "), edges.join("\n"))
        })
        .collect();
    assert!(
        new.is_empty(),
        "modules of {src} in a circle:\n{}",
        new.join("\n")
    );
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        gone.is_empty(),
        "circles of {src} no longer there (take them off the list): {gone:?}"
    );
}

#[test]
fn every_host_module_imports_only_from_the_floors_below_its_own() {
    // The binaries use the crate as any other user does.
    let (src, taken) = read("host/src", &["main", "bin"]);
    graph(&taken, |module| top_level(module).to_string());
    let mut unplaced = BTreeSet::new();
    let mut wrong = Vec::new();
    for taken in &taken {
        let (from, to) = (top_level(&taken.from), top_level(&taken.to));
        let Some(own) = floor(from) else {
            unplaced.insert(from.to_string());
            continue;
        };
        match floor(to) {
            _ if from == to => {}
            Some(theirs) if theirs < own => {}
            _ => wrong.push(format!("{}: {from} takes from {to}", at(&src, taken))),
        }
    }
    assert!(
        unplaced.is_empty(),
        "host modules without a floor: {unplaced:?}"
    );
    assert!(
        wrong.is_empty(),
        "imports that do not point down:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_host_has_no_circle_between_its_files() {
    // Inside a floor too: the runtime's last circles (the bindings with
    // the capabilities their resources live in; the engine with the loaded
    // component) were broken by defining each type where nothing it takes
    // takes from it.
    no_circles("host/src", &["main", "bin"], &[]);
}

#[test]
fn the_load_runner_has_no_circle() {
    no_circles("loadtest/src", &[], LOADTEST_CIRCLES);
}

#[test]
fn the_sdk_has_no_circle() {
    no_circles("strategies/sdk/src", &[], &[]);
}

#[test]
fn a_module_is_read_from_uses_paths_and_macros() {
    let known: BTreeSet<Module> = [
        vec![],
        vec!["a".into()],
        vec!["a".into(), "b".into()],
        vec!["c".into()],
        vec!["d".into()],
    ]
    .into_iter()
    .collect();
    let source = r#"
        use crate::{c::Thing, a::b::{self, Other}};
        use super::d::*;
        // use crate::nothing;
        fn f() -> crate::d::Type { log!("crate::not_a_path {}", crate::c::value()); b::g() }
        #[schema(with = crate::c::schema)]
        struct S;
        mod tests { use super::super::a; }
    "#;
    let module: Module = vec!["a".into()];
    let taken = reader::taken(Path::new("a.rs"), &module, source, &known).unwrap();
    let named: Vec<(String, usize)> = taken.iter().map(|t| (named(&t.to), t.line)).collect();
    assert_eq!(
        named,
        [
            ("c".into(), 2),
            ("d".into(), 3),
            ("d".into(), 5),
            ("c".into(), 5),
            ("c".into(), 6),
        ]
    );
}
