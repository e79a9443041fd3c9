//! The strategy directory's record of what `cargo xtask strategies`
//! installed (a file name and a hash a line), each component installed so
//! that a watching server never reads half a file, and the files an earlier
//! run installed whose crate is gone: removed when still exactly what the
//! task wrote, named in a note otherwise.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::Context;

/// The strategy directory's record of what this task installed: one line per
/// file, `<hash> <file name>` (the server only loads `*.wasm`).
pub const RECORD: &str = ".xtask-installed";

/// Records that `installed` (file → hash) is what the strategy directory
/// `dir` holds from this task now, removing what it installed before and
/// no crate builds any more.
pub fn record(dir: &Path, installed: &BTreeMap<String, u64>) -> anyhow::Result<()> {
    let recorded = read_record(dir)?;
    let stale = stale(dir, &recorded, installed)?;
    for file in &stale.removed {
        let path = dir.join(file);
        std::fs::remove_file(&path).with_context(|| format!("cannot remove {}", path.display()))?;
        println!("removed {file}: installed earlier, its crate is no longer in the workspace");
    }
    write_record(dir, installed)?;
    for file in &stale.kept {
        println!(
            "note: left {file} in place: no crate of the workspace builds it, and this task has no record of installing it as it is"
        );
    }
    Ok(())
}

/// Copies `from` next to `to` under a temporary name, then renames it into
/// place: a watching server sees either the old file or the whole new one.
/// An unchanged file is left alone. Returns the hash of what `to` holds.
pub fn install(from: &Path, to: &Path) -> anyhow::Result<u64> {
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

/// What the record says this task installed in `dir`: file → hash.
pub fn read_record(dir: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
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
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
            std::env::temp_dir().join(format!("xtask-installed-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
