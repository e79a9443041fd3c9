//! Requests whose outcome is not settled yet: a COMMIT or a script whose
//! answer was lost (the outcome is unknown), or an undo that could not run
//! because Redis or the database did not answer. The component said so
//! (`settle-later`, or a compensation that came back `unfinished`); the
//! host keeps the request and calls the component's `compensate` again —
//! once the database answers and every session a lost connection left is
//! gone, and no call for the same member is running here — until the
//! compensation finishes. What to undo stays the component's to decide: it
//! reads the rows first, so a commit that happened is never undone.
//!
//! The queue lives in this process's memory, bounded: a crash of the host
//! loses it, and the reservations it held then show in the result as
//! stranded (reserved, no row, no call in flight), as before.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::lab::Lab;
use crate::recorder::Settlement;
use crate::runtime::Strategy;
use crate::runtime::bindings::types::IssueRequest;

/// Requests kept at most; one more is logged and dropped.
const MAX_UNSETTLED: usize = 10_000;

/// The pause after a round that left requests unsettled.
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// How long a request is tried before the host gives up on it.
const GIVE_UP_AFTER: Duration = Duration::from_secs(600);

/// How long a round waits for the lost sessions to be ended.
const SESSIONS_LIMIT: Duration = Duration::from_secs(2);

struct Unsettled {
    strategy: Arc<Strategy>,
    request: IssueRequest,
    since: Instant,
}

#[derive(Default)]
pub struct Settlements {
    queue: Mutex<VecDeque<Unsettled>>,
    /// Kept and not settled yet: those queued and those being tried now.
    outstanding: AtomicUsize,
    added: Notify,
}

impl Settlements {
    /// Keeps `request` of `strategy` to be settled; false when the queue is
    /// full. The caller counts it (see [`keep`]).
    fn push(&self, strategy: &Arc<Strategy>, request: &IssueRequest) -> bool {
        let mut queue = self.queue.lock();
        if self.pending() >= MAX_UNSETTLED {
            tracing::error!(method = %strategy.method, coupon = request.coupon_id, member = request.member_id,
                "{MAX_UNSETTLED} requests wait to be settled already; this one is not kept");
            return false;
        }
        queue.push_back(Unsettled {
            strategy: strategy.clone(),
            request: request.clone(),
            since: Instant::now(),
        });
        self.outstanding.fetch_add(1, Ordering::Relaxed);
        self.added.notify_one();
        true
    }

    /// Requests kept and not settled yet.
    pub fn pending(&self) -> usize {
        self.outstanding.load(Ordering::Relaxed)
    }

    /// One settled, or given up on.
    fn done(&self) {
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Keeps `request` of `strategy` to be settled, counted in the coupon's
/// result and in `/metrics`.
pub fn keep(lab: &Lab, strategy: &Arc<Strategy>, request: &IssueRequest) {
    if lab.settlements.push(strategy, request) {
        lab.recorder
            .settlement(request.coupon_id, &strategy.method, Settlement::Asked);
        lab.runtime
            .metrics()
            .settlements
            .with_label_values(&[&strategy.method, "kept"])
            .inc();
    }
}

/// The request a confirmation of `coupon_id` and `member_id` stands for,
/// as a consumer settles it.
pub fn request_of(coupon_id: u64, member_id: u64) -> IssueRequest {
    IssueRequest {
        coupon_id,
        member_id,
        duplicate_check: true,
        idempotency_key: None,
        quantity: 1,
    }
}

/// Settles what is kept until cancelled.
pub async fn run(lab: Lab, cancel: CancellationToken) {
    loop {
        let round: Vec<Unsettled> = lab.settlements.queue.lock().drain(..).collect();
        let mut left = Vec::new();
        if !round.is_empty()
            && lab
                .runtime
                .capabilities()
                .sql
                .orphans
                .until_none(SESSIONS_LIMIT)
                .await
        {
            for unsettled in round {
                if let Some(unsettled) = settle(&lab, unsettled).await {
                    left.push(unsettled);
                }
            }
        } else {
            left = round;
        }
        let waiting = !left.is_empty();
        lab.settlements.queue.lock().extend(left);
        let added = lab.settlements.added.notified();
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
    sqlx::query_scalar::<_, i64>(
        "SELECT COUNT(*) FROM coupon_issues WHERE coupon_id = ? AND member_id = ?",
    )
    .bind(request.coupon_id)
    .bind(request.member_id)
    .fetch_one(lab.db())
    .await
    .ok()
    .map(|rows| rows > 0)
}
