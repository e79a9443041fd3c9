//! What a capability needs of the call it serves, and nothing more: which
//! method runs, when the call's budget ends, where clean-up that outlives
//! the store goes, the trace of its capability calls, and how to take the
//! component out of service. A capability is handed this, never the loaded
//! component or the store.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::task::TaskTracker;

use super::trace::CallTrace;

pub struct CallContext {
    /// The method being run, for log lines and spans.
    pub method: Arc<str>,
    /// When this call's budget ends: no capability waits past it.
    pub deadline: Instant,
    /// Clean-up that outlives the store (the rollback of a transaction
    /// torn down with it): the host waits for it before the call's end is
    /// acted on.
    pub cleanup: TaskTracker,
    /// The capability calls this call made, for its request's trace.
    pub trace: CallTrace,
    /// Takes the component out of service (a script it sent took Redis and
    /// cannot be killed).
    pub quarantine: Quarantiner,
}

/// Takes the component a call runs out of service, with the reason; does
/// nothing for a component being loaded, which serves nothing yet.
#[derive(Clone, Default)]
pub struct Quarantiner(Option<Arc<dyn Fn(String) + Send + Sync>>);

impl Quarantiner {
    pub fn new(quarantine: impl Fn(String) + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(quarantine)))
    }

    pub fn quarantine(&self, reason: String) {
        if let Some(quarantine) = &self.0 {
            quarantine(reason);
        }
    }
}

impl CallContext {
    /// The time left before the deadline.
    pub fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A call of the method `TEST` whose budget ends in `left`.
    pub fn call_ending_in(left: Duration) -> CallContext {
        CallContext {
            method: Arc::from("TEST"),
            deadline: Instant::now() + left,
            cleanup: TaskTracker::new(),
            trace: CallTrace::recording(true),
            quarantine: Quarantiner::default(),
        }
    }

    #[test]
    fn no_time_is_left_past_the_deadline() {
        let call = call_ending_in(Duration::ZERO);
        assert_eq!(call.left(), Duration::ZERO);
        assert!(call_ending_in(Duration::from_secs(60)).left() > Duration::from_secs(59));
    }
}
