//! The lab behind Redis Sentinels: a primary of the test's own with two
//! replicas and three Sentinels (`redis-server --sentinel`), all on free
//! ports, failing over fast (`down-after-milliseconds` 1000, a failover
//! timeout of 3 s). The primary is SIGKILLed, or paused (SIGSTOP) until a
//! replica is promoted and then continued, mid-burst; the lab finds the
//! promoted replica through the Sentinels and serves again. Redis
//! replicates asynchronously: what the old primary had not sent is gone,
//! and what each method makes of a lost reservation is measured here.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use couponlab_contract::keys;
use serde_json::json;

use crate::common::{Setup, TestLab, assert_invariants_hold, outcome};
use crate::failover_burst::{Lane, Seen, burst, members_of, rows_keep_the_invariants};
use crate::redis_server::{RedisServer, cli, node_port};

const MASTER: &str = "lab";
const DOWN_AFTER: Duration = Duration::from_millis(1_000);
const FAILOVER_TIMEOUT: Duration = Duration::from_millis(3_000);
/// How long the topology may take to start and the Sentinels to agree.
const READY_LIMIT: Duration = Duration::from_secs(30);

/// One `redis-server --sentinel`, killed when dropped.
struct SentinelProcess {
    port: u16,
    dir: PathBuf,
    child: Child,
}

impl SentinelProcess {
    fn start(primary: u16) -> SentinelProcess {
        let port = node_port();
        let dir =
            std::env::temp_dir().join(format!("couponlab-sentinel-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("sentinel.conf");
        std::fs::write(
            &config,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\n\
                 sentinel monitor {MASTER} 127.0.0.1 {primary} 2\n\
                 sentinel down-after-milliseconds {MASTER} {}\n\
                 sentinel failover-timeout {MASTER} {}\n",
                dir.display(),
                DOWN_AFTER.as_millis(),
                FAILOVER_TIMEOUT.as_millis()
            ),
        )
        .unwrap();
        let child = Command::new("redis-server")
            .arg(&config)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server runs (Debian's redis-server)");
        SentinelProcess { port, dir, child }
    }

    /// The primary's port this Sentinel names.
    fn named_primary(&self) -> Option<u16> {
        let reply = cli(self.port, &["sentinel", "get-master-addr-by-name", MASTER]);
        reply.lines().nth(1)?.trim().parse().ok()
    }

    /// A field of `SENTINEL MASTER`.
    fn field(&self, name: &str) -> Option<String> {
        let reply = cli(self.port, &["sentinel", "master", MASTER]);
        let lines: Vec<&str> = reply.lines().map(str::trim).collect();
        let at = lines.iter().position(|line| *line == name)?;
        lines.get(at + 1).map(|value| value.to_string())
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// A primary, two replicas and three Sentinels.
struct Topology {
    primary: RedisServer,
    _replicas: Vec<RedisServer>,
    sentinels: Vec<SentinelProcess>,
}

impl Topology {
    /// Starts it and waits until every Sentinel names the primary, knows
    /// the two other Sentinels and both replicas, and the primary has both
    /// online.
    fn start() -> Topology {
        let primary = RedisServer::start();
        primary.until_answering();
        let replica_of = primary.port.to_string();
        let replicas: Vec<RedisServer> = (0..2)
            .map(|_| {
                let replica =
                    RedisServer::start_with(&["--replicaof", "127.0.0.1", &replica_of], None);
                replica.until_answering();
                replica
            })
            .collect();
        let sentinels = (0..3)
            .map(|_| SentinelProcess::start(primary.port))
            .collect();
        let topology = Topology {
            primary,
            _replicas: replicas,
            sentinels,
        };
        let started = Instant::now();
        while !topology.ready() {
            assert!(
                started.elapsed() < READY_LIMIT,
                "the Sentinels did not agree on a primary with two replicas in {READY_LIMIT:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        topology
    }

    fn ready(&self) -> bool {
        let online = cli(self.primary.port, &["info", "replication"])
            .lines()
            .filter(|line| line.starts_with("slave") && line.contains("state=online"))
            .count();
        online == 2
            && self.sentinels.iter().all(|sentinel| {
                sentinel.named_primary() == Some(self.primary.port)
                    && sentinel.field("num-other-sentinels").as_deref() == Some("2")
                    && sentinel.field("num-slaves").as_deref() == Some("2")
            })
    }

    fn url(&self) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|sentinel| format!("127.0.0.1:{}", sentinel.port))
            .collect();
        format!("redis+sentinel://{}/{MASTER}/0", sentinels.join(","))
    }

    /// The primary every Sentinel names, once they agree on one other than
    /// `old`.
    fn promoted(&self, old: u16) -> Option<u16> {
        let named: Vec<Option<u16>> = self.sentinels.iter().map(|s| s.named_primary()).collect();
        let first = named[0]?;
        (first != old && named.iter().all(|port| *port == Some(first))).then_some(first)
    }

    /// Waits until the Sentinels agree on a primary other than `old` (the
    /// one that led the failover tells the others within a hello period or
    /// two).
    async fn until_promoted(&self, old: u16) -> u16 {
        let started = Instant::now();
        loop {
            if let Some(promoted) = self.promoted(old) {
                return promoted;
            }
            assert!(
                started.elapsed() < READY_LIMIT,
                "the Sentinels do not agree on a promoted replica"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// The process id of the Redis on `port`, as it reports it.
fn pid_of(port: u16) -> String {
    cli(port, &["info", "server"])
        .lines()
        .find_map(|line| line.strip_prefix("process_id:"))
        .expect("the node reports its process id")
        .trim()
        .to_string()
}

fn signal(pid: &str, signal: &str) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), pid])
        .status()
        .unwrap();
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// Waits until the node on `port` replicates from a primary, its link up.
async fn until_a_replica_in_sync(port: u16) {
    let started = Instant::now();
    loop {
        let info = cli(port, &["info", "replication"]);
        if info.contains("role:slave")
            && info.contains("master_link_status:up")
            && info.contains("master_sync_in_progress:0")
        {
            return;
        }
        assert!(
            started.elapsed() < READY_LIMIT,
            "127.0.0.1:{port} is no replica in sync: {info}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every method served a request sent after the fault within the
/// Sentinels' failover and a few seconds; when, per method.
fn assert_served_again_in_time(seen: &Seen, lanes: &[Lane]) {
    let bound = DOWN_AFTER + FAILOVER_TIMEOUT + Duration::from_secs(5);
    for lane in lanes {
        let served_again = seen.served_again.get(lane.method).unwrap_or_else(|| {
            panic!(
                "{}: no request sent after the fault was served",
                lane.method
            )
        });
        assert!(
            *served_again < bound,
            "{} served again {served_again:?} after the fault, over {bound:?}",
            lane.method
        );
    }
}

/// A lab behind the topology, serving `components`, and one coupon of
/// `total` per method, `members` members each.
async fn lab_with_lanes(
    topology: &Topology,
    components: &[&'static str],
    methods: &[&'static str],
    total: u64,
    members: u64,
) -> (TestLab, Vec<Lane>) {
    let lab = Setup::with(components)
        .redis_url(topology.url())
        .start()
        .await;
    let mut lanes = Vec::new();
    for &method in methods {
        lanes.push(Lane {
            method,
            coupon: lab.coupon_for(method, total).await,
            members: lab.members(members).await,
        });
    }
    (lab, lanes)
}

/// The members told 2xx whose reservation `coupon:issued:{id}` on
/// `primary` does not hold.
fn reservations_lost(seen: &Seen, lane: &Lane, primary: u16) -> BTreeSet<u64> {
    let reserved = members_of(primary, &keys::issued(lane.coupon));
    let told = seen
        .told_success
        .get(lane.method)
        .cloned()
        .unwrap_or_default();
    told.difference(&reserved).copied().collect()
}

const TOTAL: u64 = 150;
const MEMBERS: u64 = 400;
const WORKERS: usize = 8;
/// Served before the fault: the primary fails mid-burst.
const FAULT_AFTER: usize = 120;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_methods_follow_a_sentinel_failover_mid_burst_and_keep_the_total_and_one_per_member() {
    let mut topology = tokio::task::spawn_blocking(Topology::start).await.unwrap();
    let old_primary = topology.primary.port;
    let methods = [
        "REDIS_LUA",
        "REDIS_STREAM_ATOMIC",
        "REDIS_LUA_GATE",
        "REDIS_LUA_WAIT",
    ];
    let components = [
        "redis_lua",
        "redis_stream_atomic",
        "redis_lua_gate",
        "redis_lua_wait",
    ];
    let (lab, lanes) = lab_with_lanes(&topology, &components, &methods, TOTAL, MEMBERS).await;
    let kill = async { topology.primary.kill() };
    let seen = burst(&lab, &lanes, WORKERS, FAULT_AFTER, kill).await;
    assert_served_again_in_time(&seen, &lanes);
    let new_primary = topology.until_promoted(old_primary).await;
    lab.until_nothing_to_settle(Duration::from_secs(30)).await;

    for lane in &lanes {
        let told = seen
            .told_success
            .get(lane.method)
            .cloned()
            .unwrap_or_default();
        let lost = if lane.method == "REDIS_LUA_GATE" {
            // The gate keeps its buyers under keys of its own.
            BTreeSet::new()
        } else {
            reservations_lost(&seen, lane, new_primary)
        };
        if lane.method == "REDIS_STREAM_ATOMIC" {
            every_202_is_issued_or_lost(&lab, lane, &told, &lost).await;
        }
        let issued = rows_keep_the_invariants(&lab, lane.method, lane.coupon, TOTAL).await;
        if lane.method == "REDIS_LUA_WAIT" {
            assert_eq!(
                lost,
                BTreeSet::new(),
                "REDIS_LUA_WAIT: a replica acknowledged every reservation before its 200"
            );
        }
        let remaining = cli(new_primary, &["get", &keys::gate_remaining(lane.coupon)]);
        println!(
            "{} behind Sentinels, primary 127.0.0.1:{old_primary} SIGKILLed after {FAULT_AFTER} served: \
             127.0.0.1:{new_primary} promoted; served again {:?} after the kill; \
             told 2xx {}, rows {} of {TOTAL}, reservations lost {}{}; outcomes {:?}",
            lane.method,
            seen.served_again[lane.method],
            told.len(),
            issued.len(),
            lost.len(),
            if remaining.trim().is_empty() {
                String::new()
            } else {
                format!(", gate remaining {}", remaining.trim())
            },
            seen.outcomes.get(lane.method)
        );
    }
    assert_invariants_hold(&lab.result(lanes[0].coupon).await);
    lab.finish().await;
}

/// Every member told 202 gets a row, unless the promoted primary lost its
/// reservation and entry with it (what the verification reports as lost):
/// waits for the consumers until that holds.
async fn every_202_is_issued_or_lost(
    lab: &TestLab,
    lane: &Lane,
    told: &BTreeSet<u64>,
    lost: &BTreeSet<u64>,
) {
    let started = Instant::now();
    loop {
        let issued: BTreeSet<u64> = lab.issued_members(lane.coupon).await.into_iter().collect();
        let neither: Vec<u64> = told
            .iter()
            .filter(|member| !issued.contains(member) && !lost.contains(member))
            .copied()
            .collect();
        if neither.is_empty() {
            return;
        }
        assert!(
            started.elapsed() < crate::common::DRAIN,
            "{}: told 202, neither issued nor reported lost: {neither:?}",
            lane.method
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A lab whose primary was paused mid-burst and continued once a replica
/// was promoted, the old primary a replica in sync again since, and
/// nothing left to settle.
struct Paused {
    /// Kept: dropping it stops the topology.
    _topology: Topology,
    lab: TestLab,
    lanes: Vec<Lane>,
    seen: Seen,
    old_primary: u16,
    new_primary: u16,
}

/// A topology of its own and a lab serving `components`, a lane per
/// method; the primary is paused after [`FAULT_AFTER`] served and
/// continued once the Sentinels agree on a promoted replica: two primaries
/// for a moment, until they make the old one a replica, which throws away
/// what the lab sent it after it continued.
async fn paused_mid_burst(components: &[&'static str], methods: &[&'static str]) -> Paused {
    let topology = tokio::task::spawn_blocking(Topology::start).await.unwrap();
    let old_primary = topology.primary.port;
    let (lab, lanes) = lab_with_lanes(&topology, components, methods, TOTAL, MEMBERS).await;
    let paused = pid_of(old_primary);
    let pause = async {
        signal(&paused, "STOP");
        topology.until_promoted(old_primary).await;
        signal(&paused, "CONT");
    };
    let seen = burst(&lab, &lanes, WORKERS, FAULT_AFTER, pause).await;
    let new_primary = topology.until_promoted(old_primary).await;
    until_a_replica_in_sync(old_primary).await;
    lab.until_nothing_to_settle(Duration::from_secs(30)).await;
    Paused {
        _topology: topology,
        lab,
        lanes,
        seen,
        old_primary,
        new_primary,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_paused_through_a_failover_leaves_figures_that_match_the_rows_and_the_new_primary()
 {
    let Paused {
        _topology,
        lab,
        lanes,
        seen,
        old_primary,
        new_primary,
    } = paused_mid_burst(
        &["redis_lua", "redis_lua_wait"],
        &["REDIS_LUA", "REDIS_LUA_WAIT"],
    )
    .await;
    assert_served_again_in_time(&seen, &lanes);

    for lane in &lanes {
        let issued = rows_keep_the_invariants(&lab, lane.method, lane.coupon, TOTAL).await;
        let reserved = members_of(new_primary, &keys::issued(lane.coupon));
        let lost = reservations_lost(&seen, lane, new_primary);
        // The lab's result, read through the Sentinels, against the rows
        // and the new primary's set read here.
        let result = lab.result(lane.coupon).await;
        assert_invariants_hold(&result);
        let redis = &result["redis"];
        assert_eq!(
            redis["setSize"],
            json!(reserved.len()),
            "{}: {result}",
            lane.method
        );
        assert_eq!(
            redis["dbOnlyMembers"]["count"],
            json!(issued.difference(&reserved).count()),
            "{}: {result}",
            lane.method
        );
        println!(
            "{} behind Sentinels, primary 127.0.0.1:{old_primary} paused after {FAULT_AFTER} served until \
             127.0.0.1:{new_primary} was promoted, then continued: served again {:?} after the pause; \
             told 2xx {}, rows {} of {TOTAL}, reservations lost {}; outcomes {:?}",
            lane.method,
            seen.served_again[lane.method],
            seen.told_success.get(lane.method).map_or(0, BTreeSet::len),
            issued.len(),
            lost.len(),
            seen.outcomes.get(lane.method)
        );
    }
    lab.finish().await;
}

/// The write-behind set's and the gate's figures on `primary` against the
/// rows: write-behind's members with a row the set lacks; the gate's stock
/// and what the rows leave, and its members with a row whose count it
/// lacks.
struct Rebuilt {
    set_lacks: usize,
    gate_remaining: i64,
    rows_leave: i64,
    gate_lacks: usize,
}

async fn rebuilt(lab: &TestLab, lanes: &[Lane], primary: u16) -> Rebuilt {
    let [write_behind, gate] = lanes else {
        panic!("a write-behind lane and a gate lane")
    };
    let written: BTreeSet<u64> = lab
        .issued_members(write_behind.coupon)
        .await
        .into_iter()
        .collect();
    let reserved = members_of(primary, &keys::issued(write_behind.coupon));
    let sold: BTreeSet<u64> = lab.issued_members(gate.coupon).await.into_iter().collect();
    let buyers: Vec<String> = sold
        .iter()
        .map(|member| format!("{}buyer:{member}", keys::gate(gate.coupon)))
        .collect();
    let mut mget = vec!["mget"];
    mget.extend(buyers.iter().map(String::as_str));
    let counts = if buyers.is_empty() {
        String::new()
    } else {
        cli(primary, &mget)
    };
    let gate_lacks = counts
        .lines()
        .filter(|count| count.trim().parse::<i64>().unwrap_or(0) < 1)
        .count();
    Rebuilt {
        set_lacks: written.difference(&reserved).count(),
        gate_remaining: cli(primary, &["get", &keys::gate_remaining(gate.coupon)])
            .trim()
            .parse()
            .unwrap_or(-1),
        rows_leave: TOTAL as i64 - sold.len() as i64,
        gate_lacks,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_paused_primary_the_lab_rebuilds_write_behind_and_the_gate_from_the_rows() {
    let Paused {
        _topology,
        lab,
        lanes,
        seen,
        old_primary,
        new_primary,
    } = paused_mid_burst(
        &["redis_write_behind", "redis_lua_gate"],
        &["REDIS_WRITE_BEHIND", "REDIS_LUA_GATE"],
    )
    .await;
    // Every 202 loaded: rows are what the rebuild reads.
    let told = seen.told_success["REDIS_WRITE_BEHIND"].len();
    crate::common::until(
        "write-behind's rows are loaded",
        crate::common::DRAIN,
        || async { lab.issue_rows(lanes[0].coupon).await >= told },
    )
    .await;

    // The lab noticed the primary change and had both rebuilt.
    let took = crate::common::until("Redis is rebuilt from the rows", READY_LIMIT, || async {
        let now = rebuilt(&lab, &lanes, new_primary).await;
        now.set_lacks == 0 && now.gate_lacks == 0 && now.gate_remaining == now.rows_leave
    })
    .await;
    let now = rebuilt(&lab, &lanes, new_primary).await;
    let records: Vec<serde_json::Value> =
        cli(new_primary, &["lrange", "couponlab:rebuilds", "0", "-1"])
            .lines()
            .filter_map(|line| serde_json::from_str(line.trim()).ok())
            .collect();
    for lane in &lanes {
        assert!(
            records
                .iter()
                .any(|r| r["couponId"] == json!(lane.coupon) && r["error"].is_null()),
            "{}: no rebuild of coupon {} recorded: {records:?}",
            lane.method,
            lane.coupon
        );
    }

    // Members who never asked: Redis refuses them itself, sold out.
    let extra = lab.members(5).await;
    for lane in &lanes {
        for &member in &extra {
            let reply = lab.issue(lane.coupon, member, lane.method).await;
            assert_eq!(
                (reply.status.as_u16(), outcome(&reply)),
                (409, "SOLD_OUT".to_string()),
                "{}: member {member} after the rebuild: {}",
                lane.method,
                reply.body
            );
        }
        let issued = rows_keep_the_invariants(&lab, lane.method, lane.coupon, TOTAL).await;
        println!(
            "{} behind Sentinels, primary 127.0.0.1:{old_primary} paused after {FAULT_AFTER} served until \
             127.0.0.1:{new_primary} was promoted, then continued: rows {} of {TOTAL}, told 2xx {}; \
             rebuilt {took:?} after the old primary was a replica in sync; rebuilds {:?}",
            lane.method,
            issued.len(),
            seen.told_success.get(lane.method).map_or(0, BTreeSet::len),
            records
                .iter()
                .filter(|r| r["couponId"] == json!(lane.coupon))
                .collect::<Vec<_>>()
        );
    }
    println!(
        "gate remaining {} for {} left by the rows",
        now.gate_remaining, now.rows_leave
    );
    lab.finish().await;
}
