//! The settle loop: every process tries again, until they finish, the
//! compensations of the requests its own calls left unsettled
//! ([`crate::settlements`] says which and why), once the database answers
//! and every session a lost connection left is gone, and no call for the
//! same member is running here.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::db::{on_engine, signed};
use crate::lab::Lab;
use crate::recorder::Settlement;
use crate::runtime::bindings::types::IssueRequest;
use crate::settlements::Unsettled;

/// The pause after a round that left requests unsettled.
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// How long a request is tried before the host gives up on it.
const GIVE_UP_AFTER: Duration = Duration::from_secs(600);

/// How long a round waits for the lost sessions to be ended.
const SESSIONS_LIMIT: Duration = Duration::from_secs(2);

/// Settles what is kept until cancelled.
pub async fn run(lab: Lab, cancel: CancellationToken) {
    loop {
        let round: Vec<Unsettled> = lab.settlements.take_all();
        let mut left = Vec::new();
        if !round.is_empty() && lab.runtime.lost_sessions_ended(SESSIONS_LIMIT).await {
            for unsettled in round {
                if let Some(unsettled) = settle(&lab, unsettled).await {
                    left.push(unsettled);
                }
            }
        } else {
            left = round;
        }
        let waiting = !left.is_empty();
        lab.settlements.put_back(left);
        let added = lab.settlements.added();
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(RETRY_EVERY), if waiting => {}
            () = added, if !waiting => {}
        }
    }
}

/// One try; the request back when it is not settled yet.
async fn settle(lab: &Lab, unsettled: Unsettled) -> Option<Unsettled> {
    let Unsettled {
        strategy, request, ..
    } = &unsettled;
    let method = &strategy.method;
    if lab.recorder.in_flight(request.coupon_id, request.member_id) {
        return Some(unsettled);
    }
    let settled = match lab.runtime.compensate(strategy, request).await {
        Ok(compensation) if !compensation.unfinished => {
            let issued = issued(lab, request).await;
            tracing::info!(%method, coupon = request.coupon_id, member = request.member_id, ?issued,
                detail = compensation.detail.as_deref().unwrap_or_default(), "settled a request");
            issued
        }
        Ok(_) | Err(_) => None,
    };
    let Some(issued) = settled else {
        if unsettled.since.elapsed() < GIVE_UP_AFTER {
            return Some(unsettled);
        }
        tracing::error!(%method, coupon = request.coupon_id, member = request.member_id,
            "gave up settling a request after {GIVE_UP_AFTER:?}: its reservation may stay stranded");
        lab.runtime
            .metrics()
            .settlements
            .with_label_values(&[method, "abandoned"])
            .inc();
        lab.settlements.done();
        return None;
    };
    let (what, label) = if issued {
        (Settlement::Issued, "issued")
    } else {
        (Settlement::NotIssued, "not_issued")
    };
    lab.recorder.settlement(request.coupon_id, method, what);
    lab.runtime
        .metrics()
        .settlements
        .with_label_values(&[method, label])
        .inc();
    lab.settlements.done();
    None
}

/// Whether the member has its row (`None`: the database did not answer).
async fn issued(lab: &Lab, request: &IssueRequest) -> Option<bool> {
    let statement = "SELECT COUNT(*) FROM coupon_issues WHERE coupon_id = ? AND member_id = ?";
    on_engine!(lab.db(), statement, |db, sql| {
        sqlx::query_scalar::<_, i64>(sql)
            .bind(signed(request.coupon_id))
            .bind(signed(request.member_id))
            .fetch_one(db)
            .await
    })
    .ok()
    .map(|rows| rows > 0)
}
