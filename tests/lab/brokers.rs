//! The broker methods, against this machine's RabbitMQ and NATS: 202 only
//! once the broker confirmed the message, each message confirmed once by
//! the host's consumers, the dead letters given back, and what a broker
//! restarted or cut mid-burst leaves behind.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream;
use couponlab::config::{CanaryMode, Config};
use couponlab::runtime::broker::message::{self, Names};
use couponlab_links::{Link, Links};
use lapin::BasicProperties;
use lapin::options::{
    BasicPublishOptions, ExchangeDeleteOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use serde_json::{Value, json};

use crate::common::{
    DRAIN, Reply, Setup, TestLab, assert_accepts_exactly, free_port, hold_coupon_row, statuses,
    until,
};
use crate::lost_answers::{linked_lab, on_links, start_links};

const COMPONENTS: [&str; 2] = ["redis_lua_rabbitmq", "redis_lua_jetstream"];
const METHODS: [&str; 2] = ["REDIS_LUA_RABBITMQ", "REDIS_LUA_JETSTREAM"];
const RABBITMQ: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const NATS: &str = "nats://127.0.0.1:4222";

/// The lab's queues and streams, named as its server names them.
async fn names(lab: &TestLab) -> Names {
    Names::for_lab(&lab.db_name, &lab.lab_id().await)
}

/// A channel on this machine's RabbitMQ, with its connection.
async fn rabbitmq() -> (lapin::Connection, lapin::Channel) {
    let connection = lapin::Connection::connect(RABBITMQ, lapin::ConnectionProperties::default())
        .await
        .expect("RabbitMQ answers");
    let channel = connection.create_channel().await.unwrap();
    (connection, channel)
}

/// Messages in the lab's RabbitMQ dead-letter queue, kept for people.
async fn rabbitmq_dead_letters(lab: &TestLab) -> u32 {
    let (_connection, channel) = rabbitmq().await;
    let queue = names(lab).await.dead_queue;
    match channel
        .queue_declare(queue.as_str().into(), passive(), FieldTable::default())
        .await
    {
        Ok(queue) => queue.message_count(),
        Err(_) => 0,
    }
}

/// Messages in the lab's JetStream dead-letter stream.
async fn jetstream_dead_letters(lab: &TestLab, nats: &str) -> u64 {
    let context = jetstream::new(async_nats::connect(nats).await.expect("NATS answers"));
    match context.get_stream(names(lab).await.dead_stream).await {
        Ok(mut stream) => stream.info().await.unwrap().state.messages,
        Err(_) => 0,
    }
}

/// Deletes the lab's queues, exchange and streams, then finishes the lab.
async fn finish(lab: TestLab, nats: &str) {
    let names = names(&lab).await;
    lab.finish().await;
    let (_connection, channel) = rabbitmq().await;
    for queue in [&names.queue, &names.dead_queue, &names.dead_to_compensate] {
        let _ = channel
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    let _ = channel
        .exchange_delete(
            names.dead_exchange.as_str().into(),
            ExchangeDeleteOptions::default(),
        )
        .await;
    if let Ok(client) = async_nats::connect(nats).await {
        let context = jetstream::new(client);
        for stream in [&names.stream, &names.dead_stream] {
            let _ = context.delete_stream(stream).await;
        }
    }
}

/// Asserts what every broker test ends with: each 202 has its row, no row
/// is without a 202 or an answer whose outcome was unknown, and Redis
/// holds exactly the members with a row.
async fn assert_nothing_lost(lab: &TestLab, coupon: u64, members: &[u64], replies: &[Reply]) {
    let rows = lab.issued_members(coupon).await;
    let answered = |status: u16| {
        let picked = members.iter().zip(replies);
        let mut picked: Vec<u64> = picked
            .filter(|(_, reply)| reply.status == status)
            .map(|(member, _)| *member)
            .collect();
        picked.sort_unstable();
        picked
    };
    let accepted = answered(202);
    let unknown: Vec<u64> = members
        .iter()
        .zip(replies)
        .filter(|(_, reply)| reply.status == 503)
        // The host's words for every answer it settles later: the
        // broker's lost confirm, a Redis answer lost on a cut link.
        .filter(|(_, reply)| {
            let message = reply.fails_with(503);
            message.contains("the result shows what it became once settled")
        })
        .map(|(member, _)| *member)
        .collect();
    for member in &accepted {
        assert!(rows.contains(member), "{member} got 202 and has no row");
    }
    for member in &rows {
        assert!(
            accepted.contains(member) || unknown.contains(member),
            "{member} has a row, and neither a 202 nor an unknown outcome"
        );
    }
    assert_eq!(
        lab.reserved_members(coupon).await,
        rows,
        "Redis equals the rows"
    );
}

/// 400 members ask at once for a coupon of 80: exactly 80 answered 202,
/// each confirmed once (all `ISSUED`, none `DUPLICATE`), and nothing lost.
async fn sells_exactly_80_of_400(lab: &TestLab, method: &str) -> u64 {
    let (members, coupon) = lab.members_and_coupon(400, 80).await;
    let replies = lab.issue_all(coupon, &members, method).await;
    assert_accepts_exactly(&replies, 80, method);
    let result = lab.drained(coupon, 80).await;
    assert_eq!(
        result["asyncResults"],
        json!({ "ISSUED": 80 }),
        "{method}: {result}"
    );
    assert_eq!(result["issueRows"], json!(80), "{method}");
    assert_eq!(result["distinctMembers"], json!(80), "{method}");
    assert_eq!(result["issuedCount"], json!(80), "{method}");
    assert_nothing_lost(lab, coupon, &members, &replies).await;
    coupon
}

/// One 202's trace of `coupon`: the reservation, the publish the broker
/// confirmed, and, linked, the confirmation its consumer ran here.
async fn a_202_links_its_confirmation(lab: &TestLab, coupon: u64) {
    let listed = lab
        .get(&format!(
            "/lab/coupons/{coupon}/traces?outcome=ACCEPTED&limit=1"
        ))
        .await;
    let accepted = &listed.expect_ok()["traces"][0];
    let ops = |trace: &Value| -> Vec<String> {
        let calls = trace["calls"].as_array().cloned().unwrap_or_default();
        let op = |call: &Value| call["op"].as_str().unwrap_or_default().to_string();
        calls.iter().map(op).collect()
    };
    assert_eq!(ops(accepted), ["EVALSHA", "PUBLISH"], "{accepted:#}");
    let confirmation = &accepted["confirmation"];
    assert_eq!(confirmation["outcome"], "ISSUED", "{accepted:#}");
    assert_eq!(confirmation["memberId"], accepted["memberId"]);
    assert!(
        ops(confirmation).contains(&"COMMIT".to_string()),
        "{confirmation:#}"
    );
}

/// Messages of `broker` this lab's own server acked.
async fn acked_here(lab: &TestLab, broker: &str) -> u64 {
    counted_here(lab, broker, "acked").await
}

/// Consumers on the lab's RabbitMQ queue now.
async fn queue_consumers(lab: &TestLab) -> u32 {
    let (_connection, channel) = rabbitmq().await;
    let queue = names(lab).await.queue;
    match channel
        .queue_declare(queue.as_str().into(), passive(), FieldTable::default())
        .await
    {
        Ok(queue) => queue.consumer_count(),
        Err(_) => 0,
    }
}

fn passive() -> QueueDeclareOptions {
    QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_broker_method_accepts_exactly_the_total_and_confirms_it_once() {
    let lab = Setup::with(&COMPONENTS).start().await;
    for method in METHODS {
        let coupon = sells_exactly_80_of_400(&lab, method).await;
        a_202_links_its_confirmation(&lab, coupon).await;
    }
    for broker in ["rabbitmq", "jetstream"] {
        assert_eq!(acked_here(&lab, broker).await, 80, "{broker}");
    }
    finish(lab, NATS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_whose_confirm_always_fails_is_dead_lettered_and_its_reservation_given_back() {
    let lab = Setup::with(&COMPONENTS)
        .tune(|c| c.capabilities.sql.lock_wait_timeout_s = 1)
        .start()
        .await;
    for method in METHODS {
        let (members, coupon) = lab.members_and_coupon(1, 5).await;
        // Every confirm waits out the coupon row's lock and fails.
        let blocker = hold_coupon_row(&lab, coupon).await;
        lab.issue(coupon, members[0], method).await.expect_ok();
        // Drained once the dead letter's reservation was given back.
        let result = lab.drained(coupon, 1).await;
        blocker.rollback().await.unwrap();
        assert_eq!(
            result["asyncResults"],
            json!({ "UNAVAILABLE": 1 }),
            "{method}: {result}"
        );
        assert!(lab.reserved_members(coupon).await.is_empty(), "{method}");
        assert!(lab.issued_members(coupon).await.is_empty(), "{method}");
        // The result counts the failed deliveries and the dead letter (the
        // latter once the consumer has acked it, just after the outcome).
        let events = dead_lettered(&lab, coupon).await;
        assert!(
            events["redelivered"].as_u64() >= Some(1),
            "{method}: {events}"
        );
    }
    assert_eq!(rabbitmq_dead_letters(&lab).await, 1);
    assert_eq!(jetstream_dead_letters(&lab, NATS).await, 1);
    finish(lab, NATS).await;
}

/// The coupon's broker events once they count its dead letter.
async fn dead_lettered(lab: &TestLab, coupon: u64) -> Value {
    let started = std::time::Instant::now();
    loop {
        let events = lab.result(coupon).await["brokerEvents"].clone();
        if events["deadLettered"] == json!(1) {
            return events;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no dead letter counted: {events}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_broker_the_lab_serves_the_rest_and_these_answer_503_with_the_reason() {
    let closed = format!("127.0.0.1:{}", free_port());
    let (amqp, nats) = (format!("amqp://{closed}"), format!("nats://{closed}"));
    let lab = Setup::with(&["redis_lua", "redis_lua_rabbitmq", "redis_lua_jetstream"])
        .tune(move |c| {
            c.capabilities.broker.rabbitmq_url = amqp;
            c.capabilities.broker.nats_url = nats;
        })
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(3, 5).await;
    for (member, method) in members.iter().zip(METHODS) {
        let reply = lab.issue(coupon, *member, method).await;
        let message = reply.fails_as(503, "UNAVAILABLE");
        assert!(message.contains("the broker did not take"), "{message}");
    }
    assert!(lab.reserved_members(coupon).await.is_empty());
    lab.issue(coupon, members[2], "REDIS_LUA").await.expect_ok();
    assert_eq!(lab.issued_members(coupon).await, vec![members[2]]);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hosts_consuming_the_same_queue_and_stream_confirm_each_message_once() {
    let lab = Setup::with(&COMPONENTS).start().await;
    let _second = lab.consumer_process("brokers", &[]);
    until("both hosts consume the queue", DRAIN, || async {
        queue_consumers(&lab).await == 2
    })
    .await;
    for method in METHODS {
        sells_exactly_80_of_400(&lab, method).await;
    }
    // Each message once (no DUPLICATE above), and the queue's shared: this
    // host acked some of RabbitMQ's, the other host the rest.
    let here = acked_here(&lab, "rabbitmq").await;
    assert!((1..80).contains(&here), "this host acked {here} of 80");
    finish(lab, NATS).await;
}

/// A NATS server of the test's own, with JetStream on a store of its own.
struct OwnNats {
    port: u16,
    store: std::path::PathBuf,
    process: Option<tokio::process::Child>,
}

impl OwnNats {
    fn start() -> OwnNats {
        let port = free_port();
        let store = std::env::temp_dir().join(format!("couponlab-nats-{port}"));
        let mut nats = OwnNats {
            port,
            store,
            process: None,
        };
        nats.launch();
        nats
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn launch(&mut self) {
        let child = tokio::process::Command::new("nats-server")
            .args([
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-sd",
            ])
            .arg(&self.store)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("nats-server starts");
        self.process = Some(child);
    }

    async fn answering(&self) {
        until("NATS answers", Duration::from_secs(10), || async {
            async_nats::connect(self.url()).await.is_ok()
        })
        .await;
    }

    /// Kills the server (SIGKILL) and starts it again on the same store.
    async fn restart(&mut self, down_for: Duration) {
        if let Some(mut process) = self.process.take() {
            process.kill().await.unwrap();
        }
        tokio::time::sleep(down_for).await;
        self.launch();
        self.answering().await;
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// Ten of `members` ask at once every 50 ms, two seconds for 400.
const TEN_EVERY_50_MS: (usize, Duration) = (10, Duration::from_millis(50));

/// Once every 202 has its outcome and every unknown outcome is settled:
/// nothing lost (see [`assert_nothing_lost`]), and never more than the
/// total.
async fn nothing_lost_once_settled(lab: &TestLab, coupon: u64, members: &[u64], replies: &[Reply]) {
    let accepted = replies.iter().filter(|r| r.status == 202).count();
    every_202_has_its_outcome(lab, coupon, accepted as u64).await;
    lab.until_nothing_to_settle(DRAIN).await;
    assert_nothing_lost(lab, coupon, members, replies).await;
    let result = lab.result(coupon).await;
    assert!(lab.issued_members(coupon).await.len() <= 300, "{result}");
}

/// Waits until the result holds an outcome for each of the `accepted`
/// 202s and none pending. Counted by outcomes, not by the `accepted`
/// record: with Redis cut, a 202 can be answered whose acceptance could
/// not be written down, while its message still carries it to its row.
async fn every_202_has_its_outcome(lab: &TestLab, coupon: u64, accepted: u64) {
    until("every 202 has its outcome", DRAIN, || async {
        let result = lab.result(coupon).await;
        let outcomes = result["asyncResults"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let recorded: u64 = outcomes.values().filter_map(Value::as_u64).sum();
        recorded >= accepted && result["pending"] == json!(0)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nats_server_killed_and_started_again_mid_burst_loses_nothing_acknowledged() {
    let mut nats = OwnNats::start();
    nats.answering().await;
    let url = nats.url();
    let lab = Setup::with(&["redis_lua_jetstream"])
        .tune(move |c| c.capabilities.broker.nats_url = url)
        .start()
        .await;
    // Stock for most of them: the fault meets requests still to be sold.
    let (members, coupon) = lab.members_and_coupon(400, 300).await;
    let restarting = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        nats.restart(Duration::from_millis(500)).await;
    };
    let ((replies, asked_for), ()) = tokio::join!(
        lab.issue_paced(coupon, &members, "REDIS_LUA_JETSTREAM", TEN_EVERY_50_MS),
        restarting
    );
    eprintln!("answers across the NATS restart: {:?}", statuses(&replies));
    // Publishes the client held while the server was down may be confirmed
    // once it is back, so the restart need not show as 503s; it must fall
    // inside the burst.
    assert!(asked_for > Duration::from_secs(1), "{asked_for:?}");
    nothing_lost_once_settled(&lab, coupon, &members, &replies).await;
    finish(lab, &nats.url()).await;
}

/// Half a second into a paced burst, `link` cut for a second.
async fn cut_mid_burst(links: &Arc<Links>, link: Link) {
    tokio::time::sleep(Duration::from_millis(500)).await;
    on_links(links, move |links| links.cut(link)).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    on_links(links, move |links| links.restore(link)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_amqp_link_cut_for_a_second_mid_burst_loses_nothing_acknowledged() {
    let links = start_links().await;
    let lab = linked_lab(&links, Link::Amqp, &["redis_lua_rabbitmq"]).await;
    // Stock for most of them: the fault meets requests still to be sold.
    let (members, coupon) = lab.members_and_coupon(400, 300).await;
    let ((replies, _), ()) = tokio::join!(
        lab.issue_paced(coupon, &members, "REDIS_LUA_RABBITMQ", TEN_EVERY_50_MS),
        cut_mid_burst(&links, Link::Amqp)
    );
    let counts = statuses(&replies);
    eprintln!("answers across the AMQP cut: {counts:?}");
    assert!(counts.get(&503).is_some_and(|n| *n > 0), "{counts:?}");
    nothing_lost_once_settled(&lab, coupon, &members, &replies).await;
    finish(lab, NATS).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_link_cut_mid_burst_leaves_every_202_with_its_outcome() {
    let links = start_links().await;
    let lab = linked_lab(&links, Link::Redis, &COMPONENTS).await;
    for method in METHODS {
        // Stock for most of them: the fault meets confirmations under way,
        // whose outcomes cannot be recorded while Redis is away: the
        // message must come back rather than be acked with no outcome
        // (the drain below would wait for it for ever).
        let (members, coupon) = lab.members_and_coupon(400, 300).await;
        let ((replies, _), ()) = tokio::join!(
            lab.issue_paced(coupon, &members, method, TEN_EVERY_50_MS),
            cut_mid_burst(&links, Link::Redis)
        );
        let counts = statuses(&replies);
        eprintln!("{method}: answers across the Redis cut: {counts:?}");
        assert!(counts.get(&503).is_some_and(|n| *n > 0), "{counts:?}");
        nothing_lost_once_settled(&lab, coupon, &members, &replies).await;
        // What the consumers sent back while Redis was away is counted in
        // the coupon's result once it is back, as in /metrics.
        let broker = if method == METHODS[0] {
            "rabbitmq"
        } else {
            "jetstream"
        };
        let redelivered = counted_here(&lab, broker, "redelivered").await;
        until("every redelivery is in the result", DRAIN, || async {
            let result = lab.result(coupon).await;
            result["brokerEvents"]["redelivered"].as_u64().unwrap_or(0) == redelivered
        })
        .await;
        eprintln!("{method}: {redelivered} redelivered across the Redis cut");
    }
    finish(lab, NATS).await;
}

/// Messages of `broker` this lab's own server counted as `event`.
async fn counted_here(lab: &TestLab, broker: &str, event: &str) -> u64 {
    let metrics = lab.get_text("/metrics").await;
    let name = format!("couponlab_broker_messages_total{{broker=\"{broker}\",event=\"{event}\"}} ");
    let line = metrics.lines().find_map(|line| line.strip_prefix(&name));
    line.map_or(0, |count| count.parse().unwrap())
}

/// Whether `method` serves on `lab`, proved by its canary.
fn proved_by_its_canary(strategies: &Value, method: &str) -> bool {
    let served = strategies["strategies"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    served
        .iter()
        .any(|s| s["method"] == method && s["canary"]["passed"] == json!(true))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_labs_whose_databases_share_a_name_on_one_broker_each_confirm_only_their_own() {
    // The natural way to try the second engine: the same database name on
    // MariaDB and on PostgreSQL, each lab on a Redis database of its own,
    // both on this machine's one RabbitMQ and one NATS.
    let canary = |config: &mut Config| config.canary = CanaryMode::Changed;
    let mariadb = Setup::with(&COMPONENTS)
        .own_redis_db()
        .tune(canary)
        .start()
        .await;
    let postgres = Setup::with(&COMPONENTS)
        .on_postgres()
        .database_named(&mariadb.db_name)
        .own_redis_db()
        .tune(canary)
        .start()
        .await;
    assert_ne!(mariadb.lab_id().await, postgres.lab_id().await);
    let (proved_mariadb, proved_postgres) = tokio::join!(mariadb.proved(), postgres.proved());
    for (lab, strategies) in [("mariadb", proved_mariadb), ("postgres", proved_postgres)] {
        for method in METHODS {
            assert!(
                proved_by_its_canary(&strategies, method),
                "{method} on {lab}: {strategies:#}"
            );
        }
    }
    // Both labs sell at once: each one's 202s become its own rows, and
    // each message is confirmed by its own lab's consumers.
    for method in METHODS {
        tokio::join!(
            sells_exactly_80_of_400(&mariadb, method),
            sells_exactly_80_of_400(&postgres, method)
        );
    }
    for lab in [&mariadb, &postgres] {
        for broker in ["rabbitmq", "jetstream"] {
            assert_eq!(acked_here(lab, broker).await, 80, "{broker}");
        }
    }
    // A message of the PostgreSQL lab put in the MariaDB lab's queue is
    // dropped there unread, and counted.
    let coupon = mariadb.coupon(1).await;
    let member = mariadb.members(1).await[0];
    let fields = [
        ("memberId".to_string(), member.to_string()),
        ("couponId".to_string(), coupon.to_string()),
    ];
    let body = message::encode(METHODS[0], &postgres.lab_id().await, &fields).unwrap();
    let (_connection, channel) = rabbitmq().await;
    let queue = names(&mariadb).await.queue;
    channel
        .basic_publish(
            "".into(),
            queue.as_str().into(),
            BasicPublishOptions::default(),
            &body,
            BasicProperties::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    until("the other lab's message is dropped", DRAIN, || async {
        counted_here(&mariadb, "rabbitmq", "foreign").await == 1
    })
    .await;
    assert_eq!(mariadb.issue_rows(coupon).await, 0);
    finish(postgres, NATS).await;
    finish(mariadb, NATS).await;
}
