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
//! Its seed is a fresh one each run unless `--seed` names one: each run
//! explores inputs the runs before did not, and a failure is replayed with
//! the seed the run printed.
//!
//! `--engine` says which database the served lab runs on: MariaDB (the
//! default) or PostgreSQL, each on a database and a Redis database of its
//! own; `cargo xtask test` checks both, with half the examples each.
//!
//! The lab it checks has members, a coupon and a report run, so that every
//! operation can be reached with data that exists, a report file
//! included; half the ids Schemathesis makes up are those of the members
//! and the coupon, so requests reach the components and not only their
//! 404s. The reports (JUnit, and every request as a HAR cassette) go under
//! `--out` (default `target/artifacts/schemathesis/<engine>`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use clap::Args;
use serde_json::json;

use crate::api::Api;
use crate::engines::{Engine, engine_list};
use crate::paths::{root, target_dir};
use crate::server::{REDIS_SERVER, Serve, Server};

/// Examples of `POST /lab/members` for each example of the other
/// operations (see [`config_text`]): one in five.
const MEMBERS_EXAMPLES_PER: u32 = 5;
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
    /// The seed to replay [default: a fresh one, printed]
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// The database the served lab runs on: mariadb, mariadb-si or postgres
    #[arg(long, value_name = "ENGINE", default_value = "mariadb", value_parser = one_engine)]
    engine: Engine,
    /// Where the reports go [default: target/artifacts/schemathesis/<engine>]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

/// `--engine`: one of the engines `--engines` names.
fn one_engine(text: &str) -> Result<Engine, String> {
    match engine_list(text)?.0.as_slice() {
        [engine] => Ok(*engine),
        _ => Err("name one engine".into()),
    }
}

/// The Redis database of the check's lab on `engine`: the served labs'
/// own (10) on MariaDB, another on the others, whose labs are others (a
/// Redis database is one lab's, and a stopped lab's claim outlives it by
/// seconds).
fn redis_url(engine: Engine) -> String {
    let database = if engine == Engine::MariaDb { 10 } else { 11 };
    format!("{REDIS_SERVER}/{database}")
}

/// Serves a lab with data to find and runs Schemathesis against it; fails
/// on any failure it reports.
pub fn check(options: &Options) -> anyhow::Result<()> {
    let schemathesis = installed_schemathesis()?;
    let version = version_of(&schemathesis).context("Schemathesis does not say its version")?;
    // One directory an engine: the checks of two engines may run at once.
    let reports = target_dir()
        .join("api-check-reports")
        .join(options.engine.name());
    std::fs::remove_dir_all(&reports).ok();
    let run_dir = reports.join(REPORT_RUN);
    std::fs::create_dir_all(&run_dir)?;
    std::fs::write(
        run_dir.join(REPORT_FILE),
        "{\"title\": \"a report for the API check\", \"methods\": {}}\n",
    )?;
    let reports_env = reports.to_string_lossy().into_owned();
    let mut env = vec![("COUPONLAB_REPORTS_DIR", reports_env.as_str())];
    env.extend(options.engine.env().iter().copied());
    let (database_url, redis_url) = (options.engine.database_url()?, redis_url(options.engine));
    let server = Server::start_with(Serve {
        env: &env,
        database_url: Some(&database_url),
        redis_url: Some(&redis_url),
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

    let engine = options.engine.name();
    let out = options.out.clone().unwrap_or_else(|| {
        let all = target_dir().join("artifacts").join("schemathesis");
        all.join(engine)
    });
    std::fs::remove_dir_all(&out).ok();
    std::fs::create_dir_all(&out)?;
    let out = out.canonicalize()?;
    let config = out.join("schemathesis.toml");
    std::fs::write(&config, config_text(&lab, options.max_examples))?;
    let seed = options.seed.unwrap_or_else(fresh_seed);
    let replay = format!(
        "`cargo xtask api-check --engine {engine} --max-examples {} --seed {seed}` replays it",
        options.max_examples
    );
    println!(
        "Schemathesis {version} against {}/lab/openapi.json on {engine} (seed {seed}{}; {} examples an operation)",
        server.base_url(),
        if options.seed.is_none() {
            format!(", a fresh one: {replay}")
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
        // widens one for one operation, which `--checks` would undo. An
        // unknown member is a 422, so the 404 of an issue is the coupon's
        // alone, as `ensure_resource_availability` reads it.
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
            "Schemathesis found the API and its document apart on {engine} (seed {seed}: {replay}); its report is in {}",
            out.display()
        )
    })?;
    println!(
        "API check on {engine}: no failure (seed {seed}); report in {}",
        out.display()
    );
    Ok(())
}

/// The ids the check's lab holds.
struct Known {
    members: std::ops::RangeInclusive<u64>,
    coupon: u64,
}

/// The seed of a run that names none: the clock's nanoseconds, so each run
/// draws other inputs; nine digits, short enough to type again.
fn fresh_seed() -> u64 {
    let now = SystemTime::now().duration_since(UNIX_EPOCH);
    now.map_or(0, |since| since.as_nanos() as u64 % 1_000_000_000)
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
/// - 422 among the answers an issue that the document allows may get
///   (Schemathesis's default list has 404 and 409, not 422): a member
///   the lab does not hold is a well-formed body the lab cannot serve,
///   UNKNOWN_MEMBER, as an unknown coupon is a 404 and a duplicate a 409.
/// - Fewer examples for `POST /lab/members`, a fifth of the others': each
///   may insert up to a million rows (seconds), and at 100 examples they
///   were 95 of the run's 120 seconds.
fn config_text(lab: &Known, max_examples: u32) -> String {
    let members_examples = (max_examples / MEMBERS_EXAMPLES_PER).max(1);
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
         checks.positive_data_acceptance.expected-statuses = \
         [\"2xx\", \"3xx\", \"401\", \"403\", \"404\", \"409\", \"422\", \"429\", \"5xx\"]\n\
         \n\
         [[operations]]\n\
         include-operation-id = \"createMembers\"\n\
         generation.max-examples = {members_examples}\n",
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
