//! The lab behind Redis Sentinels: a primary of the test's own with two
//! replicas and three Sentinels (`redis-server --sentinel`), all on free
//! ports, failing over fast (`down-after-milliseconds` 1000, a failover
//! timeout of 3 s). The primary is SIGKILLed mid-burst; the lab finds the
//! promoted replica through the Sentinels and serves again.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use couponlab_contract::keys;

use crate::common::{Setup, assert_invariants_hold, outcome};
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
}

/// What the burst saw: each answer's outcome name, and when the first
/// request sent after the kill was served.
#[derive(Default)]
struct Seen {
    outcomes: std::collections::BTreeMap<String, usize>,
    killed_at: Option<Instant>,
    served_again: Option<Duration>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lua_follows_a_sentinel_failover_mid_burst_and_keeps_the_total_and_one_per_member() {
    const TOTAL: u64 = 150;
    const MEMBERS: u64 = 400;
    const WORKERS: usize = 8;
    /// Served before the kill: the primary dies mid-burst.
    const KILL_AFTER: usize = 40;
    let mut topology = tokio::task::spawn_blocking(Topology::start).await.unwrap();
    let old_primary = topology.primary.port;
    let lab = Setup::with(&["redis_lua"])
        .redis_url(topology.url())
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(MEMBERS, TOTAL).await;

    let next = AtomicUsize::new(0);
    let served = AtomicUsize::new(0);
    let seen = Mutex::new(Seen::default());
    // Each worker asks for one member after another; a member answered
    // 503 (Redis unreachable, or its answer lost) asks again, as a client
    // would, until it is answered otherwise.
    let worker = || async {
        while let Some(&member) = members.get(next.fetch_add(1, Ordering::Relaxed)) {
            let first_asked = Instant::now();
            loop {
                let sent = Instant::now();
                let reply = lab.issue(coupon, member, "REDIS_LUA").await;
                let mut seen = seen.lock().unwrap();
                *seen.outcomes.entry(outcome(&reply)).or_default() += 1;
                if reply.status.is_success() {
                    served.fetch_add(1, Ordering::Relaxed);
                    if let Some(killed) = seen.killed_at
                        && sent > killed
                        && seen.served_again.is_none()
                    {
                        seen.served_again = Some(killed.elapsed());
                    }
                }
                if reply.status != 503 {
                    break;
                }
                drop(seen);
                assert!(
                    first_asked.elapsed() < READY_LIMIT,
                    "member {member} still answered 503 after {READY_LIMIT:?}: {}",
                    reply.body
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let killer = async {
        let started = Instant::now();
        while served.load(Ordering::Relaxed) < KILL_AFTER {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the burst served fewer than {KILL_AFTER} in a minute"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        topology.primary.kill();
        seen.lock().unwrap().killed_at = Some(Instant::now());
    };
    tokio::join!(
        futures::future::join_all((0..WORKERS).map(|_| worker())),
        killer
    );

    let seen = seen.into_inner().unwrap();
    let served_again = seen
        .served_again
        .expect("a request sent after the kill was served");
    let bound = DOWN_AFTER + FAILOVER_TIMEOUT + Duration::from_secs(5);
    assert!(
        served_again < bound,
        "served again {served_again:?} after the kill, over {bound:?}"
    );
    // The Sentinel that led the failover tells the others within a hello
    // period or two.
    let started = Instant::now();
    let new_primary = loop {
        if let Some(promoted) = topology.promoted(old_primary) {
            break promoted;
        }
        assert!(
            started.elapsed() < READY_LIMIT,
            "the Sentinels do not agree on a promoted replica"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // What the lab owes the members: what it could not tell settled.
    lab.until_nothing_to_settle(Duration::from_secs(30)).await;
    let rows = lab.issue_rows(coupon).await as u64;
    let distinct = lab
        .number_of(
            "SELECT COUNT(DISTINCT member_id) FROM coupon_issues WHERE coupon_id = ?",
            &[coupon],
        )
        .await as u64;
    assert!(rows <= TOTAL, "{rows} rows for a total of {TOTAL}");
    assert_eq!(distinct, rows, "one coupon per member");
    assert_invariants_hold(&lab.result(coupon).await);

    // Members with a row the promoted primary's set does not hold: their
    // reservations went with the old primary (asynchronous replication).
    let reserved: std::collections::BTreeSet<u64> =
        cli(new_primary, &["smembers", &keys::issued(coupon)])
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect();
    let lost = lab
        .issued_members(coupon)
        .await
        .iter()
        .filter(|member| !reserved.contains(member))
        .count();
    println!(
        "REDIS_LUA behind Sentinels, primary 127.0.0.1:{old_primary} SIGKILLed after {KILL_AFTER} served: \
         127.0.0.1:{new_primary} promoted; served again {served_again:?} after the kill; \
         {rows} rows of {TOTAL}; reservations lost {lost}; outcomes {:?}",
        seen.outcomes
    );
    lab.finish().await;
}
