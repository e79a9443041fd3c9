//! `cargo xtask api-check`: the `/lab` API as a tool nobody here wrote sees
//! it. Schemathesis (pinned from PyPI, its dependencies too, in a virtual
//! environment under the target directory) reads `GET /lab/openapi.json` of a served lab and sends
//! what the document allows and what it rules out, in all its phases
//! (examples, coverage, fuzzing, stateful sequences), with a fixed seed: a
//! 5xx, an answer the document does not describe, a request the document
//! allows and the server refuses (or the reverse) fails the run.
//!
//! ```text
//! cargo xtask api-check [--max-examples 30] [--seed 1] [--out DIR]
//! ```
//!
//! The lab it checks has members, a coupon and a report run, so that every
//! operation can be reached with data that exists, the report files
//! included. The reports (JUnit, and every request as a HAR cassette) go
//! under `--out` (default `target/artifacts/schemathesis`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};
use serde_json::json;

use crate::flags::Flags;
use crate::loadtest::http::Api;
use crate::loadtest::server::{Serve, Server};
use crate::{root, run, services, target_dir};

/// The Schemathesis release the check is pinned to (with its dependencies,
/// in `xtask/api-check/requirements.txt`).
const SCHEMATHESIS: &str = "4.32.5";
const USAGE: &str = "usage: cargo xtask api-check [--max-examples 30] [--seed 1] [--out DIR]";
/// The report run the check's lab holds, and one of its files.
const REPORT_RUN: &str = "2026-01-01T00-00-00Z-compare";
const REPORT_FILE: &str = "report.md";

pub struct Options {
    pub max_examples: u32,
    pub seed: u64,
    pub out: PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_examples: 30,
            seed: 1,
            out: target_dir().join("artifacts").join("schemathesis"),
        }
    }
}

impl Options {
    fn parse(args: &[String]) -> anyhow::Result<Options> {
        let mut options = Options::default();
        let mut flags = Flags::new(args, USAGE);
        while let Some(flag) = flags.next_flag() {
            match flag {
                "--max-examples" => options.max_examples = flags.parsed(flag, "a count")?,
                "--seed" => options.seed = flags.parsed(flag, "an integer")?,
                "--out" => options.out = PathBuf::from(flags.value(flag)?),
                other => return Err(flags.unknown(other)),
            }
        }
        Ok(options)
    }
}

pub fn main(args: &[String]) -> anyhow::Result<()> {
    check(&Options::parse(args)?, true)
}

/// Serves a lab with data to find and runs Schemathesis against it; fails
/// on any failure it reports. `build`: build the server first (the test
/// command has built it already).
pub fn check(options: &Options, build: bool) -> anyhow::Result<()> {
    let schemathesis = ensure_schemathesis()?;
    let reports = target_dir().join("api-check-reports");
    std::fs::remove_dir_all(&reports).ok();
    let run_dir = reports.join(REPORT_RUN);
    std::fs::create_dir_all(&run_dir)?;
    std::fs::write(run_dir.join(REPORT_FILE), "# a report for the API check\n")?;
    let reports_env = reports.to_string_lossy().into_owned();
    let env = [("COUPONLAB_REPORTS_DIR", reports_env.as_str())];
    let server = Server::start_with(Serve {
        build,
        env: &env,
        ..Serve::default()
    })?;
    let api = Api::new(&server.base_url())?;
    api.post("/lab/members", &json!({ "count": 20 }))?;
    api.post(
        "/lab/coupons",
        &json!({ "name": "api check", "totalCount": 10 }),
    )?;

    std::fs::remove_dir_all(&options.out).ok();
    std::fs::create_dir_all(&options.out)?;
    let out = options.out.canonicalize()?;
    let config = out.join("schemathesis.toml");
    std::fs::write(&config, config_text())?;
    println!(
        "Schemathesis {SCHEMATHESIS} against {}/lab/openapi.json (seed {}, {} examples an operation)",
        server.base_url(),
        options.seed,
        options.max_examples
    );
    run(Command::new(&schemathesis)
        .arg("--config-file")
        .arg(&config)
        .arg("run")
        .arg(format!("{}/lab/openapi.json", server.base_url()))
        // Every check runs (Schemathesis's default); the configuration
        // leaves one out for one operation, which `--checks` would undo.
        .args(["--workers", "2", "--no-color"])
        // A thousand members' worth of INSERTs, or a million, take seconds
        // on a shared machine; a slow answer is not a wrong one.
        .args(["--request-timeout", "60"])
        .args(["--seed", &options.seed.to_string()])
        .args(["--max-examples", &options.max_examples.to_string()])
        .args(["--report", "junit,har", "--report-dir"])
        .arg(&out)
        // Its own caches (`.schemathesis/`) go with the report.
        .current_dir(&out)
        .env("SCHEMATHESIS_HOOKS", "python311_ast")
        .env("PYTHONPATH", root().join("xtask").join("api-check")))
    .with_context(|| {
        format!(
            "Schemathesis found the API and its document apart; its report is in {}",
            out.display()
        )
    })?;
    println!("API check: no failure; report in {}", out.display());
    Ok(())
}

/// Where the report operation finds a file: the run and file the check's
/// lab holds, as a user would take them from the listing. And one check
/// left out for one operation: after `POST /lab/coupons`, Schemathesis
/// follows the coupon's id to `POST /lab/coupons/{couponId}/issue` with a
/// member of its own making, and reads the 404 of UNKNOWN_MEMBER (seed 004:
/// an unknown member is a 404) as the new coupon gone missing; no link can
/// supply a member, whose ids come from another operation.
fn config_text() -> String {
    format!(
        "[[operations]]\n\
         include-operation-id = \"reportFile\"\n\
         parameters = {{ run = \"{REPORT_RUN}\", file = \"{REPORT_FILE}\" }}\n\
         \n\
         [[operations]]\n\
         include-operation-id = \"issue\"\n\
         checks.ensure_resource_availability.enabled = false\n"
    )
}

/// The pinned Schemathesis in its virtual environment, installed again
/// when missing or when the pins changed since (the venv keeps a copy of
/// the requirements it was made from).
pub fn ensure_schemathesis() -> anyhow::Result<PathBuf> {
    let venv = target_dir().join("schemathesis-venv");
    let binary = venv.join("bin").join("schemathesis");
    let requirements = root()
        .join("xtask")
        .join("api-check")
        .join("requirements.txt");
    let pins = std::fs::read(&requirements)
        .with_context(|| format!("cannot read {}", requirements.display()))?;
    let installed_from = venv.join("requirements.txt");
    let same_pins = std::fs::read(&installed_from).is_ok_and(|installed| installed == pins);
    if same_pins && installed_version(&binary).as_deref() == Some(SCHEMATHESIS) {
        return Ok(binary);
    }
    println!(
        "installing Schemathesis {SCHEMATHESIS} into {}",
        venv.display()
    );
    services::fresh_venv(&venv)?;
    // Every package pinned, Schemathesis's own dependencies too.
    run(Command::new(venv.join("bin").join("pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(&requirements))?;
    match installed_version(&binary) {
        Some(version) if version == SCHEMATHESIS => {
            std::fs::write(&installed_from, pins)?;
            Ok(binary)
        }
        other => bail!("Schemathesis {SCHEMATHESIS} did not install (found {other:?})"),
    }
}

/// `schemathesis, version 4.32.5` → `4.32.5`.
fn installed_version(binary: &Path) -> Option<String> {
    let output = Command::new(binary).arg("--version").output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    text.trim().rsplit(' ').next().map(str::to_string)
}
