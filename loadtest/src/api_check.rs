//! `cargo xtask api-check`: the `/lab` API as a tool nobody here wrote sees
//! it. Schemathesis (pinned from PyPI, its dependencies too, in a virtual
//! environment under the target directory, where xtask installs it) reads
//! `GET /lab/openapi.json` of a served lab and sends what the document
//! allows and what it rules out, in all its phases: examples, coverage,
//! fuzzing, and stateful sequences that follow the links it infers (a
//! coupon created, then issued). A 5xx,
//! an answer the document does not describe, a request the document allows
//! and the server refuses (or the reverse) fails the run.
//!
//! Its seed is the day's unless `--seed` names one: each day's run explores
//! inputs the days before did not, and a failure is replayed with the seed
//! the run printed.
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
use clap::Args;
use serde_json::json;

use crate::api::Api;
use crate::paths::{root, target_dir};
use crate::server::{Serve, Server};

/// Examples of `POST /lab/members` (see [`config_text`]).
const MEMBERS_EXAMPLES: u32 = 20;
/// The report run the check's lab holds, and its file: JSON, which the
/// route serves as it is (not as text).
const REPORT_RUN: &str = "2026-01-01T00-00-00Z-compare";
const REPORT_FILE: &str = "results.json";

#[derive(Args)]
pub struct Options {
    /// Examples an operation in each generating phase, scenarios in the
    /// stateful one: at 100, about 2,000 requests in some 30 s (at 30, 16 s)
    #[arg(long, default_value_t = 100)]
    max_examples: u32,
    /// The seed to replay [default: the day's]
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Where the reports go [default: target/artifacts/schemathesis]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// Serves a lab with data to find and runs Schemathesis against it; fails
/// on any failure it reports.
pub fn check(options: &Options) -> anyhow::Result<()> {
    let schemathesis = installed_schemathesis()?;
    let version = version_of(&schemathesis).context("Schemathesis does not say its version")?;
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

    let out = options
        .out
        .clone()
        .unwrap_or_else(|| target_dir().join("artifacts").join("schemathesis"));
    std::fs::remove_dir_all(&out).ok();
    std::fs::create_dir_all(&out)?;
    let out = out.canonicalize()?;
    let config = out.join("schemathesis.toml");
    std::fs::write(&config, config_text(&lab))?;
    let seed = options.seed.unwrap_or_else(seed_of_the_day);
    let replay = format!("`cargo xtask api-check --seed {seed}` replays it");
    println!(
        "Schemathesis {version} against {}/lab/openapi.json (seed {seed}{}; {} examples an operation)",
        server.base_url(),
        if options.seed.is_none() {
            format!(", the day's: {replay}")
        } else {
            String::new()
        },
        options.max_examples
    );
    crate::run(Command::new(&schemathesis)
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
        .env("PYTHONPATH", root().join("loadtest").join("api-check")))
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

/// The Schemathesis `cargo xtask api-check` installed, pinned with its
/// dependencies (`loadtest/api-check/requirements.txt`), in its virtual
/// environment.
fn installed_schemathesis() -> anyhow::Result<PathBuf> {
    let binary = target_dir()
        .join("schemathesis-venv")
        .join("bin")
        .join("schemathesis");
    if !binary.exists() {
        bail!(
            "no Schemathesis at {}: `cargo xtask api-check` installs it",
            binary.display()
        );
    }
    Ok(binary)
}

/// `schemathesis, version 4.32.5` → `4.32.5`.
fn version_of(binary: &Path) -> Option<String> {
    let output = Command::new(binary).arg("--version").output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    text.trim().rsplit(' ').next().map(str::to_string)
}
