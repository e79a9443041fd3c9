//! One method, one coupon, one k6 run — then the drain and the join of what
//! every client was told with what the database and Redis hold.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{Value, json};

use super::faults::{FaultPlan, Fired, Injector};
use super::http::Api;
use super::k6::{self, K6};
use super::proxy::Links;
use super::records;
use super::report::Row;
use super::server::{self, Serve, Server};
use super::truth::Sources;
use super::verification::{Verification, claims};

/// How long an asynchronous method may take to confirm what it accepted.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// How long the pending figure may stand still before the run is reported
/// as it is: what a fault lost stays pending for good. Not while the
/// coupon's stream still owes entries: those are confirmed in the end
/// (claimed from a dead consumer after 5 s idle, dead-lettered after 3
/// deliveries), and reporting before would count their members as stranded.
const SETTLED_AFTER: Duration = Duration::from_secs(10);

/// What every run of one `cargo xtask loadtest` shares.
pub struct Runner {
    pub api: Api,
    pub k6: K6,
    /// The server's database and Redis, read directly for the join.
    pub sources: Sources,
    /// Where the report and the per-request records go.
    pub out: PathBuf,
    /// The `--fault`s, injected into every method's run.
    pub faults: FaultPlan,
    /// The proxies between `--serve`'s server and Redis/MySQL, when a fault
    /// cuts or slows a link.
    pub links: Option<Arc<Links>>,
    /// `--serve`'s server, for the faults that kill it.
    pub server: Option<Arc<Mutex<Server>>>,
}

impl Runner {
    /// A runner with a server of its own (`--serve`: database
    /// `couponlab_loadtest_<hash>`, Redis db 10), reached through the
    /// fault proxies when a fault cuts or slows a link.
    pub fn serving(
        faults: FaultPlan,
        roles_apart: bool,
        build: bool,
        k6: K6,
        out: PathBuf,
    ) -> anyhow::Result<Runner> {
        let links = if faults.needs_links() {
            Some(Arc::new(Links::start()?))
        } else {
            None
        };
        let server = Server::start_with(Serve {
            build,
            links: links.as_deref(),
            roles_apart,
        })?;
        Ok(Runner {
            api: Api::new(&server.base_url())?,
            k6,
            sources: Sources::connect(&server::database_url()?, server::REDIS_URL)?,
            out,
            faults,
            links,
            server: Some(Arc::new(Mutex::new(server))),
        })
    }

    /// A runner against a server someone else runs, whose data is at
    /// `database_url` and `redis_url`.
    pub fn against(
        base_url: &str,
        database_url: &str,
        redis_url: &str,
        faults: FaultPlan,
        k6: K6,
        out: PathBuf,
    ) -> anyhow::Result<Runner> {
        Ok(Runner {
            api: Api::new(base_url)?,
            k6,
            sources: Sources::connect(database_url, redis_url)?,
            out,
            faults,
            links: None,
            server: None,
        })
    }
}

/// One method's run on one coupon.
pub struct Run<'a> {
    pub method: &'a str,
    pub total: u64,
    pub members: u64,
    pub rate: u64,
    pub duration: &'a str,
    pub spike: bool,
}

/// What one run measured: its report row and its entry in results.json.
pub struct Measured {
    pub row: Row,
    pub raw: Value,
}

impl Run<'_> {
    pub fn execute(&self, runner: &Runner) -> anyhow::Result<Measured> {
        let api = &runner.api;
        let created = api.post("/lab/members", &json!({ "count": self.members }))?;
        let first_member = created["firstId"].as_u64().context("no firstId")?;
        let coupon = api.post(
            "/lab/coupons",
            &json!({ "name": format!("loadtest {}", self.method), "totalCount": self.total }),
        )?;
        let coupon_id = coupon["id"].as_u64().context("no coupon id")?;

        std::fs::create_dir_all(&runner.out)?;
        let summary = runner
            .out
            .join(format!("k6-{}-{coupon_id}.json", self.method));
        let k6_records = runner
            .out
            .join(format!("k6-{}-{coupon_id}-requests.json", self.method));
        let mut env = vec![
            ("BASE_URL", api.base_url()),
            ("METHOD", self.method.to_string()),
            ("COUPON_ID", coupon_id.to_string()),
            ("FIRST_MEMBER", first_member.to_string()),
            ("MEMBERS", self.members.to_string()),
            (
                "MODE",
                if self.spike { "spike" } else { "rate" }.to_string(),
            ),
            ("RATE", self.rate.to_string()),
            ("DURATION", self.duration.to_string()),
        ];
        if let Some(ms) = runner.faults.client_timeout_ms() {
            env.push(("CLIENT_TIMEOUT_MS", ms.to_string()));
        }
        let k6_run = runner.k6.start_issue_script(&env, &summary, &k6_records)?;
        let injector =
            Injector::start(&runner.faults, runner.links.clone(), runner.server.clone())?;
        let figures = k6::finish(k6_run, &summary);
        let fired = injector.finish()?;
        let figures = figures?;
        for fired in &fired {
            println!(
                "      fault {}: fired at {:.0} ms, ended at {:.0} ms; {}",
                fired.fault, fired.fired_at_ms, fired.ended_at_ms, fired.note
            );
        }
        let told = records::read_k6_json(&k6_records)?;
        std::fs::remove_file(&summary).ok();
        std::fs::remove_file(&k6_records).ok();
        let records_file = format!("requests-{}.csv", self.method);
        std::fs::write(
            runner.out.join(&records_file),
            records::csv(self.method, coupon_id, &told),
        )?;

        let accepting = told.iter().any(|record| record.status == 202);
        let (result, drain_ms) = settle(api, coupon_id, accepting)?;
        let truth = runner.sources.truth(coupon_id)?;
        let out_of_turn = result["requests"]["fairness"]["servedAfterEarlierSoldOut"]
            .as_u64()
            .unwrap_or(0);
        let verification = Verification::join(&told, &truth, out_of_turn);
        let broken: Vec<&str> = verification
            .broken_claims(self.method)
            .iter()
            .map(|claim| claim.word())
            .collect();
        let claimed: Vec<&str> = claims(self.method).iter().map(|c| c.word()).collect();
        let raw = json!({
            "couponId": coupon_id,
            "firstMember": first_member,
            "requestRecords": records_file,
            "k6": figures,
            "result": result,
            "verification": verification,
            "claims": claimed,
            "brokenClaims": broken,
            "faults": fired.iter().map(Fired::to_json).collect::<Vec<_>>(),
        });
        Ok(Measured {
            row: Row::from(self.method, &figures, &result, drain_ms, Some(verification)),
            raw,
        })
    }
}

/// Waits until every accepted request has its outcome and the stream, if
/// any, owes nothing, or until the pending figure stops moving with nothing
/// owed; returns the coupon's result and, for a method that answers 202
/// (`accepting`: k6 saw one), how long that took.
fn settle(api: &Api, coupon_id: u64, accepting: bool) -> anyhow::Result<(Value, Option<f64>)> {
    let path = format!("/lab/coupons/{coupon_id}/result");
    let drained_at = Instant::now();
    let mut result = read_whole(api, &path)?;
    let asynchronous = accepting || result.get("accepted").is_some();
    let waiting = |result: &Value| (pending(result), stream_owes(result));
    let (mut last, mut last_change) = (waiting(&result), Instant::now());
    while last != (0, 0) {
        if drained_at.elapsed() > DRAIN_LIMIT {
            println!(
                "      still {} pending, {} owed by the stream after {DRAIN_LIMIT:?}; reporting as is",
                last.0, last.1
            );
            break;
        }
        if last.1 == 0 && last_change.elapsed() > SETTLED_AFTER {
            println!(
                "      {} pending, unchanged for {SETTLED_AFTER:?}: reporting as is",
                last.0
            );
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        result = read_whole(api, &path)?;
        if waiting(&result) != last {
            (last, last_change) = (waiting(&result), Instant::now());
        }
    }
    let drain_ms = asynchronous.then(|| drained_at.elapsed().as_secs_f64() * 1000.0);
    Ok((result, drain_ms))
}

/// The coupon's result, read again while it says Redis could not be read
/// (for [`SETTLED_AFTER`] at most): without Redis it has no `pending`, and
/// right after a cut link the server's first Redis command fails once
/// while its connection comes back.
fn read_whole(api: &Api, path: &str) -> anyhow::Result<Value> {
    let since = Instant::now();
    loop {
        let result = api.get(path)?;
        if result["redis"]["readable"] != false || since.elapsed() > SETTLED_AFTER {
            return Ok(result);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pending(result: &Value) -> u64 {
    result["pending"].as_u64().unwrap_or(0)
}

/// Entries of the coupon's stream delivered and not acked, or not delivered
/// yet.
fn stream_owes(result: &Value) -> u64 {
    let stream = &result["stream"];
    stream["pending"].as_u64().unwrap_or(0) + stream["undelivered"].as_u64().unwrap_or(0)
}
