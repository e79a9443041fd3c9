//! The canary's requests, made through the path of `POST …/issue`
//! ([`crate::issuing`]) but recorded nowhere a user looks: an unknown member, an unknown coupon, a
//! burst of members (some asking twice), then members one at a time until
//! the coupon answers that it is sold out, each followed, for a method that
//! answers 202, by the wait until its consumers confirmed what it accepted.
//! Then what the database holds. It stops asking, and waiting, at its
//! deadline. Redis is asked only for what a 202 left there: a component
//! that never answers 202 and never touches Redis is proved without it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use tokio::task::JoinSet;

use super::scratch::Scratch;
use crate::confirmations;
use crate::db::{on_engine, signed};
use crate::db_target::Pool;
use crate::issuing::{self, Asker};
use crate::lab::Lab;
use crate::outcome::Outcome;
use crate::runtime::bindings::types::IssueRequest;
use crate::runtime::{Strategy, on_node};

/// What the database and the record of 202s hold once the canary's
/// requests are answered and confirmed.
#[derive(Debug, Clone, Default)]
pub struct Truth {
    pub total: u64,
    /// Member → issue rows of the scratch coupon.
    pub rows: BTreeMap<u64, u64>,
    pub unknown_coupon_rows: u64,
    pub unknown_member_rows: u64,
    /// 202s still unconfirmed when the wait for them ended.
    pub pending: u64,
    /// Confirmed 202s by the outcome their confirmation recorded.
    pub confirmed: BTreeMap<String, u64>,
}

/// How often the wait for confirmations looks.
const DRAIN_LOOK: Duration = Duration::from_millis(25);
/// How often the unknown member and the unknown coupon are asked at most.
const PROBE_TRIES: u32 = 3;

/// Which request of the canary this was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    UnknownMember,
    UnknownCoupon,
    Burst,
    UntilSoldOut,
}

/// One request of the canary and what it was told.
#[derive(Debug, Clone)]
pub struct Asked {
    pub part: Part,
    pub coupon: u64,
    pub member: u64,
    pub outcome: Outcome,
    pub detail: Option<String>,
    pub settle_later: bool,
    pub took: Duration,
    /// The node of the database cluster its SQL went to (request *n* to
    /// node *n* mod the cluster's size); `None` off a cluster.
    pub node: Option<usize>,
}

impl Asked {
    pub(super) fn told_success(&self) -> bool {
        matches!(self.outcome, Outcome::Issued | Outcome::Accepted)
    }

    /// The request as a report shows it.
    pub(super) fn example(&self) -> String {
        let detail = self
            .detail
            .as_deref()
            .map(|d| format!(" ({d})"))
            .unwrap_or_default();
        let node = self
            .node
            .map(|node| format!(" through node {}", node + 1))
            .unwrap_or_default();
        format!(
            "member {} on coupon {}{node}: {}{detail}",
            self.member,
            self.coupon,
            self.outcome.name()
        )
    }
}

/// Runs every request of the canary on `scratch` until `deadline`, and
/// reads what they left.
pub async fn run(
    lab: &Lab,
    strategy: &Arc<Strategy>,
    scratch: &Scratch,
    deadline: Instant,
) -> anyhow::Result<(Vec<Asked>, Truth)> {
    if strategy.world.message_handler().is_some() {
        subscribed(lab).await?;
    }
    // Each request is numbered, so that on a cluster request n goes to
    // node n mod its size.
    let mut number = 0;
    let mut next = || {
        number += 1;
        number - 1
    };
    let mut asked = Vec::new();
    for (coupon, member, part) in [
        (scratch.coupon, scratch.unknown_member, Part::UnknownMember),
        (
            scratch.unknown_coupon,
            scratch.members[0],
            Part::UnknownCoupon,
        ),
    ] {
        // Asked again, as a client would, while answered 503: on a Galera
        // node another node's writes (the lab's other hosts' canaries) can
        // abort even this lone request's transaction (1213). Its last
        // answer is judged, so one that is always 503 still fails.
        for tries in 1..=PROBE_TRIES {
            let answer = ask((lab, strategy), coupon, member, (part, next())).await;
            let again = answer.outcome.status() == StatusCode::SERVICE_UNAVAILABLE;
            if !again || tries == PROBE_TRIES {
                asked.push(answer);
                break;
            }
        }
    }

    // Every member once, and the first `total` of them again, interleaved.
    let twice = scratch.members.iter().take(scratch.total as usize);
    let burst: Vec<u64> = scratch
        .members
        .iter()
        .zip(twice.chain(std::iter::repeat(&0)))
        .flat_map(|(once, again)| [*once, *again])
        .filter(|member| *member != 0)
        .collect();
    let mut in_flight = JoinSet::new();
    for member in burst {
        let (lab, strategy, coupon) = (lab.clone(), strategy.clone(), scratch.coupon);
        let part = (Part::Burst, next());
        in_flight.spawn(async move { ask((&lab, &strategy), coupon, member, part).await });
    }
    while let Some(told) = in_flight.join_next().await {
        asked.push(told?);
    }
    let accepted = |asked: &[Asked]| asked.iter().any(|a| a.outcome == Outcome::Accepted);
    let mut pending = drain(lab, scratch.coupon, accepted(&asked), deadline).await?;

    // Members without a coupon, one at a time, until one is told the coupon
    // is sold out (or the canary's time is up: the judge then finds it never
    // said so).
    let holding = rows(lab, scratch.coupon).await?;
    for &member in scratch.members.iter().filter(|m| !holding.contains_key(m)) {
        if Instant::now() >= deadline {
            break;
        }
        let part = (Part::UntilSoldOut, next());
        let told = ask((lab, strategy), scratch.coupon, member, part).await;
        let sold_out = matches!(told.outcome, Outcome::SoldOut | Outcome::SoldOutAtDb);
        asked.push(told);
        pending = drain(lab, scratch.coupon, accepted(&asked), deadline).await?;
        if sold_out {
            break;
        }
    }

    let confirmed = if accepted(&asked) {
        confirmations::summary(lab.redis(), scratch.coupon)
            .await?
            .map(|summary| summary.async_results)
            .unwrap_or_default()
    } else {
        Default::default()
    };
    let count = |statement: &'static str, id: u64| async move {
        on_engine!(lab.db(), statement, |db, sql| {
            sqlx::query_scalar::<_, i64>(sql)
                .bind(signed(id))
                .fetch_one(db)
                .await
        })
    };
    caught_up(lab).await?;
    let truth = Truth {
        total: scratch.total,
        rows: rows(lab, scratch.coupon).await?,
        unknown_coupon_rows: count(
            "SELECT COUNT(*) FROM coupon_issues WHERE coupon_id = ?",
            scratch.unknown_coupon,
        )
        .await? as u64,
        unknown_member_rows: count(
            "SELECT COUNT(*) FROM coupon_issues WHERE member_id = ?",
            scratch.unknown_member,
        )
        .await? as u64,
        pending,
        confirmed,
    };
    Ok((asked, truth))
}

/// One request of `member` for `coupon`, on `strategy`, the canary's
/// `number`th: on a database cluster its SQL goes to node `number` mod the
/// cluster's size, so that what the canary proves holds across the nodes.
async fn ask(
    (lab, strategy): (&Lab, &Arc<Strategy>),
    coupon: u64,
    member: u64,
    (part, number): (Part, usize),
) -> Asked {
    let request = IssueRequest {
        coupon_id: coupon,
        member_id: member,
        duplicate_check: true,
        idempotency_key: None,
        quantity: 1,
    };
    let nodes = lab
        .runtime
        .sql_engine()
        .cluster
        .as_ref()
        .map_or(0, |cluster| cluster.addresses.len());
    let node = (nodes > 1).then(|| number % nodes);
    let issued = issuing::issue(lab, strategy, request, Asker::Canary);
    let ended = match node {
        Some(node) => on_node(node, issued).await,
        None => issued.await,
    };
    let outcome = ended.outcome();
    let mut detail = ended.detail();
    // The canary judges a 202 by its confirmation, which it waits for: one
    // not recorded cannot be judged, and says so.
    if outcome == Outcome::Accepted
        && let Err(err) =
            confirmations::record_accepted(lab.redis(), coupon, member, &strategy.method).await
    {
        detail = Some(format!("the canary could not record its 202: {err}"));
    }
    Asked {
        part,
        coupon,
        member,
        outcome,
        detail,
        settle_later: ended.settle_later(),
        took: ended.took,
        node,
    }
}

/// Waits until every 202 on `coupon` is confirmed, until the canary's
/// `deadline`; answers how many were still pending then (none without a
/// 202: Redis is not asked).
async fn drain(lab: &Lab, coupon: u64, accepted: bool, give_up: Instant) -> anyhow::Result<u64> {
    if !accepted {
        return Ok(0);
    }
    loop {
        let pending = confirmations::summary(lab.redis(), coupon)
            .await?
            .map_or(0, |summary| summary.pending);
        if pending == 0 || Instant::now() >= give_up {
            return Ok(pending);
        }
        tokio::time::sleep(DRAIN_LOOK).await;
    }
}

/// Member → issue rows of `coupon`.
/// On a Galera cluster, waits until the host's node applied every write
/// set the cluster certified before now: one read with `wsrep_sync_wait`,
/// on a connection of its own that is closed after, so the setting stays
/// out of the pool. The canary's requests committed on the other nodes
/// too, and a row not yet applied here would read as a 2xx without its row
/// (once in seven runs of the every-method test on three nodes).
async fn caught_up(lab: &Lab) -> sqlx::Result<()> {
    let (Some(_), Pool::MySql(pool)) = (&lab.runtime.sql_engine().cluster, lab.db()) else {
        return Ok(());
    };
    let mut connection = pool.acquire().await?.detach();
    sqlx::query("SET SESSION wsrep_sync_wait = 1")
        .execute(&mut connection)
        .await?;
    sqlx::query("SELECT COUNT(*) FROM coupon_issues WHERE coupon_id = 0")
        .execute(&mut connection)
        .await?;
    sqlx::Connection::close(connection).await
}

async fn rows(lab: &Lab, coupon: u64) -> sqlx::Result<BTreeMap<u64, u64>> {
    let statement =
        "SELECT member_id, COUNT(*) FROM coupon_issues WHERE coupon_id = ? GROUP BY member_id";
    let rows: Vec<(i64, i64)> = on_engine!(lab.db(), statement, |db, sql| {
        sqlx::query_as(sql).bind(signed(coupon)).fetch_all(db).await
    })?;
    Ok(rows
        .into_iter()
        .map(|(member, n)| (member as u64, n as u64))
        .collect())
}

/// How long a canary of the pub/sub role waits for a subscriber: the
/// subscriber looks for a component to serve every second.
const SUBSCRIBER_WAIT: Duration = Duration::from_secs(5);

/// Waits until the pub/sub channel has a subscriber: a message published
/// before is lost, which is the method's lesson, not the component's fault.
async fn subscribed(lab: &Lab) -> anyhow::Result<()> {
    let give_up = Instant::now() + SUBSCRIBER_WAIT;
    let channel = lab.redis_target.requests_channel();
    loop {
        let (_, subscribers): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query_async(&mut lab.redis().clone())
            .await?;
        if subscribers > 0 {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < give_up,
            "no subscriber listened on {channel} within {SUBSCRIBER_WAIT:?}"
        );
        tokio::time::sleep(DRAIN_LOOK).await;
    }
}

/// The coupon a component of the pub/sub role is put on trial on while it
/// waits for the subscriber to listen, before it serves without a canary
/// (off, or passed before): no coupon has it, so nothing reaches it there.
const AWAITING_THE_SUBSCRIBER: u64 = 0;

/// When `strategy` handles pub/sub messages, makes the subscriber listen
/// for it (it listens while a component of the role is on trial) and
/// waits until it does, at most [`SUBSCRIBER_WAIT`]; the caller then
/// publishes it and calls [`no_longer_subscribed_for`].
pub async fn until_subscribed_for(lab: &Lab, strategy: &Arc<Strategy>) {
    if strategy.world.message_handler().is_none() {
        return;
    }
    lab.registry
        .trials
        .begin(&[AWAITING_THE_SUBSCRIBER], strategy);
    if let Err(err) = subscribed(lab).await {
        tracing::warn!(method = %strategy.method, error = %err, "serving a pub/sub component before its subscriber listens");
    }
}

/// Ends the wait [`until_subscribed_for`] began for `strategy`, if any.
pub fn no_longer_subscribed_for(lab: &Lab, strategy: &Arc<Strategy>) {
    if strategy.world.message_handler().is_some() {
        lab.registry.trials.end(&[AWAITING_THE_SUBSCRIBER]);
    }
}
