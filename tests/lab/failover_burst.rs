//! A burst of requests across a Redis failover, shared by the Sentinel and
//! cluster tests: members of several methods' coupons ask at once, each
//! asking again after a 503 (Redis unreachable, its answer lost) as a
//! client would; once enough were served, the fault runs while the burst
//! goes on. What each method was told, and when a request sent after the
//! fault was first served again.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::common::{TestLab, outcome};

/// How long a member may be answered 503 before the test fails: a lab
/// that never follows the failover.
const RETRY_LIMIT: Duration = Duration::from_secs(60);

/// One method's coupon and the members who ask for it.
pub struct Lane {
    pub method: &'static str,
    pub coupon: u64,
    pub members: Vec<u64>,
}

/// What the burst saw.
#[derive(Default)]
pub struct Seen {
    /// Per method, each answer's outcome name and how often.
    pub outcomes: BTreeMap<&'static str, BTreeMap<String, usize>>,
    /// Per method, the members told 200 or 202.
    pub told_success: BTreeMap<&'static str, BTreeSet<u64>>,
    /// Per method, from the fault's start to the first success of a
    /// request sent after it.
    pub served_again: BTreeMap<&'static str, Duration>,
    fault_at: Option<Instant>,
}

/// Runs the burst of `lanes` on `workers` clients, members of every lane
/// in turn; starts `fault` once `fault_after` requests were served.
pub async fn burst(
    lab: &TestLab,
    lanes: &[Lane],
    workers: usize,
    fault_after: usize,
    fault: impl Future<Output = ()>,
) -> Seen {
    let longest = lanes
        .iter()
        .map(|lane| lane.members.len())
        .max()
        .unwrap_or(0);
    let asks: Vec<(&Lane, u64)> = (0..longest)
        .flat_map(|at| {
            lanes
                .iter()
                .filter_map(move |lane| Some((lane, *lane.members.get(at)?)))
        })
        .collect();
    let next = AtomicUsize::new(0);
    let served = AtomicUsize::new(0);
    let seen = Mutex::new(Seen::default());
    let worker = || async {
        while let Some(&(lane, member)) = asks.get(next.fetch_add(1, Ordering::Relaxed)) {
            let first_asked = Instant::now();
            loop {
                let sent = Instant::now();
                let reply = lab.issue(lane.coupon, member, lane.method).await;
                let mut seen = seen.lock().unwrap();
                let outcomes = seen.outcomes.entry(lane.method).or_default();
                *outcomes.entry(outcome(&reply)).or_default() += 1;
                if reply.status.is_success() {
                    served.fetch_add(1, Ordering::Relaxed);
                    seen.told_success
                        .entry(lane.method)
                        .or_default()
                        .insert(member);
                    if let Some(fault_at) = seen.fault_at
                        && sent > fault_at
                    {
                        seen.served_again
                            .entry(lane.method)
                            .or_insert_with(|| fault_at.elapsed());
                    }
                }
                if reply.status != 503 {
                    break;
                }
                drop(seen);
                assert!(
                    first_asked.elapsed() < RETRY_LIMIT,
                    "{} member {member} still answered 503 after {RETRY_LIMIT:?}: {}",
                    lane.method,
                    reply.body
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let faulting = async {
        let started = Instant::now();
        while served.load(Ordering::Relaxed) < fault_after {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the burst served fewer than {fault_after} in a minute"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        seen.lock().unwrap().fault_at = Some(Instant::now());
        fault.await;
    };
    tokio::join!(
        futures::future::join_all((0..workers).map(|_| worker())),
        faulting
    );
    seen.into_inner().unwrap()
}

/// Asserts that the rows of `coupon` keep its total and one per member;
/// the members with a row.
pub async fn rows_keep_the_invariants(
    lab: &TestLab,
    method: &str,
    coupon: u64,
    total: u64,
) -> BTreeSet<u64> {
    let rows = lab.issue_rows(coupon).await as u64;
    let issued: BTreeSet<u64> = lab.issued_members(coupon).await.into_iter().collect();
    assert!(
        rows <= total,
        "{method}: {rows} rows for a total of {total}"
    );
    assert_eq!(issued.len() as u64, rows, "{method}: one coupon per member");
    issued
}

/// The members in a set, as `redis-cli SMEMBERS` on `port` lists them.
pub fn members_of(port: u16, set: &str) -> BTreeSet<u64> {
    crate::redis_server::cli(port, &["smembers", set])
        .lines()
        .filter_map(|line| line.trim().parse().ok())
        .collect()
}
