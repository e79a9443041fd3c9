//! The job workers (stage 4): a fixed number of tasks draining the in-process
//! queue, each running the job on the component version that submitted it.
//! On shutdown they finish every job already queued: each one was answered
//! 202.

use std::sync::Arc;

use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::until_answered;
use crate::issuing;
use crate::lab::Lab;
use crate::runtime::Job;

pub fn spawn(lab: &Lab, cancel: CancellationToken) -> Vec<JoinHandle<()>> {
    let Some(receiver) = lab.runtime.take_jobs() else {
        return Vec::new();
    };
    let receiver = Arc::new(Mutex::new(receiver));
    (0..lab.config.capabilities.jobs.job_workers)
        .map(|_| tokio::spawn(work(lab.clone(), receiver.clone(), cancel.clone())))
        .collect()
}

async fn work(lab: Lab, receiver: Arc<Mutex<mpsc::Receiver<Job>>>, cancel: CancellationToken) {
    loop {
        let job = {
            let mut receiver = receiver.lock().await;
            tokio::select! {
                biased;
                job = receiver.recv() => job,
                // Stopping: take what is left without waiting for more.
                () = cancel.cancelled() => receiver.try_recv().ok(),
            }
        };
        let Some(job) = job else { return };
        run(&lab, job).await;
    }
}

async fn run(lab: &Lab, job: Job) {
    let attempts = lab.config.consumers.max_deliveries;
    let ran = until_answered(attempts, || {
        lab.runtime.run_job(&job.strategy, &job.payload)
    })
    .await;
    match ran.result {
        Ok(confirmation) => {
            // Not recorded: warned about, and the job is gone either way.
            issuing::confirmed(lab, &job.strategy, &confirmation, Some(ran.trace)).await;
        }
        // Failed every attempt: the reservation stays and the request stays
        // pending in the result — visible, not silently lost.
        Err(err) => {
            tracing::error!(method = %job.strategy.method, error = %err, payload = %job.payload, attempts, "job failed on every attempt")
        }
    }
}
