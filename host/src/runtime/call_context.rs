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
    /// The node of the database cluster its SQL goes to ([`on_node`]: a
    /// canary's requests, spread over the nodes); `None`: the host's own.
    pub node: Option<usize>,
}

tokio::task_local! {
    /// The node the calls made inside [`on_node`] send their SQL to.
    static NODE: usize;
}

/// Runs `calls` with every strategy call made inside them sending its SQL
/// to node `node` of the database cluster (mod its size), not the host's
/// own: the canary spreads its requests so.
pub async fn on_node<F: Future>(node: usize, calls: F) -> F::Output {
    NODE.scope(node, calls).await
}

/// The node the calls of this task send their SQL to, if [`on_node`] named one.
pub(super) fn node() -> Option<usize> {
    NODE.try_with(|node| *node).ok()
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
            node: None,
        }
    }

    #[tokio::test]
    async fn a_call_names_the_node_it_is_run_on_only_inside_on_node() {
        assert_eq!(node(), None);
        assert_eq!(on_node(2, async { node() }).await, Some(2));
        assert_eq!(node(), None);
    }

    #[test]
    fn no_time_is_left_past_the_deadline() {
        let call = call_ending_in(Duration::ZERO);
        assert_eq!(call.left(), Duration::ZERO);
        assert!(call_ending_in(Duration::from_secs(60)).left() > Duration::from_secs(59));
    }
}
