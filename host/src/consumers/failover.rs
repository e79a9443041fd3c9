//! After a failover, Redis is rebuilt from the rows where it was the truth:
//! the write-behind methods' reservation sets and REDIS_LUA_GATE's stock.
//! A promoted replica may lack the old primary's last writes (replication
//! is asynchronous), and a paused primary may take writes it throws away
//! once demoted: Redis would then sell again units the rows hold.
//!
//! Behind Sentinels, the lab's Redis target counts each time one of its
//! connections is given another primary. This role waits for such a
//! change, then for the primary to stay put for [`QUIET`] (a pause moves
//! connections twice: to the promoted replica, and off the old primary
//! once it is demoted), and asks the components to rebuild every coupon
//! whose keys they keep on the new primary (one EXISTS each, as the stream
//! roles look for streams): write-behind's `reconcile` puts the members
//! with rows back into the set, the gate's `reconcile` sets its stock from
//! the rows when they disagree. The host decides nothing about a coupon.
//! What each answered is logged and kept in the contract's
//! [`REBUILDS_KEY`]; a coupon whose rebuild failed (the new primary not
//! answering yet) is asked again, [`ATTEMPTS`] times at most.

use std::sync::Arc;
use std::time::Duration;

use couponlab_contract::WRITE_BEHIND_STREAM;
use couponlab_contract::keys;
use couponlab_contract::results::{REBUILDS_KEEP, REBUILDS_KEY, Rebuild};
use redis::RedisResult;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::pause_unless_cancelled;
use crate::announcements::now_ms;
use crate::db;
use crate::lab::Lab;
use crate::runtime::{Strategy, World};

/// How long the primary must stay put before the rebuild starts.
const QUIET: Duration = Duration::from_secs(1);
/// Rounds of rebuilding the coupons that failed, a second apart.
const ATTEMPTS: u32 = 10;
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// EXISTS sent per round trip when looking for the coupons to rebuild.
const LOOK_PAGE: usize = 500;

/// The components whose truth Redis keeps, and the key that says a coupon
/// has any there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keeper {
    WriteBehind,
    Gate,
}

impl Keeper {
    const ALL: [Keeper; 2] = [Keeper::WriteBehind, Keeper::Gate];

    fn world(self) -> &'static str {
        match self {
            Keeper::WriteBehind => World::WRITE_BEHIND_ISSUER,
            Keeper::Gate => World::GATE_ISSUER,
        }
    }

    fn kept_at(self, coupon: u64) -> String {
        match self {
            Keeper::WriteBehind => WRITE_BEHIND_STREAM.key(coupon),
            Keeper::Gate => keys::gate_remaining(coupon),
        }
    }
}

/// Runs the role behind Sentinels; `None` elsewhere (a server or a cluster
/// is not followed across failovers by address).
pub fn spawn(lab: &Lab, cancel: CancellationToken) -> Option<JoinHandle<()>> {
    let changes = lab.redis_target.primary_changes()?;
    let lab = lab.clone();
    Some(tokio::spawn(async move {
        watch_failovers(&lab, &cancel, changes).await
    }))
}

async fn watch_failovers(lab: &Lab, cancel: &CancellationToken, mut changes: watch::Receiver<u64>) {
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                changed = tokio::time::timeout(QUIET, changes.changed()) => match changed {
                    Err(_quiet) => break,
                    Ok(Err(_closed)) => return,
                    Ok(Ok(())) => {}
                },
            }
        }
        tracing::info!("the Redis primary changed: rebuilding from the rows");
        rebuild_all(lab, cancel).await;
    }
}

/// Rebuilds every coupon a keeper keeps in Redis, asking again for those
/// that failed.
async fn rebuild_all(lab: &Lab, cancel: &CancellationToken) {
    let mut left: Option<Vec<(Keeper, u64)>> = None;
    for attempt in 0..ATTEMPTS {
        if attempt > 0 && !pause_unless_cancelled(cancel, RETRY_EVERY).await {
            return;
        }
        let coupons = match left.take() {
            Some(coupons) => coupons,
            None => match kept_coupons(lab).await {
                Ok(coupons) => coupons,
                Err(err) => {
                    tracing::warn!(error = %err, "cannot list the coupons to rebuild; trying again");
                    continue;
                }
            },
        };
        let mut failed = Vec::new();
        for (keeper, coupon) in coupons {
            if !rebuild(lab, keeper, coupon).await {
                failed.push((keeper, coupon));
            }
        }
        if failed.is_empty() {
            return;
        }
        left = Some(failed);
    }
    tracing::warn!(left = ?left, "coupons not rebuilt after the failover");
}

/// The coupons each loaded keeper has keys of on the primary now.
async fn kept_coupons(lab: &Lab) -> anyhow::Result<Vec<(Keeper, u64)>> {
    let keepers: Vec<Keeper> = Keeper::ALL
        .into_iter()
        .filter(|keeper| serving(lab, *keeper).is_some())
        .collect();
    if keepers.is_empty() {
        return Ok(Vec::new());
    }
    let candidates: Vec<(Keeper, u64)> = db::coupon_ids(lab.db())
        .await?
        .into_iter()
        .flat_map(|coupon| keepers.iter().map(move |&keeper| (keeper, coupon)))
        .collect();
    let mut kept = Vec::new();
    let mut conn = lab.redis().clone();
    for page in candidates.chunks(LOOK_PAGE) {
        let looks = page
            .iter()
            .map(|&(keeper, coupon)| {
                let mut exists = redis::cmd("EXISTS");
                exists.arg(keeper.kept_at(coupon));
                exists
            })
            .collect();
        let found: Vec<bool> =
            redis::from_redis_value(redis::Value::Array(conn.each(looks).await?))?;
        kept.extend(
            page.iter()
                .zip(found)
                .filter(|(_, found)| *found)
                .map(|(c, _)| *c),
        );
    }
    Ok(kept)
}

/// The loaded component of `keeper`'s world.
fn serving(lab: &Lab, keeper: Keeper) -> Option<Arc<Strategy>> {
    lab.registry
        .strategies()
        .values()
        .find(|strategy| strategy.world.name() == keeper.world())
        .cloned()
}

/// Asks `keeper`'s component to rebuild `coupon`; false when it could not.
async fn rebuild(lab: &Lab, keeper: Keeper, coupon: u64) -> bool {
    let Some(strategy) = serving(lab, keeper) else {
        return true;
    };
    let answered = match keeper {
        Keeper::WriteBehind => lab
            .runtime
            .reconcile(&strategy, coupon)
            .await
            .result
            .map(|r| {
                r.map(|report| {
                    (
                        report.restored.len() as u64,
                        Some(report.remaining_before),
                        Some(report.remaining_after),
                    )
                })
            }),
        Keeper::Gate => lab
            .runtime
            .reconcile_gate(&strategy, coupon)
            .await
            .result
            .map(|r| {
                r.map(|gate| {
                    (
                        u64::from(gate.buyers_behind),
                        gate.remaining_before,
                        gate.remaining_after,
                    )
                })
            }),
    };
    let mut rebuilt = Rebuild {
        coupon_id: coupon,
        method: strategy.method.to_string(),
        at_ms: now_ms(),
        members_restored: 0,
        remaining_before: None,
        remaining_after: None,
        error: None,
    };
    match answered {
        Ok(Ok((restored, before, after))) => {
            rebuilt.members_restored = restored;
            rebuilt.remaining_before = before;
            rebuilt.remaining_after = after;
        }
        Ok(Err(refused)) => rebuilt.error = Some(refused),
        Err(failed) => rebuilt.error = Some(failed.to_string()),
    }
    tracing::info!(
        coupon,
        method = %rebuilt.method,
        restored = rebuilt.members_restored,
        before = ?rebuilt.remaining_before,
        after = ?rebuilt.remaining_after,
        error = ?rebuilt.error,
        "rebuilt from the rows after a failover"
    );
    if let Err(err) = keep(lab, &rebuilt).await {
        tracing::warn!(coupon, error = %err, "cannot keep the rebuild's record");
    }
    rebuilt.error.is_none()
}

/// Adds the record to the list the load runner reads.
async fn keep(lab: &Lab, rebuilt: &Rebuild) -> RedisResult<()> {
    let record = serde_json::to_string(rebuilt).expect("a rebuild serializes");
    let mut conn = lab.redis().clone();
    redis::pipe()
        .lpush(REBUILDS_KEY, record)
        .ignore()
        .ltrim(REBUILDS_KEY, 0, REBUILDS_KEEP as isize - 1)
        .ignore()
        .query_async(&mut conn)
        .await
}
