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
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::sync::futures::Notified;

use crate::runtime::Strategy;
use crate::runtime::bindings::types::IssueRequest;

/// Requests kept at most; one more is logged and dropped.
const MAX_UNSETTLED: usize = 10_000;

/// A request kept, and since when.
pub struct Unsettled {
    pub strategy: Arc<Strategy>,
    pub request: IssueRequest,
    pub since: Instant,
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
    /// full. The caller counts it.
    pub fn push(&self, strategy: &Arc<Strategy>, request: &IssueRequest) -> bool {
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
    pub fn done(&self) {
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
    }

    /// Every request queued, taken to be tried now.
    pub fn take_all(&self) -> Vec<Unsettled> {
        self.queue.lock().drain(..).collect()
    }

    /// Requests tried and not settled, queued again.
    pub fn put_back(&self, left: Vec<Unsettled>) {
        self.queue.lock().extend(left);
    }

    /// Completes when a request is kept after this call.
    pub fn added(&self) -> Notified<'_> {
        self.added.notified()
    }
}
