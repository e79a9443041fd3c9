//! The roles that confirm requests answered 202: the job workers (stage 4),
//! the pub/sub subscriber (stage 5), the stream consumers (stage 6) and the
//! write-behind loader (stages 9-10).
//!
//! The host owns the mechanics — reading, claiming, acking, counting
//! deliveries, dead-lettering, recording — and hands each job, message or
//! entry to the component that owns it, which confirms and compensates.
//! `couponlab serve` runs them all by default; `couponlab consume <role>`
//! runs one alone.

pub mod jobs;
pub mod pubsub;
pub mod stream;
pub mod write_behind;

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::lab::Lab;

/// How long a stopping role may take to finish what it holds.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// Which roles a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Roles {
    pub jobs: bool,
    pub pubsub: bool,
    pub stream: bool,
    pub write_behind: bool,
}

/// The running roles of this process.
pub struct Consumers {
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

/// Starts `roles` for `lab`.
pub fn start(lab: &Lab, roles: Roles) -> Consumers {
    let cancel = CancellationToken::new();
    let mut tasks = Vec::new();
    if roles.jobs {
        tasks.extend(jobs::spawn(lab, cancel.clone()));
    }
    if roles.pubsub {
        tasks.push(pubsub::spawn(lab, cancel.clone()));
    }
    if roles.stream {
        tasks.extend(stream::spawn(lab, cancel.clone()));
    }
    if roles.write_behind {
        tasks.push(write_behind::spawn(lab, cancel.clone()));
    }
    Consumers { cancel, tasks }
}

impl Consumers {
    /// Stops reading new work, lets every role finish what it holds (or
    /// leave it pending), and waits for them.
    pub async fn stop(self) {
        self.cancel.cancel();
        let all = futures::future::join_all(self.tasks);
        if tokio::time::timeout(STOP_GRACE, all).await.is_err() {
            tracing::warn!("consumers did not stop within {STOP_GRACE:?}");
        }
    }
}

/// Sleeps for `pause` unless cancelled first; false when cancelled.
async fn pause_unless_cancelled(cancel: &CancellationToken, pause: Duration) -> bool {
    tokio::select! {
        () = cancel.cancelled() => false,
        () = tokio::time::sleep(pause) => true,
    }
}
