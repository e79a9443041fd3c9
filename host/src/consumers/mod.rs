//! The roles that confirm requests answered 202: the job workers (stage 4),
//! the pub/sub subscriber (stage 5), the stream consumers (stage 6), the
//! write-behind loader (stages 9-10) and the broker consumers ([`rabbitmq`],
//! [`jetstream`]); the settle loop, which finishes what calls left
//! unsettled ([`settle`]); and, behind Sentinels, the rebuild from the rows
//! after a failover (`failover`).
//!
//! The host owns the mechanics — reading, claiming, acking, counting
//! deliveries, dead-lettering, recording — and hands each job, message or
//! entry to the component that owns it, which confirms and compensates.
//! `couponlab serve` runs them all by default; `couponlab consume <role>`
//! runs one alone.

mod active;

mod broker;
mod failover;
mod group;
pub mod jetstream;
pub mod jobs;
#[cfg(test)]
mod lua_names;
pub mod pubsub;
pub mod rabbitmq;
mod settle;
pub mod stream;
pub mod write_behind;

use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Consumer;
use crate::lab::Lab;
use crate::runtime::{CallError, Traced};

/// How long a stopping role may take to finish what it holds.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// Which consumers a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Selection {
    pub jobs: bool,
    pub pubsub: bool,
    pub stream: bool,
    pub write_behind: bool,
    /// The RabbitMQ and JetStream consumers.
    pub brokers: bool,
}

impl Selection {
    /// Every role when `all`; none otherwise.
    pub fn all_if(all: bool) -> Self {
        Self {
            jobs: all,
            pubsub: all,
            stream: all,
            write_behind: all,
            brokers: all,
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
            brokers: consumer == Consumer::Brokers,
        }
    }
}

/// The running consumers of this process.
pub struct Consumers {
    cancel: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    subscriber: Option<pubsub::Subscribed>,
}

/// Starts the `selected` consumers for `lab`.
pub fn start(lab: &Lab, selected: Selection) -> Consumers {
    let cancel = CancellationToken::new();
    // Every process settles what its own calls left unsettled.
    let mut tasks = vec![tokio::spawn(settle::run(lab.clone(), cancel.clone()))];
    // Every process rebuilds after a failover it followed: rebuilding
    // twice changes nothing the first did not.
    tasks.extend(failover::spawn(lab, cancel.clone()));
    if selected.jobs {
        tasks.extend(jobs::spawn(lab, cancel.clone()));
    }
    let subscriber = selected.pubsub.then(|| {
        let (task, subscribed) = pubsub::spawn(lab, cancel.clone());
        tasks.push(task);
        subscribed
    });
    if selected.stream {
        tasks.extend(stream::spawn(lab, cancel.clone()));
    }
    if selected.write_behind {
        tasks.push(write_behind::spawn(lab, cancel.clone()));
    }
    if selected.brokers {
        tasks.extend(rabbitmq::spawn(lab, cancel.clone()));
        tasks.extend(jetstream::spawn(lab, cancel.clone()));
    }
    Consumers {
        cancel,
        tasks,
        subscriber,
    }
}

impl Consumers {
    /// Waits until the roles the loaded components need listen (the
    /// subscriber, when a component of the pub/sub role is loaded).
    pub async fn before_serving(&mut self, lab: &Lab) {
        if let Some(subscriber) = &mut self.subscriber {
            subscriber.before_serving(lab).await;
        }
    }

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

/// Sleeps for `pause` unless cancelled first; false when cancelled.
async fn pause_unless_cancelled(cancel: &CancellationToken, pause: Duration) -> bool {
    tokio::select! {
        () = cancel.cancelled() => false,
        () = tokio::time::sleep(pause) => true,
    }
}
