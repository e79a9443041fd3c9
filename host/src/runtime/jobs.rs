//! The `jobs` capability (stage 4): a bounded in-process queue. A component
//! submits a payload; one of the host's workers later runs the same
//! component version's `job-runner.run-job` with it (see `consumers::jobs`).
//! Like the seed's `@Async` executor, the queue lives in this process's
//! memory: what is queued when the process dies is lost, and shows up in the
//! result as reservations without an issue row.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::bindings::jobs::{self, SubmitError};
use super::loaded::Strategy;
use super::store::{HostState, SubmitJob};

/// The `jobs` capability's settings.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct JobsArgs {
    /// Workers running queued jobs (stage 4; the seed's executor has 4). At
    /// least 1: without workers every job is stranded.
    #[arg(long, env = "COUPONLAB_JOB_WORKERS", default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..))]
    pub job_workers: u64,

    /// Jobs the in-process queue holds before `submit` answers queue-full
    /// (at least 1).
    #[arg(long, env = "COUPONLAB_JOB_QUEUE", default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub job_queue: u64,

    /// Bytes of one job payload.
    #[arg(long, env = "COUPONLAB_MAX_JOB_PAYLOAD_BYTES", default_value_t = 4096)]
    pub max_job_payload_bytes: usize,
}

/// A queued job: the payload and the component version that will run it.
pub struct Job {
    pub strategy: Arc<Strategy>,
    pub payload: String,
    pub queued_at: Instant,
}

pub struct JobQueue {
    /// Bytes of one payload.
    max_payload_bytes: usize,
    sender: mpsc::Sender<Job>,
    /// Taken once, by the workers that drain the queue.
    receiver: Mutex<Option<mpsc::Receiver<Job>>>,
}

impl JobQueue {
    pub fn new(args: &JobsArgs) -> Self {
        let (sender, receiver) =
            mpsc::channel(usize::try_from(args.job_queue).unwrap_or(usize::MAX));
        Self {
            max_payload_bytes: args.max_job_payload_bytes,
            sender,
            receiver: Mutex::new(Some(receiver)),
        }
    }

    /// How a call of `strategy` submits jobs: `None` for a world without a
    /// job runner.
    pub(super) fn submitter(&self, strategy: &Arc<Strategy>) -> Option<SubmitJob> {
        strategy.world.job_runner()?;
        let (sender, strategy) = (self.sender.clone(), strategy.clone());
        // Queued unless the queue is full; never waits.
        Some(Box::new(move |payload| {
            let job = Job {
                strategy: strategy.clone(),
                payload,
                queued_at: Instant::now(),
            };
            sender.try_send(job).map_err(|_| SubmitError::QueueFull)
        }))
    }

    /// Jobs queued and not yet taken by a worker.
    pub fn depth(&self) -> usize {
        self.sender.max_capacity() - self.sender.capacity()
    }

    /// The receiving end, for the workers; `None` once taken.
    pub fn take_receiver(&self) -> Option<mpsc::Receiver<Job>> {
        self.receiver.lock().take()
    }
}

impl jobs::Host for HostState {
    #[tracing::instrument(name = "jobs.submit", level = "debug", skip_all, fields(method = %self.method))]
    async fn submit(&mut self, payload: String) -> wasmtime::Result<Result<(), SubmitError>> {
        let Some(submit) = &self.submit_job else {
            // Accepting the job would strand it: nothing could ever run it.
            wasmtime::bail!(
                "{} submitted a job, which only a component of the async-issuer world may do \
                 (and not while it is being loaded)",
                self.method
            );
        };
        if payload.len() > self.caps.jobs.max_payload_bytes {
            return Ok(Err(SubmitError::TooLarge));
        }
        Ok(submit(payload))
    }
}
