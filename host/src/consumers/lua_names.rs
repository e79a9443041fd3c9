//! The Lua scripts in `lua/` write the stream entries and keys the consumers
//! read, but cannot import the contract crate: their names are checked
//! against it here, so a rename on either side fails a test instead of
//! leaving a consumer reading fields nobody writes.

use std::path::PathBuf;

use couponlab_contract::{ISSUE_STREAM, REQUESTS_CHANNEL, WRITE_BEHIND_STREAM, fields, keys};

/// How the scripts' comments write a coupon's hash tag.
const COUPON_TAG: &str = "{couponId}";

/// A coupon id no test uses, to build the contract's names with and then
/// write its tag as the comments do.
const SOME_COUPON: u64 = 987_654_321;

/// A contract name of [`SOME_COUPON`] as a script's comment writes it.
fn as_commented(name: String) -> String {
    name.replace(&keys::tag(SOME_COUPON), COUPON_TAG)
}

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
    let contract: Vec<String> = [
        ISSUE_STREAM.key(SOME_COUPON),
        ISSUE_STREAM.dead_letters(SOME_COUPON),
        WRITE_BEHIND_STREAM.key(SOME_COUPON),
        WRITE_BEHIND_STREAM.dead_letters(SOME_COUPON),
        keys::issued(SOME_COUPON),
        keys::total(SOME_COUPON),
        keys::gate_remaining(SOME_COUPON),
        keys::lock(SOME_COUPON),
        keys::lock_channel(SOME_COUPON),
        keys::count(SOME_COUPON),
    ]
    .into_iter()
    .map(as_commented)
    .chain([REQUESTS_CHANNEL.to_string()])
    .collect();
    // The drop gate's other keys are its component's own, under the
    // contract's prefix of them.
    let gate_keys = as_commented(keys::gate(SOME_COUPON));
    assert!(gate_keys.contains(COUPON_TAG), "{gate_keys}");
    for (file, script) in scripts() {
        for name in names(&script) {
            assert!(
                contract.iter().any(|known| known == name) || name.starts_with(&gate_keys),
                "{file} names {name}, which is not a name of the contract: {contract:?} or {gate_keys}*"
            );
        }
    }
}

/// On a Redis Cluster a script's keys must be in one slot: every key a
/// script is given has the coupon's hash tag (its first `{...}`).
#[test]
fn every_key_a_script_is_given_has_the_coupons_hash_tag() {
    let mut documented = 0;
    for (file, script) in scripts() {
        let mut lines = script.lines().peekable();
        while let Some(line) = lines.next() {
            if !line.trim_start().starts_with("-- KEYS[") {
                continue;
            }
            // A key's comment may go on over indented lines.
            let mut comment = line.to_string();
            while let Some(more) = lines.next_if(|l| l.starts_with("--   ")) {
                comment.push_str(more);
            }
            let names = names(&comment);
            assert!(!names.is_empty(), "{file}: {line} names no key");
            for name in names {
                let tag = name.find('{').and_then(|start| {
                    name[start..]
                        .find('}')
                        .map(|end| &name[start..=start + end])
                });
                assert_eq!(
                    tag,
                    Some(COUPON_TAG),
                    "{file}: {name} has no {COUPON_TAG} hash tag"
                );
                documented += 1;
            }
        }
    }
    assert!(documented > 0, "no script documents its KEYS");
}
