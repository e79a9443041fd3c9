//! One method, one coupon, one k6 run — then the drain and the join of what
//! every client was told with what the database and Redis hold.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use couponlab_contract::results::CouponResult;
use serde::Serialize;
use serde_json::{Value, json};

use crate::answers::{Coupon, Members, Strategies, TraceList, read};
use crate::api::Api;
use crate::durations::seconds;
use crate::faults::{Fired, Injector};
use crate::k6::{self, Segment};
use crate::records;
use crate::report::Row;
use crate::report::why::Why;
use crate::runner::Runner;
use crate::verification::{Claim, Verification};
use crate::{engines, galera};

/// How long an asynchronous method may take to confirm what it accepted.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);

/// How far ahead of their launch several k6 processes start their load.
const PROCESSES_START_AFTER: Duration = Duration::from_secs(3);

/// How long several hosts' results may take to count every request (a
/// Galera node that was paused catches up on its own time).
const HOSTS_AGREE_LIMIT: Duration = Duration::from_secs(30);

/// How long the pending figure may stand still before the run is reported
/// as it is: what a fault lost stays pending for good. Not while the
/// coupon's stream still owes entries: those are confirmed in the end
/// (claimed from a dead consumer after 5 s idle, dead-lettered after 3
/// deliveries), and reporting before would count their members as stranded.
const SETTLED_AFTER: Duration = Duration::from_secs(10);

/// How a run's requests arrive.
pub enum Arrivals {
    /// Every member at second zero, one request each.
    Spike { members: u64 },
    /// `rate` requests a second for `duration` (`10s`), each from a
    /// distinct member.
    Rate { rate: u64, duration: String },
}

impl Arrivals {
    /// The members the requests need: one each.
    pub fn members(&self) -> anyhow::Result<u64> {
        Ok(match self {
            Arrivals::Spike { members } => *members,
            Arrivals::Rate { rate, duration } => {
                (*rate as f64 * seconds(duration)? * 1.05) as u64 + 10
            }
        })
    }
}

/// One method's run on one coupon.
pub struct Run<'a> {
    pub method: &'a str,
    pub total: u64,
    pub members: u64,
    pub arrivals: &'a Arrivals,
    /// Which of several rounds this is (`--rounds N`); `None` for a run
    /// alone.
    pub round: Option<u32>,
    /// The engine, when the run is one of several engines'.
    pub engine: Option<&'a str>,
}

/// What one run measured: its report row and its entry in results.json.
pub struct Measured {
    pub row: Row,
    pub raw: Value,
    /// What the method's component claims.
    pub claims: Vec<Claim>,
}

/// What the component serving `method` claims, as the server says.
fn claims_of(api: &Api, method: &str) -> anyhow::Result<Vec<Claim>> {
    let loaded = Strategies::read(api)?;
    let served = loaded
        .strategies
        .iter()
        .find(|strategy| strategy.method == method)
        .with_context(|| format!("the server does not serve {method}"))?;
    served
        .claims
        .iter()
        .map(|word| {
            Claim::from_word(word)
                .with_context(|| format!("{method} claims {word:?}, which the runner cannot check"))
        })
        .collect()
}

/// The requests one host's result counts.
#[derive(Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct HostSaid {
    base_url: String,
    requests: u64,
}

impl Run<'_> {
    /// The run's name in the report, results.json and its files.
    pub fn key(&self) -> String {
        engines::key(self.method, self.engine)
    }

    pub fn execute(&self, runner: &Runner) -> anyhow::Result<Measured> {
        let key = self.key();
        let api = &runner.api;
        let created = api.post("/lab/members", &json!({ "count": self.members }))?;
        let first_member = read::<Members>(created, "POST /lab/members")?.first_id;
        let coupon = api.post(
            "/lab/coupons",
            &json!({ "name": format!("loadtest {}", self.method), "totalCount": self.total }),
        )?;
        let coupon_id = read::<Coupon>(coupon, "POST /lab/coupons")?.id;

        std::fs::create_dir_all(&runner.out)?;
        let hosts: Vec<String> = runner.hosts.iter().map(Api::base_url).collect();
        let mut env = vec![
            ("BASE_URL", api.base_url()),
            ("BASE_URLS", hosts.join(",")),
            ("METHOD", self.method.to_string()),
            ("COUPON_ID", coupon_id.to_string()),
            ("FIRST_MEMBER", first_member.to_string()),
            ("MEMBERS", self.members.to_string()),
        ];
        match self.arrivals {
            Arrivals::Spike { .. } => env.push(("MODE", "spike".to_string())),
            Arrivals::Rate { rate, duration } => env.extend([
                ("MODE", "rate".to_string()),
                ("RATE", rate.to_string()),
                ("DURATION", duration.clone()),
            ]),
        }
        if let Some(ms) = runner.faults.client_timeout_ms() {
            env.push(("CLIENT_TIMEOUT_MS", ms.to_string()));
        }
        if runner.k6_processes > 1 {
            // The processes initialise their VUs at their own pace: each
            // holds its load until one moment, so a spike stays one spike.
            let start_at = SystemTime::now() + PROCESSES_START_AFTER;
            let ms = start_at.duration_since(UNIX_EPOCH)?.as_millis();
            env.push(("START_AT_MS", ms.to_string()));
        }
        let out = &runner.out;
        let files = |segment: Segment| {
            let name = format!("k6-{key}-{coupon_id}-{}", segment.index);
            (
                out.join(format!("{name}.json")),
                out.join(format!("{name}-requests.json")),
            )
        };
        let on_galera = runner
            .engine
            .is_some_and(|engine| engine.starts_with("galera"));
        let conflicts_before = on_galera.then(galera::conflict_counters);
        let k6_runs = runner
            .k6
            .start_issue_script(&env, runner.k6_processes, files)?;
        let injector = Injector::start(&runner.faults, runner.subjects.clone())?;
        let records: Vec<PathBuf> = k6_runs.iter().map(|run| run.records.clone()).collect();
        let parts: Vec<anyhow::Result<Value>> = k6_runs.into_iter().map(k6::finish).collect();
        // The faults end (links restored, servers up) before any error is told.
        let fired = injector.finish()?;
        let parts = parts.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
        let mut told = Vec::new();
        for records in &records {
            told.extend(records::read_k6_json(records)?);
            std::fs::remove_file(records).ok();
        }
        let figures = k6::merge(parts, &told)?;
        for fired in &fired {
            println!(
                "      fault {}: fired at {:.0} ms, ended at {:.0} ms; {}",
                fired.fault, fired.fired_at_ms, fired.ended_at_ms, fired.note
            );
        }
        let records_file = match self.round {
            Some(round) => format!("requests-{key}-round{round}.csv"),
            None => format!("requests-{key}.csv"),
        };
        std::fs::write(
            runner.out.join(&records_file),
            records::csv(self.method, coupon_id, &told),
        )?;

        let accepting = told.iter().any(|record| record.status == 202);
        let hosts_said = hosts_said(runner, &path_of(coupon_id), told.len())?;
        let (said, drain_ms) = settle(api, coupon_id, accepting)?;
        let result = &said.typed;
        let truth = runner.sources.truth(coupon_id)?;
        let confirmations = if accepting {
            runner.sources.confirmations(coupon_id)?
        } else {
            Vec::new()
        };
        let out_of_turn = result.requests.fairness.served_after_earlier_sold_out;
        let verification = Verification::join(&told, &truth, out_of_turn);
        let claims = claims_of(api, self.method)?;
        let broken: Vec<&str> = verification
            .broken_claims(&claims)
            .iter()
            .map(|claim| claim.word())
            .collect();
        let claimed: Vec<&str> = claims.iter().map(|c| c.word()).collect();
        let mut row = Row::from(
            &key,
            &k6::Figures::read(&figures)?,
            result,
            drain_ms,
            Some(verification.clone()),
        );
        row.why.example = example_trace(api, coupon_id, &row.why);
        row.why.cluster = conflicts_before
            .map(|before| galera::conflicts_over(&before, &galera::conflict_counters()));
        let raw = json!({
            "couponId": coupon_id,
            "engine": said.raw["engine"],
            "firstMember": first_member,
            "requestRecords": records_file,
            "k6": figures,
            "result": said.raw,
            "verification": verification,
            "claims": claimed,
            "brokenClaims": broken,
            "faults": fired.iter().map(Fired::to_json).collect::<Vec<_>>(),
            "hosts": hosts_said,
            "exampleTrace": row.why.example,
            "clusterConflicts": row.why.cluster,
            "confirmations": confirmations,
        });
        Ok(Measured { row, raw, claims })
    }
}

/// One request's trace for the report: a witness of the first anomaly
/// met, else a served request's, else any; `None` when the server kept
/// none (or is older than traces).
fn example_trace(api: &Api, coupon_id: u64, why: &Why) -> Option<Value> {
    why.example_queries().iter().find_map(|query| {
        let listed = api
            .get(&format!("/lab/coupons/{coupon_id}/traces?{query}"))
            .ok()?;
        read::<TraceList>(listed, "GET /lab/coupons/{id}/traces")
            .ok()?
            .traces
            .into_iter()
            .next()
    })
}

/// A coupon's result as the lab answered it, kept whole for results.json,
/// and as the runner reads it.
struct Said {
    raw: Value,
    typed: CouponResult,
}

/// Waits until every accepted request has its outcome and the stream, if
/// any, owes nothing, or until the pending figure stops moving with nothing
/// owed; returns the coupon's result and, for a method that answers 202
/// (`accepting`: k6 saw one), how long that took.
fn settle(api: &Api, coupon_id: u64, accepting: bool) -> anyhow::Result<(Said, Option<f64>)> {
    let path = path_of(coupon_id);
    let drained_at = Instant::now();
    let mut result = read_whole(api, &path)?;
    let asynchronous = accepting || result.typed.confirmations.is_some();
    let waiting = |said: &Said| (said.typed.pending(), stream_owes(&said.typed));
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
fn read_whole(api: &Api, path: &str) -> anyhow::Result<Said> {
    let since = Instant::now();
    loop {
        let raw = api.get(path)?;
        let typed: CouponResult = read(raw.clone(), path)?;
        let unreadable = typed.redis.as_ref().is_some_and(|redis| !redis.readable);
        if !unreadable || since.elapsed() > SETTLED_AFTER {
            return Ok(Said { raw, typed });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn path_of(coupon_id: u64) -> String {
    format!("/lab/coupons/{coupon_id}/result")
}

/// With several `--base-url`s, the requests each host's result counts,
/// once they all count every request k6 `sent` (for [`HOSTS_AGREE_LIMIT`]
/// at most): each host publishes its record every moment, so right after
/// the load one host's result may not have the last of another's yet. A
/// host whose count still differs says the lab does not report as one.
/// Nothing with one host.
fn hosts_said(runner: &Runner, path: &str, sent: usize) -> anyhow::Result<Vec<HostSaid>> {
    if runner.hosts.len() < 2 {
        return Ok(Vec::new());
    }
    let sent = sent as u64;
    let since = Instant::now();
    let said = 'asking: loop {
        let mut said = Vec::new();
        for host in &runner.hosts {
            let result = match read_whole(host, path) {
                Ok(result) => result,
                // A host on a Galera node that was paused or killed may
                // not have applied the coupon's row yet (404): asked again.
                Err(_) if since.elapsed() <= HOSTS_AGREE_LIMIT => {
                    std::thread::sleep(Duration::from_millis(100));
                    continue 'asking;
                }
                Err(err) => return Err(err),
            };
            said.push(HostSaid {
                base_url: host.base_url(),
                requests: result.typed.requests.total,
            });
        }
        let agree = said.iter().all(|host| host.requests == sent);
        if agree || since.elapsed() > HOSTS_AGREE_LIMIT {
            break said;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let counts: Vec<String> = said
        .iter()
        .map(|host| format!("{} {}", host.base_url, host.requests))
        .collect();
    println!(
        "      requests each host's result counts: {}",
        counts.join(", ")
    );
    if said.iter().any(|host| host.requests != sent) {
        println!("      !!! k6 sent {sent}: the hosts' results do not cover every host's requests");
    }
    Ok(said)
}

/// Entries of the coupon's stream delivered and not acked, or not delivered
/// yet.
fn stream_owes(result: &CouponResult) -> u64 {
    result.stream.as_ref().map_or(0, |stream| stream.owed())
}
