//! The roles that confirm requests answered 202: the job workers (stage 4),
//! the pub/sub subscriber (stage 5), the stream consumers (stage 6) and the
//! write-behind loader (stages 9-10).
//!
//! The host owns the mechanics — reading, claiming, acking, counting
//! deliveries, dead-lettering, recording — and hands each job, message or
//! entry to the component that owns it, which confirms and compensates.
//! `couponlab serve` runs them all by default; `couponlab consume <role>`
//! runs one alone.

mod active;
pub mod announce;
mod group;
pub mod jobs;
#[cfg(test)]
mod lua_names;
pub mod pubsub;
pub mod stream;
pub mod write_behind;

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Consumer;
use crate::confirmations;
use crate::lab::Lab;
use crate::runtime::bindings::types::Confirmation;
use crate::runtime::trace::CallTrace;
use crate::runtime::{CallError, Strategy, Traced};
use crate::settlements;
use crate::traces::Finished;

/// How long a stopping role may take to finish what it holds.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// Which consumers a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    pub jobs: bool,
    pub pubsub: bool,
    pub stream: bool,
    pub write_behind: bool,
}

impl Selection {
    /// Every role when `all`; none otherwise.
    pub fn all_if(all: bool) -> Self {
        Self {
            jobs: all,
            pubsub: all,
            stream: all,
            write_behind: all,
        }
    }

    /// Every role, as `couponlab check` runs them for a canary.
    pub fn all() -> Self {
        Self::all_if(true)
    }

    /// `consumer` alone, as `couponlab consume` runs it.
    pub fn only(consumer: Consumer) -> Self {
        Self {
            jobs: false,
            pubsub: consumer == Consumer::Pubsub,
            stream: consumer == Consumer::Stream,
            write_behind: consumer == Consumer::WriteBehind,
        }
    }
}

/// The running consumers of this process.
pub struct Consumers {
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
}

/// Starts the `selected` consumers for `lab`.
pub fn start(lab: &Lab, selected: Selection) -> Consumers {
    let cancel = CancellationToken::new();
    // Every process settles what its own calls left unsettled.
    let mut tasks = vec![tokio::spawn(settlements::run(lab.clone(), cancel.clone()))];
    if selected.jobs {
        tasks.extend(jobs::spawn(lab, cancel.clone()));
    }
    if selected.pubsub {
        tasks.push(pubsub::spawn(lab, cancel.clone()));
    }
    if selected.stream {
        tasks.extend(stream::spawn(lab, cancel.clone()));
    }
    if selected.write_behind {
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

/// The first pause before a failed confirmation is tried again; it doubles
/// up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(5);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// Runs a confirmation's component call until it answers. No free instance
/// (BUSY) is waited out for as long as it lasts: the request was answered
/// 202, and lacking an instance for a moment must not lose it. A call that
/// trapped or ran past its deadline is tried `attempts` times in all
/// (confirming is idempotent: a second try that finds the row answers
/// duplicate). Between tries the pause doubles from 5 ms up to 1 s.
async fn until_answered<R, F>(attempts: u32, mut call: impl FnMut() -> F) -> Traced<R>
where
    F: Future<Output = Traced<R>>,
{
    let mut pause = RETRY_FIRST;
    let mut failed = 0;
    loop {
        let answered = call().await;
        match &answered.result {
            Err(CallError::Busy(_)) => {}
            Err(err) if err.ended_midway() && failed + 1 < attempts => failed += 1,
            _ => return answered,
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// Records what an accepted request became, and for an issued one how long
/// after its 202 it was confirmed; one the component could not settle is
/// kept to be settled later. `trace`: the call that confirmed it alone,
/// kept with the request's traces.
async fn record(
    lab: &Lab,
    strategy: &Arc<Strategy>,
    confirmation: &Confirmation,
    trace: Option<CallTrace>,
) {
    let method = &*strategy.method;
    if let Some(trace) = trace {
        let finished = Finished {
            coupon_id: confirmation.coupon_id,
            member_id: confirmation.member_id,
            method,
            sequence: None,
            arrived_us: u64::MAX,
            outcome: confirmation.outcome.into(),
            compensations: confirmation.compensations,
        };
        lab.traces.confirmation(finished, trace);
    }
    if confirmation.settle_later {
        let request = settlements::request_of(confirmation.coupon_id, confirmation.member_id);
        settlements::keep(lab, strategy, &request);
    }
    match confirmations::record_confirmed(lab.redis(), confirmation).await {
        Ok(Some(lag)) if strategy.serving() => lab
            .runtime
            .metrics()
            .confirmation_lag
            .with_label_values(&[method])
            .observe(lag.as_secs_f64()),
        Ok(_) => {}
        Err(err) => tracing::warn!(method, error = %err, "could not record a confirmation"),
    }
}

/// Sleeps for `pause` unless cancelled first; false when cancelled.
async fn pause_unless_cancelled(cancel: &CancellationToken, pause: Duration) -> bool {
    tokio::select! {
        () = cancel.cancelled() => false,
        () = tokio::time::sleep(pause) => true,
    }
}
