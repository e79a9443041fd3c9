//! This host's share of one lab over several hosts: its request record
//! published to Redis every interval while it serves, and a coupon's
//! request figures read over every host. The snapshots themselves, their
//! keys and why they exist: [`crate::recorder::shared`].

use std::time::Duration;

use redis::RedisResult;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::lab::Lab;
use crate::recorder::RequestSummary;
use crate::recorder::shared::{self, Publication};

/// Publishes this host's changed records.
async fn publish(lab: &Lab) -> RedisResult<()> {
    let (_, new) = shared::publish(&lab.recorder, publication(lab)).await?;
    if new {
        // Another host deleted the lab's data: coupon ids start again.
        lab.announced.clear();
    }
    Ok(())
}

fn publication(lab: &Lab) -> Publication<'_> {
    Publication {
        redis: lab.redis(),
        host: &lab.identity,
        permits_per_gate: lab.config.capabilities.permits.per_gate,
    }
}

/// Publishes this host's record every interval while the server runs, and
/// once more when it stops.
pub struct Publisher {
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl Publisher {
    pub fn start(lab: &Lab) -> Self {
        let cancel = CancellationToken::new();
        let every = Duration::from_millis(lab.config.snapshot_interval_ms.max(10));
        let (lab, stopping) = (lab.clone(), cancel.clone());
        let task = tokio::spawn(async move {
            loop {
                let stopped = tokio::select! {
                    () = stopping.cancelled() => true,
                    () = tokio::time::sleep(every) => false,
                };
                match publish(&lab).await {
                    // What is published may go dormant.
                    Ok(_) => lab.recorder.put_idle_to_sleep(),
                    Err(err) => {
                        tracing::debug!(error = %err, "could not publish the request record")
                    }
                }
                if stopped {
                    return;
                }
            }
        });
        Self { cancel, task }
    }

    pub async fn stop(self) {
        self.cancel.cancel();
        let _ = self.task.await;
    }
}

/// The request figures of `coupon` over every host
/// ([`shared::every_host`]).
pub async fn every_host(lab: &Lab, coupon: u64) -> RequestSummary {
    let calls_over_ms = 2 * lab.config.request_timeout_ms as i64;
    let (summary, new) =
        shared::every_host(&lab.recorder, publication(lab), coupon, calls_over_ms).await;
    if new {
        lab.announced.clear();
    }
    summary
}
