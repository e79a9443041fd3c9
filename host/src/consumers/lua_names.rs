//! The Lua scripts in `lua/` write the stream entries and keys the consumers
//! read, but cannot import the contract crate: their names are checked
//! against it here, so a rename on either side fails a test instead of
//! leaving a consumer reading fields nobody writes.

use std::path::PathBuf;

use couponlab_contract::{ISSUE_STREAM, REQUESTS_CHANNEL, WRITE_BEHIND_STREAM, fields, keys};

/// The drop gate's keys: built by its component and its scripts alone, so
/// the contract does not hold them.
const GATE_KEYS: &str = "coupon:gate:{couponId}:";

/// Every script, by file name.
fn scripts() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../lua");
    let mut scripts: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|err| panic!("cannot read {}: {err}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "lua"))
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&path).unwrap())
        })
        .collect();
    scripts.sort();
    assert!(!scripts.is_empty(), "no scripts in {}", dir.display());
    scripts
}

/// The quoted literals of one line of Lua, in order.
fn literals(line: &str) -> Vec<&str> {
    line.split('\'').skip(1).step_by(2).collect()
}

/// Every Redis name under `coupon:` a script mentions (its `KEYS` lines
/// document what it is given).
fn names(script: &str) -> Vec<&str> {
    let is_name_char = |c: char| c.is_ascii_alphanumeric() || ":{}_-".contains(c);
    script
        .match_indices("coupon:")
        .map(|(start, _)| {
            let rest = &script[start..];
            let end = rest.find(|c| !is_name_char(c)).unwrap_or(rest.len());
            &rest[..end]
        })
        .collect()
}

#[test]
fn every_stream_entry_a_script_writes_has_the_contract_fields() {
    let mut xadds = 0;
    for (file, script) in scripts() {
        for line in script.lines().filter(|line| line.contains("'XADD'")) {
            // redis.call('XADD', KEYS[n], '*', field, value, ...): the
            // field names are the literals after the id.
            let literals = literals(line);
            let id = literals.iter().position(|l| *l == "*");
            let written = id.map_or(&[][..], |id| &literals[id + 1..]);
            assert_eq!(written, fields::ENTRY, "{file}: {line}");
            xadds += 1;
        }
    }
    assert!(xadds > 0, "no script writes a stream entry");
}

#[test]
fn every_name_a_script_uses_is_the_contracts() {
    let contract = [
        ISSUE_STREAM.name.to_string(),
        WRITE_BEHIND_STREAM.name.to_string(),
        REQUESTS_CHANNEL.to_string(),
        format!("{}{{couponId}}", keys::ISSUED_PREFIX),
        format!("{}{{couponId}}", keys::TOTAL_PREFIX),
    ];
    for (file, script) in scripts() {
        for name in names(&script) {
            assert!(
                contract.iter().any(|known| known == name) || name.starts_with(GATE_KEYS),
                "{file} names {name}, which is not a name of the contract: {contract:?}"
            );
        }
    }
}
