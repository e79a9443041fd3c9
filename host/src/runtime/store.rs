//! The data of one `Store`: what a single strategy call may reach.

use std::sync::Arc;
use std::time::Instant;

use tokio_util::task::TaskTracker;
use wasmtime::component::ResourceTable;
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::jobs::SubmitError;
use super::capabilities::Capabilities;
use super::engine::Limits;
use super::loaded::Strategy;
use super::process_lock::HeldLocks;
use super::sql::named_lock::LockSession;
use super::trace::CallTrace;

/// Bytes of a guest's stderr kept for the error message of a trap (an
/// interpreter's traceback lands there).
const STDERR_CAPACITY: usize = 4096;

/// Queues a job's payload for the component that submitted it.
pub(super) type SubmitJob = Box<dyn Fn(String) -> Result<(), SubmitError> + Send + Sync>;

pub struct HostState {
    /// The pools every capability works through.
    pub(super) caps: Arc<Capabilities>,
    /// Where a job this call submits goes: to the queue, to be run by this
    /// same component version. `None` while the component is loaded, and
    /// for a world without a job runner, where a job would be stranded.
    pub(super) submit_job: Option<SubmitJob>,
    /// The method being run, for log lines.
    pub(super) method: Arc<str>,
    /// The component being run (`None` while it is loaded): quarantined
    /// when a script it sent takes Redis and cannot be killed.
    pub(super) strategy: Option<Arc<Strategy>>,
    /// Scripts of this call that outlived its deadline and were killed.
    pub(super) scripts_killed: u32,
    /// When this call's budget ends; `clock.sleep` never sleeps past it.
    pub(super) deadline: Instant,
    /// Live `connection` and `transaction` resources of this call.
    pub(super) table: ResourceTable,
    /// Clean-up that outlives the store (the rollback of a transaction
    /// torn down with it): the host waits for it before the call's end is
    /// acted on.
    pub(super) cleanup: TaskTracker,
    /// Dedicated Redis connections and open transactions this call holds,
    /// and log lines it wrote, against their caps.
    pub(super) open_connections: u32,
    pub(super) open_transactions: u32,
    pub(super) log_lines: u32,
    /// Channel subscriptions and lease renewals this call holds.
    pub(super) subscriptions: u32,
    pub(super) renewals: u32,
    /// Process locks this call holds, released when the store goes.
    pub(super) process_locks: HeldLocks,
    /// The session this call's named locks live on, opened on first use;
    /// its locks are released when the store goes.
    pub(super) lock_session: Option<LockSession>,
    /// The last error line this call logged (a Rust panic's message, which
    /// the sdk's panic hook logs), for the message of a trap.
    pub(super) error_logged: Option<String>,
    /// The capability calls this call made, for its request's trace.
    pub(super) trace: CallTrace,
    /// WASI for a component that imports it (an interpreter's), built on
    /// its first WASI call: a component whose only imports are the lab's
    /// never pays for one (two random generators seeded, a pipe).
    wasi: Option<Wasi>,
    limits: StoreLimits,
}

impl HostState {
    pub(super) fn new(
        caps: Arc<Capabilities>,
        submit_job: Option<SubmitJob>,
        strategy: Option<Arc<Strategy>>,
        method: Arc<str>,
        deadline: Instant,
        limits: &Limits,
        cleanup: TaskTracker,
    ) -> Self {
        Self {
            caps,
            submit_job,
            method,
            strategy,
            scripts_killed: 0,
            deadline,
            table: ResourceTable::new(),
            cleanup,
            open_connections: 0,
            open_transactions: 0,
            log_lines: 0,
            subscriptions: 0,
            renewals: 0,
            process_locks: HeldLocks::default(),
            lock_session: None,
            error_logged: None,
            trace: CallTrace::recording(limits.trace_calls),
            wasi: None,
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.memory_bytes)
                .instances(64)
                .build(),
        }
    }

    /// Whether the call holds nothing that dropping its store would release
    /// or clean up: no connection, transaction, lock, subscription or
    /// renewal.
    pub(super) fn holds_nothing(&self) -> bool {
        self.open_connections == 0
            && self.open_transactions == 0
            && self.subscriptions == 0
            && self.renewals == 0
            && self.process_locks.is_empty()
            && self.lock_session.is_none()
    }

    /// What the guest wrote to stderr, lossily decoded (nothing when it
    /// made no WASI call).
    pub(super) fn stderr(&self) -> String {
        self.wasi.as_ref().map_or_else(String::new, |wasi| {
            String::from_utf8_lossy(&wasi.stderr.contents())
                .trim()
                .to_string()
        })
    }

    pub(super) fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.limits
    }
}

/// WASI as an interpreter needs it to link, with nothing granted: no
/// preopened directories, no environment, no sockets, stdin closed; its
/// stderr kept for the error message of a trap.
struct Wasi {
    ctx: WasiCtx,
    stderr: MemoryOutputPipe,
}

impl Wasi {
    fn new() -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAPACITY);
        let ctx = WasiCtx::builder()
            .stderr(stderr.clone())
            .allow_tcp(false)
            .allow_udp(false)
            .allow_ip_name_lookup(false)
            .build();
        Self { ctx, stderr }
    }
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi.get_or_insert_with(Wasi::new).ctx,
            table: &mut self.table,
        }
    }
}

/// `types` declares no functions; the trait exists for the linker.
impl super::bindings::types::Host for HostState {}
