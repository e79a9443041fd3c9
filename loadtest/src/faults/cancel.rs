//! How a run that stops early reaches the faults under way: each waits on
//! [`Cancel`] instead of sleeping, and ends at once when it is set.

use std::sync::{Condvar, Mutex};
use std::time::Instant;

/// Set when the run stops early: faults not fired yet are skipped, and
/// those under way end at once.
#[derive(Default)]
pub(super) struct Cancel {
    cancelled: Mutex<bool>,
    wake: Condvar,
}

impl Cancel {
    /// Sleeps until `deadline`; true when cancelled first.
    pub(super) fn sleep_until(&self, deadline: Instant) -> bool {
        let mut cancelled = self.cancelled.lock().expect("cancel poisoned");
        loop {
            if *cancelled {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            cancelled = self
                .wake
                .wait_timeout(cancelled, deadline - now)
                .expect("cancel poisoned")
                .0;
        }
    }

    pub(super) fn cancel(&self) {
        *self.cancelled.lock().expect("cancel poisoned") = true;
        self.wake.notify_all();
    }
}

/// What a fault that ends at a time of its own adds to its note when the
/// run stopped it first.
pub(super) fn ended_early(early: bool) -> &'static str {
    if early {
        "; ended early: the run stopped"
    } else {
        ""
    }
}
