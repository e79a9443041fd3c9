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
use wasmtime::component::HasData;

use super::bindings::jobs::{self, SubmitError};
use super::call_context::CallContext;

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

/// A queued job: the payload and the component version (`S`, the runtime's
/// loaded component) that will run it.
pub struct Job<S> {
    pub strategy: Arc<S>,
    pub payload: String,
    pub queued_at: Instant,
}

pub struct JobQueue<S> {
    /// Bytes of one payload.
    max_payload_bytes: usize,
    sender: mpsc::Sender<Job<S>>,
    /// Taken once, by the workers that drain the queue.
    receiver: Mutex<Option<mpsc::Receiver<Job<S>>>>,
}

impl<S: Send + Sync + 'static> JobQueue<S> {
    pub fn new(args: &JobsArgs) -> Self {
        let (sender, receiver) =
            mpsc::channel(usize::try_from(args.job_queue).unwrap_or(usize::MAX));
        Self {
            max_payload_bytes: args.max_job_payload_bytes,
            sender,
            receiver: Mutex::new(Some(receiver)),
        }
    }

    /// How a call of `strategy` submits jobs, which `strategy` will run.
    pub fn submitter(&self, strategy: Arc<S>) -> Submitter {
        let sender = self.sender.clone();
        Submitter {
            max_payload_bytes: self.max_payload_bytes,
            // Queued unless the queue is full; never waits.
            queue: Box::new(move |payload| {
                let job = Job {
                    strategy: strategy.clone(),
                    payload,
                    queued_at: Instant::now(),
                };
                sender.try_send(job).map_err(|_| SubmitError::QueueFull)
            }),
        }
    }

    /// Jobs queued and not yet taken by a worker.
    pub fn depth(&self) -> usize {
        self.sender.max_capacity() - self.sender.capacity()
    }

    /// The receiving end, for the workers; `None` once taken.
    pub fn take_receiver(&self) -> Option<mpsc::Receiver<Job<S>>> {
        self.receiver.lock().take()
    }
}

/// How one call submits jobs: to the queue, for the component version it
/// runs.
pub struct Submitter {
    max_payload_bytes: usize,
    queue: Box<dyn Fn(String) -> Result<(), SubmitError> + Send + Sync>,
}

/// The `jobs` capability as the linker knows it: its imports work on a
/// [`JobsView`].
pub struct Jobs;

impl HasData for Jobs {
    type Data<'a> = JobsView<'a>;
}

/// What the jobs capability reaches of one call.
pub struct JobsView<'a> {
    /// `None` while the component is loaded, and for a world without a job
    /// runner, where a job would be stranded.
    pub submitter: Option<&'a Submitter>,
    pub call: &'a CallContext,
}

impl jobs::Host for JobsView<'_> {
    #[tracing::instrument(name = "jobs.submit", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn submit(&mut self, payload: String) -> wasmtime::Result<Result<(), SubmitError>> {
        let Some(submitter) = self.submitter else {
            // Accepting the job would strand it: nothing could ever run it.
            wasmtime::bail!(
                "{} submitted a job, which only a component of the async-issuer world may do \
                 (and not while it is being loaded)",
                self.call.method
            );
        };
        if payload.len() > submitter.max_payload_bytes {
            return Ok(Err(SubmitError::TooLarge));
        }
        Ok((submitter.queue)(payload))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::runtime::call_context::tests::call_ending_in;

    fn queue(slots: u64) -> JobQueue<&'static str> {
        JobQueue::new(&JobsArgs {
            job_workers: 1,
            job_queue: slots,
            max_job_payload_bytes: 8,
        })
    }

    async fn submit(view: &mut JobsView<'_>, payload: &str) -> Result<(), SubmitError> {
        jobs::Host::submit(view, payload.into()).await.unwrap()
    }

    #[tokio::test]
    async fn a_job_is_queued_for_its_submitter_until_too_large_or_the_queue_is_full() {
        let queue = queue(1);
        let submitter = queue.submitter(Arc::new("ISSUER"));
        let call = call_ending_in(Duration::from_secs(5));
        let mut view = JobsView {
            submitter: Some(&submitter),
            call: &call,
        };
        assert_eq!(
            submit(&mut view, "123456789").await,
            Err(SubmitError::TooLarge)
        );
        assert_eq!(submit(&mut view, "first").await, Ok(()));
        assert_eq!(
            submit(&mut view, "second").await,
            Err(SubmitError::QueueFull)
        );
        assert_eq!(queue.depth(), 1);
        let job = queue.take_receiver().unwrap().try_recv().unwrap();
        assert_eq!((*job.strategy, job.payload.as_str()), ("ISSUER", "first"));
        assert!(queue.take_receiver().is_none(), "taken once");
    }

    #[tokio::test]
    async fn a_call_that_cannot_run_jobs_traps_on_submitting_one() {
        let call = call_ending_in(Duration::from_secs(5));
        let mut view = JobsView {
            submitter: None,
            call: &call,
        };
        assert!(jobs::Host::submit(&mut view, "x".into()).await.is_err());
    }
}
