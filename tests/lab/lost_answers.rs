//! When an answer is lost: a server between the lab and MariaDB or Redis
//! (a noxious proxy) cuts the link mid-burst, or between a COMMIT and its
//! answer. A commit that happened is never undone, a reservation nobody can
//! confirm is given back once the database answers, and no session of a
//! lost connection keeps its row locks. A slowed link keeps a batch of
//! stream entries waiting its turn: none is delivered twice meanwhile.

use std::sync::Arc;
use std::time::{Duration, Instant};

use couponlab::runtime::sql::user::strategy_user;
use couponlab_contract::keys;
use couponlab_links::{Link, Links, REDIS_UPSTREAM};
use futures::future::join_all;
use futures::stream::StreamExt;
use serde_json::{Value, json};

use crate::common::{Reply, Setup, TestLab, outcome, until};

/// A lab whose MariaDB (`db`), Redis or broker link runs through `links`, on a
/// Redis database of its own: no other test's stream consumers confirm or
/// dead-letter its entries against their own databases.
pub async fn linked_lab(links: &Arc<Links>, link: Link, components: &[&'static str]) -> TestLab {
    let links = links.clone();
    Setup::with(components)
        .own_redis_db()
        .tune(move |c| match link {
            Link::Database => c.database_url = links.through(&c.database_url).unwrap(),
            Link::Redis => c.redis_url = links.through(&c.redis_url).unwrap(),
            Link::Amqp => {
                let url = &mut c.capabilities.broker.rabbitmq_url;
                *url = links.through(url).unwrap();
            }
            Link::Nats => {
                let url = &mut c.capabilities.broker.nats_url;
                *url = links.through(url).unwrap();
            }
        })
        .start()
        .await
}

pub async fn start_links() -> Arc<Links> {
    let links = tokio::task::spawn_blocking(|| Links::start_to(REDIS_UPSTREAM));
    Arc::new(links.await.unwrap().expect("the links start"))
}

/// Runs a call of the links, which block on a runtime of their own, off
/// the test's runtime.
pub async fn on_links<T: Send + 'static>(
    links: &Arc<Links>,
    work: impl FnOnce(&Links) -> anyhow::Result<T> + Send + 'static,
) -> T {
    let links = links.clone();
    tokio::task::spawn_blocking(move || work(&links))
        .await
        .unwrap()
        .expect("the link does as asked")
}

/// How members send their requests for a coupon.
#[derive(Clone, Copy)]
enum Pace {
    /// This many at a time, each wave once the one before it has all its
    /// answers.
    Waves(usize),
    /// This many in flight, each next one sent as soon as one is answered:
    /// whenever the link is cut, commands are on their way.
    Steady(usize),
}

/// Every one of `members` asks for `coupon` at `pace`; the replies in the
/// members' order.
async fn ask(lab: &TestLab, coupon: u64, members: &[u64], method: &str, pace: Pace) -> Vec<Reply> {
    match pace {
        Pace::Waves(at_once) => {
            let mut replies = Vec::new();
            for wave in members.chunks(at_once) {
                replies.extend(lab.issue_all(coupon, wave, method).await);
            }
            replies
        }
        Pace::Steady(in_flight) => {
            futures::stream::iter(members.iter().map(|&m| lab.issue(coupon, m, method)))
                .buffered(in_flight)
                .collect()
                .await
        }
    }
}

/// Cuts `link` `after` from now and restores it `lasting` later.
async fn cut_for_a_while(links: &Arc<Links>, link: Link, after: Duration, lasting: Duration) {
    tokio::time::sleep(after).await;
    on_links(links, move |links| links.cut(link)).await;
    tokio::time::sleep(lasting).await;
    on_links(links, move |links| links.restore(link)).await;
}

/// A new coupon of `total` for each of `methods`, with its method.
async fn coupons_for(
    lab: &TestLab,
    methods: &[&'static str],
    total: u64,
) -> Vec<(&'static str, u64)> {
    let mut coupons = Vec::new();
    for &method in methods {
        coupons.push((method, lab.coupon_for(method, total).await));
    }
    coupons
}

/// A round of requests across a Redis cut: `members` new members ask for
/// each of `coupons` at `pace` while the Redis link is cut `cut.0` into
/// the round and restored `cut.1` later. Each coupon's replies, in the
/// order of `coupons`, once the server has settled.
async fn across_a_redis_cut(
    lab: &TestLab,
    links: &Arc<Links>,
    coupons: &[(&str, u64)],
    members: u64,
    pace: Pace,
    (cut_after, cut_lasting): (Duration, Duration),
) -> Vec<Vec<Reply>> {
    let members = lab.members(members).await;
    let requests = join_all(
        coupons
            .iter()
            .map(|&(method, coupon)| ask(lab, coupon, &members, method, pace)),
    );
    let cut = cut_for_a_while(links, Link::Redis, cut_after, cut_lasting);
    let (replies, ()) = tokio::join!(requests, cut);
    lab.until_nothing_to_settle(SETTLING).await;
    replies
}

/// How long a test waits for the server to settle what it holds.
const SETTLING: Duration = Duration::from_secs(15);

/// Sessions of the components' database user inside a transaction that
/// began over a second ago: a confirm takes milliseconds, so these hold
/// their locks for a connection nobody has any more.
async fn stale_transactions(lab: &TestLab) -> i64 {
    let user = strategy_user(&lab.lab_id().await);
    lab.number(&format!(
        "SELECT COUNT(*) FROM information_schema.INNODB_TRX t \
         JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id \
         WHERE p.USER = '{user}' AND t.trx_started < NOW() - INTERVAL 1 SECOND"
    ))
    .await
}

/// The gate's stock left, or the reservation set, as members.
async fn redis_figure(lab: &TestLab, coupon: u64, method: &str) -> Value {
    if method == "REDIS_LUA_GATE" {
        let left: Option<i64> = lab
            .redis_query(redis::cmd("GET").arg(keys::gate_remaining(coupon)))
            .await;
        json!(left.unwrap_or_default())
    } else {
        json!(lab.reserved_members(coupon).await)
    }
}

/// What Redis must hold once everything settled: the members with a row,
/// or for the gate the total less the rows.
async fn expected_figure(lab: &TestLab, coupon: u64, method: &str, total: u64) -> Value {
    let rows = lab.issued_members(coupon).await;
    if method == "REDIS_LUA_GATE" {
        json!(total as i64 - rows.len() as i64)
    } else {
        json!(rows)
    }
}

const METHODS: [&str; 3] = ["REDIS_LUA", "REDIS_LUA_GATE", "REDIS_STREAM_ATOMIC"];
const COMPONENTS: [&str; 4] = [
    "redis_lua",
    "redis_lua_gate",
    "redis_stream_atomic",
    "redis_set_only",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_cut_mid_burst_leaves_redis_equal_to_the_rows_and_no_lock_behind() {
    let links = start_links().await;
    let lab = linked_lab(&links, Link::Database, &COMPONENTS).await;
    const TOTAL: u64 = 60;
    for round in 1..=5 {
        let mut coupons = Vec::new();
        for method in METHODS {
            // The burst's coupon, and another one asked at the same time.
            coupons.push((
                method,
                lab.coupon_for(method, TOTAL).await,
                lab.coupon_for(method, TOTAL).await,
            ));
        }
        let members = lab.members(150).await;
        let bursts = join_all(coupons.iter().flat_map(|&(method, first, second)| {
            [first, second].map(|coupon| ask(&lab, coupon, &members, method, Pace::Waves(20)))
        }));
        let cut = async {
            let (after, lasting) = (Duration::from_millis(50), Duration::from_secs(2));
            cut_for_a_while(&links, Link::Database, after, lasting).await;
            Instant::now()
        };
        let (replies, restored) = tokio::join!(bursts, cut);
        let refused_by_the_cut = replies
            .iter()
            .flatten()
            .filter(|reply| reply.status == 503)
            .count();
        assert!(
            refused_by_the_cut > 0,
            "round {round}: the cut fell outside the burst"
        );

        // Serving again: a new member of a new coupon, within 2 s.
        let fresh = lab.coupon_for("REDIS_LUA", TOTAL).await;
        let member = lab.members(1).await[0];
        until(
            "REDIS_LUA serves again after the link came back",
            Duration::from_secs(2),
            || async {
                lab.issue(fresh, member, "REDIS_LUA")
                    .await
                    .status
                    .is_success()
            },
        )
        .await;
        let serving_again = restored.elapsed();
        until(
            "no stale transaction of the components holds its locks",
            Duration::from_secs(2),
            || async { stale_transactions(&lab).await == 0 },
        )
        .await;

        for &(method, first, second) in &coupons {
            for coupon in [first, second] {
                if method == "REDIS_STREAM_ATOMIC" {
                    until("the stream drained", Duration::from_secs(60), || async {
                        lab.result(coupon).await["stream"]["pending"] == json!(0)
                            && lab.result(coupon).await["stream"]["undelivered"] == json!(0)
                    })
                    .await;
                }
            }
        }
        lab.until_nothing_to_settle(SETTLING).await;
        let mut figures = Vec::new();
        for &(method, first, second) in &coupons {
            for coupon in [first, second] {
                let held = redis_figure(&lab, coupon, method).await;
                let rows = expected_figure(&lab, coupon, method, TOTAL).await;
                assert_eq!(
                    held, rows,
                    "round {round}, {method}: Redis against the rows"
                );
                figures.push(format!("{method} rows {}", lab.issue_rows(coupon).await));
            }
        }
        println!(
            "database cut, round {round}: {refused_by_the_cut} answers 503; served again {serving_again:?} after the link came back; {}",
            figures.join(", ")
        );
    }
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cut_mid_burst_strands_no_stock_and_every_coupon_sells_out_exactly() {
    let links = start_links().await;
    let lab = linked_lab(&links, Link::Redis, &COMPONENTS).await;
    const TOTAL: u64 = 40;
    let methods = ["REDIS_LUA", "REDIS_SET_ONLY", "REDIS_LUA_GATE"];
    let cut = (Duration::from_millis(100), Duration::from_secs(1));
    for round in 1..=5 {
        let coupons = coupons_for(&lab, &methods, TOTAL).await;
        across_a_redis_cut(&lab, &links, &coupons, 120, Pace::Waves(30), cut).await;
        for &(method, coupon) in &coupons {
            // Sold out exactly: new members until the coupon refuses one.
            until(
                &format!("{method} sells out"),
                Duration::from_secs(30),
                || async {
                    let member = lab.members(1).await[0];
                    let reply = lab.issue(coupon, member, method).await;
                    outcome(&reply) == "SOLD_OUT"
                },
            )
            .await;
            lab.until_nothing_to_settle(SETTLING).await;
            assert_eq!(
                lab.issue_rows(coupon).await as u64,
                TOTAL,
                "round {round}, {method}: the coupon sold out short: stock stranded"
            );
            let held = redis_figure(&lab, coupon, method).await;
            assert_eq!(
                held,
                expected_figure(&lab, coupon, method, TOTAL).await,
                "round {round}, {method}"
            );
        }
        println!("redis cut, round {round}: every coupon sold out exactly");
    }
    lab.finish().await;
}

/// A 503 that says the outcome is unknown: its write's answer was lost,
/// and the server settles it later.
fn told_unknown(reply: &Reply) -> bool {
    reply.status == 503
        && reply.body["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains("outcome unknown"))
}

/// A write whose answer the cut lost (a broken pipe, a reset, the reply
/// never read) may have reserved: it is told the outcome is unknown and
/// settled from the rows, so no unit is left reserved without its row.
/// A request the cut refused a connection sent nothing: it is told a
/// definite failure, and nothing is kept to settle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cut_mid_burst_settles_every_lost_answer_and_strands_nothing_in_ten_rounds() {
    let links = start_links().await;
    let lab = linked_lab(&links, Link::Redis, &["redis_lua", "redis_set_only"]).await;
    const TOTAL: u64 = 40;
    let methods = ["REDIS_LUA", "REDIS_SET_ONLY"];
    let (mut stranded, mut lost, mut definite) = (Vec::new(), 0, 0);
    let cut = (Duration::from_millis(40), Duration::from_millis(600));
    for round in 1..=10 {
        let coupons = coupons_for(&lab, &methods, TOTAL).await;
        let replies = across_a_redis_cut(&lab, &links, &coupons, 300, Pace::Steady(64), cut).await;
        for (&(method, coupon), replies) in coupons.iter().zip(&replies) {
            assert!(
                replies.iter().any(|reply| reply.status == 503),
                "round {round}, {method}: the cut fell outside the burst"
            );
            let rows = lab.issued_members(coupon).await;
            let left: Vec<u64> = lab
                .reserved_members(coupon)
                .await
                .into_iter()
                .filter(|member| !rows.contains(member))
                .collect();
            stranded.push(format!("round {round} {method}: {left:?}"));
            if method == "REDIS_LUA" {
                lost += replies.iter().filter(|r| told_unknown(r)).count();
                definite += replies
                    .iter()
                    .filter(|r| r.status == 503 && !told_unknown(r))
                    .count();
            }
        }
    }
    println!(
        "redis cuts, REDIS_LUA: {lost} answers lost and settled, {definite} definite failures"
    );
    assert!(
        stranded.iter().all(|round| round.ends_with("[]")),
        "reserved in Redis with no row and nothing left to settle: {stranded:#?}"
    );
    // Else the cuts never caught a script on its way and prove nothing.
    assert!(lost > 0, "no REDIS_LUA answer was lost to a cut");
    // Requests the cut refused a connection sent nothing: nothing to settle.
    assert!(
        definite > 0,
        "every REDIS_LUA failure was told its outcome is unknown, those that sent nothing too"
    );
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_is_lost_is_settled_from_the_database_as_issued() {
    let links = start_links().await;
    let lab = linked_lab(&links, Link::Database, &["redis_lua"]).await;
    commit_answer_lost_then_settled(&links, lab).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_whose_answer_is_lost_on_postgres_is_settled_from_the_rows_as_issued() {
    let links =
        tokio::task::spawn_blocking(|| Links::start_to_database(REDIS_UPSTREAM, "127.0.0.1:5432"));
    let links = Arc::new(links.await.unwrap().expect("the links start"));
    let through = links.clone();
    let lab = Setup::with(&["redis_lua"])
        .on_postgres()
        .own_redis_db()
        .tune(move |c| c.database_url = through.through(&c.database_url).unwrap())
        .start()
        .await;
    commit_answer_lost_then_settled(&links, lab).await;
}

/// REDIS_LUA's COMMIT reaches the server, and the link is cut before its
/// answer comes back: the request is answered 503 outcome unknown, its
/// reservation kept, and settled from the rows as issued.
async fn commit_answer_lost_then_settled(links: &Arc<Links>, lab: TestLab) {
    let (members, coupon) = lab.members_and_coupon(2, 10).await;
    // A connection in the pool before the answers slow down.
    lab.issue(coupon, members[0], "REDIS_LUA").await.expect_ok();

    on_links(links, |links| links.add_latency(Link::Database, 400)).await;
    let asking = lab.issue(coupon, members[1], "REDIS_LUA");
    let cutting = async {
        // The row is committed on the server; its answer is on its way.
        until(
            "the COMMIT reached the server",
            Duration::from_secs(10),
            || async { lab.issued_members(coupon).await.contains(&members[1]) },
        )
        .await;
        on_links(links, |links| links.cut(Link::Database)).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        on_links(links, |links| links.restore(Link::Database)).await;
        on_links(links, |links| links.remove_latency(Link::Database)).await;
    };
    let (reply, ()) = tokio::join!(asking, cutting);

    let message = reply.fails_as(503, "UNAVAILABLE");
    assert!(message.contains("outcome unknown"), "{message}");
    assert!(
        message.contains("the result shows what it became"),
        "{message}"
    );
    assert_eq!(
        lab.reserved_members(coupon).await,
        members,
        "the reservation stays"
    );
    lab.until_nothing_to_settle(SETTLING).await;
    let result = lab.result(coupon).await;
    assert_eq!(
        result["requests"]["byMethod"]["REDIS_LUA"]["settlements"],
        json!({"asked": 1, "issued": 1, "notIssued": 0}),
        "{result}"
    );
    assert_eq!(
        lab.reserved_members(coupon).await,
        members,
        "settled as issued, it stays"
    );
    lab.finish().await;
}

/// One consumer reads 16 entries at a time and confirms them one after
/// another over a database link slowed to 60 ms a round trip, so the last
/// of a batch waits seconds for its turn, many times the claim limit. The
/// whole batch stays claimed: the claimer, which would dead-letter any
/// entry it claims (`max_deliveries` 1) and remove its reservation, never
/// takes one, and Redis ends equal to the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_waiting_its_turn_on_a_slow_database_stays_claimed_and_is_confirmed_once() {
    let links = start_links().await;
    let through = links.clone();
    let lab = Setup::with(&["redis_stream_atomic"])
        .own_redis_db()
        .tune(move |c| {
            c.database_url = through.through(&c.database_url).unwrap();
            c.consumers.stream_consumers = 1;
            c.consumers.claim_idle_ms = 300;
            c.consumers.claim_interval_ms = 50;
            c.consumers.max_deliveries = 1;
        })
        .start()
        .await;
    const TOTAL: u64 = 40;
    let coupon = lab.coupon_for("REDIS_STREAM_ATOMIC", TOTAL).await;
    // Slowed while every connection is idle: nothing is in flight to lose.
    on_links(&links, |links| links.add_latency(Link::Database, 60)).await;
    let members = lab.members(TOTAL).await;
    let replies = lab.issue_all(coupon, &members, "REDIS_STREAM_ATOMIC").await;
    assert!(
        replies.iter().all(|reply| reply.status == 202),
        "{replies:?}"
    );
    until("the stream drained", Duration::from_secs(60), || async {
        let stream = &lab.result(coupon).await["stream"];
        stream["pending"] == json!(0) && stream["undelivered"] == json!(0)
    })
    .await;
    assert_eq!(lab.result(coupon).await["stream"]["deadLetters"], json!(0));
    assert_eq!(lab.issue_rows(coupon).await, TOTAL as usize);
    assert_eq!(
        json!(lab.reserved_members(coupon).await),
        json!(lab.issued_members(coupon).await)
    );
    on_links(&links, |links| links.remove_latency(Link::Database)).await;
    lab.finish().await;
}
