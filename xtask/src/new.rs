//! `cargo xtask new NAME --lang rust|python|js [--world issuer|stream-issuer] [--into DIR]`:
//! a strategy that builds, installs and serves at once — the Lua
//! reservation and the shared confirm step (or, in the stream world, the
//! reservation with its stream entry and the consumer's confirm) — to
//! change into one's own method. Its method is NAME in capitals; it claims
//! what the template keeps (total, member, acked), so the canary proves it
//! before it serves and `cargo xtask strategies --check` proves it on
//! demand: that is its first test. A Rust one is built as every crate of
//! `strategies/` is (`strategies/.cargo/config.toml`): a component whose
//! only imports are the lab's WIT. `--into DIR` writes it into the
//! checkout at DIR instead of this one (the tests build one there).

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

use crate::root;

const USAGE: &str =
    "usage: cargo xtask new NAME --lang rust|python|js [--world issuer|stream-issuer] [--into DIR]";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lang {
    Rust,
    Python,
    Js,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum World {
    Issuer,
    StreamIssuer,
}

pub fn main(args: &[String]) -> anyhow::Result<()> {
    let (name, lang, world, into) = parse(args)?;
    let written = scaffold(&into.unwrap_or_else(root), &name, lang, world)?;
    for file in &written {
        println!("wrote {}", file.display());
    }
    println!(
        "method {}: `cargo xtask strategies` builds and installs it, a running server loads it once its canary passes",
        method(&name)
    );
    Ok(())
}

/// The name, language, world and, with `--into`, the checkout to write into.
type Parsed = (String, Lang, World, Option<PathBuf>);

fn parse(args: &[String]) -> anyhow::Result<Parsed> {
    let (mut lang, mut world, mut into) = (None, World::Issuer, None);
    let mut name = None;
    let mut args = args.iter().map(String::as_str);
    while let Some(arg) = args.next() {
        let mut value = || {
            args.next()
                .with_context(|| format!("{arg} needs a value; {USAGE}"))
        };
        match arg {
            "--help" | "-h" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            "--lang" => {
                lang = Some(match value()? {
                    "rust" => Lang::Rust,
                    "python" => Lang::Python,
                    "js" => Lang::Js,
                    other => bail!("--lang {other}: rust, python or js\n{USAGE}"),
                })
            }
            "--world" => {
                world = match value()? {
                    "issuer" => World::Issuer,
                    "stream-issuer" => World::StreamIssuer,
                    other => bail!(
                        "--world {other}: the scaffold writes issuer and stream-issuer strategies; \
                         for another world start from the Rust method of that world under strategies/\n{USAGE}"
                    ),
                }
            }
            "--into" => into = Some(PathBuf::from(value()?)),
            other if !other.starts_with('-') && name.is_none() => name = Some(other.to_string()),
            other => bail!("unexpected {other}\n{USAGE}"),
        }
    }
    let Some(name) = name else { bail!(USAGE) };
    let Some(lang) = lang else {
        bail!("--lang is needed\n{USAGE}")
    };
    let valid = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid || name.len() > 40 {
        bail!("NAME is lower-case letters, digits and `-`, starting with a letter: {name:?}");
    }
    Ok((name, lang, world, into))
}

fn method(name: &str) -> String {
    name.to_ascii_uppercase().replace('-', "_")
}

/// Writes the strategy under `root`; the files written. A directory that
/// exists already is left alone.
fn scaffold(root: &Path, name: &str, lang: Lang, world: World) -> anyhow::Result<Vec<PathBuf>> {
    let strategies = root.join("strategies");
    let dir = match lang {
        Lang::Rust => strategies.join(name),
        Lang::Python => strategies.join("python").join(name),
        Lang::Js => strategies.join("js").join(name),
    };
    if dir.exists() {
        bail!("{} exists already: choose another NAME", dir.display());
    }
    let method = method(name);
    let files: Vec<(PathBuf, String)> = match lang {
        Lang::Rust => vec![
            (dir.join("Cargo.toml"), rust_manifest(name)),
            (dir.join("src").join("lib.rs"), rust_lib(&method, world)),
        ],
        Lang::Python => vec![(dir.join("app.py"), python_app(&method, world))],
        Lang::Js => vec![(dir.join("app.js"), js_app(&method, world))],
    };
    for (path, text) in &files {
        std::fs::create_dir_all(path.parent().expect("a file in a directory"))?;
        std::fs::write(path, text)?;
    }
    let mut written: Vec<PathBuf> = files.into_iter().map(|(path, _)| path).collect();
    if lang == Lang::Rust {
        let manifest = strategies.join("Cargo.toml");
        let text = std::fs::read_to_string(&manifest)?;
        let Some(at) = text.find("    \"testing/*\",") else {
            bail!(
                "{} has no `\"testing/*\",` member to add {name} before",
                manifest.display()
            );
        };
        let text = format!("{}    \"{name}\",\n{}", &text[..at], &text[at..]);
        std::fs::write(&manifest, text)?;
        written.push(manifest);
    }
    Ok(written)
}

fn rust_manifest(name: &str) -> String {
    format!(
        r#"[package]
name = "{name}"
version = "0.1.0"
edition.workspace = true
rust-version.workspace = true
license.workspace = true
publish.workspace = true

[lib]
crate-type = ["cdylib"]

[dependencies]
couponlab-sdk.workspace = true

[lints]
workspace = true
"#
    )
}

fn rust_lib(method: &str, world: World) -> String {
    match world {
        World::Issuer => format!(
            r#"//! {method}: one Lua script reserves in Redis, atomically (the member has
//! none, stock is left), then the shared confirm step writes the issue in
//! the database and removes the reservation if that fails. Change it into
//! your method.

use couponlab_sdk::{{IssueResult, Step, compensate, confirm, reserve, settle}};

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {{
    reserve::with_lua(coupon_id, member_id)?;
    Ok(confirm::confirm_or_release(coupon_id, member_id))
}}

couponlab_sdk::strategy! {{
    struct Strategy {{ method: "{method}", claims: [Total, Member, Acked], summary: "a Lua reservation, then the DB confirm step", reservation_set: true }}
    fn issue(request) {{ settle(issue(request.coupon_id, request.member_id)) }}
    fn compensate(request) {{ compensate::release_unless_issued(request.coupon_id, request.member_id) }}
}}
"#
        ),
        World::StreamIssuer => format!(
            r#"//! {method}: one Lua script reserves and adds the request to the coupon's
//! stream together, answered 202; the host's stream consumers hand each
//! entry to this component, which confirms it. Change it into your method.

use couponlab_sdk::{{IssueResult, Outcome, Step, compensate, keys, reserve, settle}};

couponlab_sdk::world!("stream-issuer");

use exports::couponlab::strategy::{{strategy, stream_consumer}};

couponlab_sdk::stream_consumer!(Strategy: stream_consumer::Guest);

const METHOD: &str = "{method}";

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {{
    reserve::and_enqueue(coupon_id, member_id, keys::issue_stream, METHOD)?;
    Ok(IssueResult::of(Outcome::Accepted))
}}

couponlab_sdk::strategy! {{
    struct Strategy: strategy::Guest {{ method: METHOD, claims: [Total, Member, Acked], summary: "a Lua reservation with its stream entry, 202; consumers confirm", reservation_set: true }}
    fn issue(request) {{ settle(issue(request.coupon_id, request.member_id)) }}
    fn compensate(_request) {{ compensate::carried_by_entry() }}
}}
"#
        ),
    }
}

fn python_app(method: &str, world: World) -> String {
    let (world_name, imports, issue, compensate, consumer) = match world {
        World::Issuer => (
            "issuer",
            "",
            "lab.reserve_with_lua(coupon_id, member_id)\n    return lab.confirm_or_release(coupon_id, member_id)",
            "lab.release_unless_issued(request.coupon_id, request.member_id)",
            "",
        ),
        World::StreamIssuer => (
            "stream-issuer",
            "from wit_world.imports import clock\n",
            "lab.reserve_and_enqueue(coupon_id, member_id, METHOD, clock.now_millis())\n    return lab.result(lab.Outcome.ACCEPTED)",
            "lab.carried_by_entry()",
            "\n\nclass StreamConsumer(exports.StreamConsumer):\n    def handle_entry(self, entry):\n        return lab.handle_entry(entry)\n\n    def dead_letter(self, entry):\n        return lab.dead_letter(entry)\n",
        ),
    };
    format!(
        r#"# world: {world_name}
"""{method}: a Lua reservation in Redis, then the database. Change it into
your method; `couponlab` is the sdk (strategies/python/sdk)."""

from wit_world import exports
{imports}
import couponlab as lab

METHOD = "{method}"


def issue(coupon_id, member_id):
    {issue}


class Strategy(exports.Strategy):
    def describe(self):
        return lab.descriptor(
            METHOD, ["total", "member", "acked"], "a Lua reservation, then the database",
            reservation_set=True,
        )

    def issue(self, request):
        return lab.settle(issue, request.coupon_id, request.member_id)

    def compensate(self, request):
        return {compensate}
{consumer}"#
    )
}

fn js_app(method: &str, world: World) -> String {
    let (world_name, imports, issue, compensate, consumer) = match world {
        World::Issuer => (
            "issuer",
            "",
            "lab.reserveWithLua(couponId, memberId);\n      return lab.confirmOrRelease(couponId, memberId);",
            "return lab.releaseUnlessIssued(couponId, memberId);",
            "",
        ),
        World::StreamIssuer => (
            "stream-issuer",
            "import { nowMillis } from 'couponlab:strategy/clock@0.2.0';\n",
            "lab.reserveAndEnqueue(couponId, memberId, METHOD, nowMillis());\n      return lab.result('accepted');",
            "return lab.carriedByEntry();",
            "\nexport const streamConsumer = {\n  handleEntry: lab.handleEntry,\n  deadLetter: lab.deadLetter,\n};\n",
        ),
    };
    format!(
        r#"// world: {world_name}
// {method}: a Lua reservation in Redis, then the database. Change it into
// your method; `couponlab.js` is the sdk (strategies/js/sdk).

{imports}import * as lab from './couponlab.js';

const METHOD = '{method}';

export const strategy = {{
  describe() {{
    return lab.descriptor(METHOD, ['total', 'member', 'acked'], 'a Lua reservation, then the database', {{
      reservationSet: true,
    }});
  }},
  issue({{ couponId, memberId }}) {{
    return lab.settle(() => {{
      {issue}
    }});
  }},
  compensate({{ couponId, memberId }}) {{
    {compensate}
  }},
}};
{consumer}"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_name_a_language_and_a_world_are_read_and_checked() {
        let (name, lang, world, into) = parse(&args(&["demo-one", "--lang", "python"])).unwrap();
        assert_eq!(
            (name.as_str(), lang, world, into),
            ("demo-one", Lang::Python, World::Issuer, None)
        );
        let (.., into) = parse(&args(&["demo", "--lang", "rust", "--into", "/elsewhere"])).unwrap();
        assert_eq!(into, Some(PathBuf::from("/elsewhere")));
        assert_eq!(method(&name), "DEMO_ONE");
        assert!(parse(&args(&["Demo", "--lang", "js"])).is_err());
        assert!(parse(&args(&["demo", "--lang", "go"])).is_err());
        assert!(parse(&args(&["demo"])).is_err());
        let gate = parse(&args(&["demo", "--lang", "rust", "--world", "gate-issuer"]));
        assert!(
            gate.unwrap_err()
                .to_string()
                .contains("issuer and stream-issuer")
        );
    }

    #[test]
    fn each_language_is_written_once_and_a_rust_crate_joins_the_workspace() {
        let root = std::env::temp_dir().join(format!("couponlab-new-{}", std::process::id()));
        std::fs::remove_dir_all(&root).ok();
        std::fs::create_dir_all(root.join("strategies")).unwrap();
        std::fs::write(
            root.join("strategies/Cargo.toml"),
            "members = [\n    \"sdk\",\n    \"testing/*\",\n]\n",
        )
        .unwrap();
        for (lang, world) in [
            (Lang::Rust, World::Issuer),
            (Lang::Python, World::StreamIssuer),
            (Lang::Js, World::StreamIssuer),
        ] {
            scaffold(&root, "demo", lang, world).unwrap();
        }
        let manifest = std::fs::read_to_string(root.join("strategies/Cargo.toml")).unwrap();
        assert!(
            manifest.contains("\"demo\",\n    \"testing/*\""),
            "{manifest}"
        );
        let python = std::fs::read_to_string(root.join("strategies/python/demo/app.py")).unwrap();
        assert!(python.starts_with("# world: stream-issuer\n"));
        assert!(python.contains("METHOD = \"DEMO\"") && python.contains("class StreamConsumer"));
        let js = std::fs::read_to_string(root.join("strategies/js/demo/app.js")).unwrap();
        assert!(js.contains("export const streamConsumer"), "{js}");
        let again = scaffold(&root, "demo", Lang::Python, World::Issuer);
        assert!(again.unwrap_err().to_string().contains("exists already"));
        std::fs::remove_dir_all(&root).ok();
    }
}
