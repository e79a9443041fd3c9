//! The crate's floors, kept: every module imports only from the floors
//! below its own (`docs/architecture.md`, *Layers*). A module that takes
//! from one above it, or from one on its own floor, fails the test and
//! names the file and the line; a new module fails it until it is given a
//! floor here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules by floor, lowest first; `lib` is `lib.rs`. Each
/// inner list is one floor: modules on it import none of each other.
const FLOORS: &[&[&str]] = &[
    // Leaves.
    &[
        "budget",
        "metrics",
        "telemetry",
        "redis_target",
        "db_target",
        "recently",
        "optional_fields",
    ],
    &["runtime"],
    // The lab's state, each above the one before.
    &["outcome"],
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

/// The floor of `module`, if it has one.
fn floor(module: &str) -> Option<usize> {
    FLOORS.iter().position(|floor| floor.contains(&module))
}

/// The top-level module a source file belongs to.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).expect("a file under src");
    let first = relative
        .components()
        .next()
        .expect("a path")
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// The top-level modules named after `crate::` in one line of code: a
/// path (`crate::lab::Lab`) or a group (`crate::{lab::Lab, db}`).
fn modules_named(line: &str) -> Vec<String> {
    let mut named = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            // Each item of the group at its own depth: `a::B`, `c`, `d::{E}`.
            let mut depth = 1;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    break;
                }
                if depth == 1 && c == ',' {
                    items.push(std::mem::take(&mut item));
                } else {
                    item.push(c);
                }
            }
            items.push(item);
            named.extend(items.iter().map(|item| leading_word(item.trim())));
        } else {
            named.push(leading_word(rest));
        }
    }
    named.retain(|word| !word.is_empty());
    named
}

fn leading_word(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a readable directory") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}

#[test]
fn every_module_imports_only_from_the_floors_below_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let mut wrong = Vec::new();
    let mut unplaced = BTreeSet::new();
    let mut graph: BTreeMap<(usize, String), BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let module = module_of(&src, file);
        // The binaries use the crate as any other user does; this test
        // names modules in its own examples.
        if matches!(module.as_str(), "main" | "bin" | "layers") {
            continue;
        }
        let Some(own) = floor(&module) else {
            unplaced.insert(module);
            continue;
        };
        let text = std::fs::read_to_string(file).expect("a readable file");
        for (number, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("//") {
                continue;
            }
            for named in modules_named(line) {
                if named == module {
                    continue;
                }
                graph
                    .entry((own, module.clone()))
                    .or_default()
                    .insert(named.clone());
                match floor(&named) {
                    Some(theirs) if theirs < own => {}
                    _ => wrong.push(format!(
                        "{}:{}: {module} takes from {named}",
                        file.strip_prefix(&src).unwrap().display(),
                        number + 1
                    )),
                }
            }
        }
    }
    // The graph, top floor first: `-- --nocapture` shows it.
    for ((own, module), imports) in graph.iter().rev() {
        let imports: Vec<&str> = imports.iter().map(String::as_str).collect();
        println!("floor {own:>2} {module:<14} -> {}", imports.join(", "));
    }
    assert!(
        unplaced.is_empty(),
        "modules without a floor in layers.rs: {unplaced:?}"
    );
    assert!(
        wrong.is_empty(),
        "imports that do not point down:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn an_import_is_read_as_a_path_or_a_group() {
    assert_eq!(modules_named("use crate::lab::Lab;"), ["lab"]);
    assert_eq!(
        modules_named("use crate::{lab::Lab, db, runtime::{A, B}};"),
        ["lab", "db", "runtime"]
    );
    assert_eq!(
        modules_named("#[schema(schema_with = crate::optional_fields::optional_fields::<T>)]"),
        ["optional_fields"]
    );
    assert!(modules_named("use super::envelope::Answer;").is_empty());
}
