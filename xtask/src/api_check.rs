//! `cargo xtask api-check`: the `/lab` API as a tool nobody here wrote sees
//! it. Schemathesis (pinned from PyPI, its dependencies too, in a virtual
//! environment under the target directory) reads `GET /lab/openapi.json` of
//! a served lab and sends what the document allows and what it rules out,
//! in all its phases: examples, coverage, fuzzing, and stateful sequences
//! that follow the links it infers (a coupon created, then issued). A 5xx,
//! an answer the document does not describe, a request the document allows
//! and the server refuses (or the reverse) fails the run.
//!
//! Its seed is the day's unless `--seed` names one: each day's run explores
//! inputs the days before did not, and a failure is replayed with the seed
//! the run printed.
//!
//! ```text
//! cargo xtask api-check [--max-examples 100] [--seed N] [--out DIR]
//! ```
//!
//! The lab it checks has members, a coupon and a report run, so that every
//! operation can be reached with data that exists, a report file
//! included; half the ids Schemathesis makes up are those of the members
//! and the coupon, so requests reach the components and not only their
//! 404s. The reports (JUnit, and every request as a HAR cassette) go under
//! `--out` (default `target/artifacts/schemathesis`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::json;

use crate::flags::Flags;
use crate::loadtest::http::Api;
use crate::loadtest::server::{Serve, Server};
use crate::{root, run, services, target_dir};

/// The Schemathesis release the check is pinned to (with its dependencies,
/// in `xtask/api-check/requirements.txt`).
const SCHEMATHESIS: &str = "4.32.5";
/// Examples of `POST /lab/members` (see [`config_text`]).
const MEMBERS_EXAMPLES: u32 = 20;
const USAGE: &str = "usage: cargo xtask api-check [--max-examples 100] [--seed N] [--out DIR]";
/// The report run the check's lab holds, and its file: JSON, which the
/// route serves as it is (not as text).
const REPORT_RUN: &str = "2026-01-01T00-00-00Z-compare";
const REPORT_FILE: &str = "results.json";

pub struct Options {
    /// Examples an operation in each generating phase, scenarios in the
    /// stateful one: at 100, about 2,000 requests in some 30 s (at 30, 16 s).
    pub max_examples: u32,
    /// None: the day's ([`seed_of_the_day`]).
    pub seed: Option<u64>,
    pub out: PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_examples: 100,
            seed: None,
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
                "--seed" => options.seed = Some(flags.parsed(flag, "an integer")?),
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
    std::fs::write(
        run_dir.join(REPORT_FILE),
        "{\"title\": \"a report for the API check\", \"methods\": {}}\n",
    )?;
    let reports_env = reports.to_string_lossy().into_owned();
    let env = [("COUPONLAB_REPORTS_DIR", reports_env.as_str())];
    let server = Server::start_with(Serve {
        build,
        env: &env,
        ..Serve::default()
    })?;
    let api = Api::new(&server.base_url())?;
    let members = api.post("/lab/members", &json!({ "count": 20 }))?;
    let coupon = api.post(
        "/lab/coupons",
        &json!({ "name": "api check", "totalCount": 10 }),
    )?;
    let id = |value: &serde_json::Value, field: &str| {
        value[field]
            .as_u64()
            .with_context(|| format!("no {field} in {value}"))
    };
    let lab = Known {
        members: id(&members, "firstId")?..=id(&members, "lastId")?,
        coupon: id(&coupon, "id")?,
    };

    std::fs::remove_dir_all(&options.out).ok();
    std::fs::create_dir_all(&options.out)?;
    let out = options.out.canonicalize()?;
    let config = out.join("schemathesis.toml");
    std::fs::write(&config, config_text(&lab))?;
    let seed = options.seed.unwrap_or_else(seed_of_the_day);
    let replay = format!("`cargo xtask api-check --seed {seed}` replays it");
    println!(
        "Schemathesis {SCHEMATHESIS} against {}/lab/openapi.json (seed {seed}{}; {} examples an operation)",
        server.base_url(),
        if options.seed.is_none() {
            format!(", the day's: {replay}")
        } else {
            String::new()
        },
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
        .args(["--seed", &seed.to_string()])
        .args(["--max-examples", &options.max_examples.to_string()])
        .args(["--report", "junit,har", "--report-dir"])
        .arg(&out)
        // Its own caches (`.schemathesis/`) go with the report.
        .current_dir(&out)
        .env("SCHEMATHESIS_HOOKS", "python311_ast")
        .env("PYTHONPATH", root().join("xtask").join("api-check")))
    .with_context(|| {
        format!(
            "Schemathesis found the API and its document apart (seed {seed}: {replay}); its report is in {}",
            out.display()
        )
    })?;
    println!("API check: no failure; report in {}", out.display());
    Ok(())
}

/// The ids the check's lab holds.
struct Known {
    members: std::ops::RangeInclusive<u64>,
    coupon: u64,
}

/// The seed of a run that names none: the UTC day's number since 1970, so
/// each day's run draws other inputs, and every run of one day the same.
fn seed_of_the_day() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH);
    now.map_or(0, |since| since.as_secs() / 86_400)
}

/// The configuration:
/// - Where the report operation finds a file: the run and the JSON file
///   the check's lab holds, as a user would take them from the listing.
///   Fixed, not drawn: given names to draw from, Schemathesis 4.32.5's
///   stateful phase sent one the pattern rules out (a backslash in it) as
///   one the document allows, and failed the server's 400 (seed 20793, 300
///   examples); `tests/lab/openapi.rs` checks the pattern against the
///   server's rule.
/// - Half the coupon and member ids drawn from those the lab holds (the
///   rest made up), so requests get past the 404s to the components.
/// - The stateful phase on (it is by default; said here so that a change
///   of default does not turn it off unseen).
/// - Fewer examples for `POST /lab/members`: each may insert up to a
///   million rows (seconds), and at 100 examples they were 95 of the run's
///   120 seconds.
/// - One check left out for one operation: after `POST /lab/coupons`,
///   Schemathesis follows the coupon's id to `POST
///   /lab/coupons/{couponId}/issue` with a member of its own making, and
///   reads the 404 of UNKNOWN_MEMBER as the new coupon gone missing. The
///   document tells the two 404s apart (`error.outcome`), but the check
///   reads the status alone, and no link can supply a member, whose ids
///   come from another operation.
fn config_text(lab: &Known) -> String {
    let members: Vec<String> = lab.members.clone().map(|id| id.to_string()).collect();
    format!(
        "[dictionaries.members]\n\
         values = [{members}]\n\
         \n\
         [dictionaries.coupons]\n\
         values = [{coupon}]\n\
         \n\
         [parameters]\n\
         \"path.couponId\" = {{ dictionary = \"coupons\", probability = 0.5 }}\n\
         \"body.memberId\" = {{ dictionary = \"members\", probability = 0.5 }}\n\
         \n\
         [phases.stateful]\n\
         enabled = true\n\
         \n\
         [[operations]]\n\
         include-operation-id = \"reportFile\"\n\
         parameters = {{ run = \"{REPORT_RUN}\", file = \"{REPORT_FILE}\" }}\n\
         \n\
         [[operations]]\n\
         include-operation-id = \"issue\"\n\
         checks.ensure_resource_availability.enabled = false\n\
         \n\
         [[operations]]\n\
         include-operation-id = \"createMembers\"\n\
         generation.max-examples = {MEMBERS_EXAMPLES}\n",
        members = members.join(", "),
        coupon = lab.coupon,
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
