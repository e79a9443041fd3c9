//! The data of one `Store`: what a single strategy call may reach.

use std::sync::Arc;

use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime::{ResourceLimiter, StoreLimits, StoreLimitsBuilder};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{self, types};
use super::broker::{BrokerView, Brokers};
use super::call_context::CallContext;
use super::clock::{Clock, ClockView};
use super::jobs::{Jobs, JobsView, Submitter};
use super::log::{Log, LogArgs, LogView, Written};
use super::permits::{Permits, PermitsView};
use super::process_lock::{HeldLocks, ProcessLockView, ProcessLocks};
use super::redis::pools::GuestRedis;
use super::redis::{self, RedisView};
use super::sql::{self, GuestSql, SqlView};

/// Bytes of a guest's stderr kept for the error message of a trap (an
/// interpreter's traceback lands there).
const STDERR_CAPACITY: usize = 4096;

/// The server's side of each capability a call reaches, shared by every
/// call.
pub struct Shared {
    pub sql: Arc<GuestSql>,
    pub redis: Arc<GuestRedis>,
    pub permits: Arc<Permits>,
    pub process_locks: Arc<ProcessLocks>,
    pub log: LogArgs,
    pub brokers: Arc<Brokers>,
}

pub struct HostState {
    /// The server's side of each capability.
    shared: Shared,
    /// What every capability needs of this call: its method, deadline,
    /// clean-up, trace and quarantine.
    pub(super) call: CallContext,
    /// Where a job this call submits goes: to the queue, to be run by this
    /// same component version. `None` while the component is loaded, and
    /// for a world without a job runner, where a job would be stranded.
    pub(super) jobs: Option<Submitter>,
    /// Live `connection` and `transaction` resources of this call.
    pub(super) table: ResourceTable,
    /// What this call holds of Redis.
    pub(super) redis: redis::Held,
    /// What this call holds of the database.
    pub(super) sql: sql::Held,
    /// What this call wrote to the log.
    pub(super) log: Written,
    /// Process locks this call holds, released when the store goes.
    pub(super) process_locks: HeldLocks,
    /// WASI for a component that imports it (an interpreter's), built on
    /// its first WASI call: a component whose only imports are the lab's
    /// never pays for one (two random generators seeded, a pipe).
    wasi: Option<Wasi>,
    limits: StoreLimits,
}

impl HostState {
    pub(super) fn new(
        shared: Shared,
        call: CallContext,
        jobs: Option<Submitter>,
        memory_bytes: usize,
    ) -> Self {
        Self {
            shared,
            call,
            jobs,
            table: ResourceTable::new(),
            redis: redis::Held::default(),
            sql: sql::Held::default(),
            log: Written::default(),
            process_locks: HeldLocks::default(),
            wasi: None,
            limits: StoreLimitsBuilder::new()
                .memory_size(memory_bytes)
                .instances(64)
                .build(),
        }
    }

    /// Whether the call holds nothing that dropping its store would release
    /// or clean up: no connection, transaction, lock, subscription or
    /// renewal.
    pub(super) fn holds_nothing(&self) -> bool {
        self.redis.nothing() && self.sql.nothing() && self.process_locks.is_empty()
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
impl types::Host for HostState {}

/// Each capability's view of one call, projected from its store.
impl HostState {
    fn clock(&mut self) -> ClockView<'_> {
        ClockView { call: &self.call }
    }

    fn log(&mut self) -> LogView<'_> {
        LogView {
            settings: self.shared.log,
            written: &mut self.log,
            call: &self.call,
        }
    }

    fn broker(&mut self) -> BrokerView<'_> {
        BrokerView {
            brokers: &self.shared.brokers,
            call: &mut self.call,
        }
    }

    fn jobs(&mut self) -> JobsView<'_> {
        JobsView {
            submitter: self.jobs.as_ref(),
            call: &self.call,
        }
    }

    fn redis(&mut self) -> RedisView<'_> {
        RedisView {
            redis: &self.shared.redis,
            held: &mut self.redis,
            table: &mut self.table,
            call: &mut self.call,
        }
    }

    fn sql(&mut self) -> SqlView<'_> {
        SqlView {
            sql: self.shared.sql.on_node(self.call.node),
            held: &mut self.sql,
            table: &mut self.table,
            call: &mut self.call,
        }
    }

    fn permits(&mut self) -> PermitsView<'_> {
        PermitsView {
            permits: &self.shared.permits,
            call: &self.call,
        }
    }

    fn process_locks(&mut self) -> ProcessLockView<'_> {
        ProcessLockView {
            locks: &self.shared.process_locks,
            held: &mut self.process_locks,
            call: &self.call,
        }
    }
}

/// Links every capability's imports, each to its view of the store.
pub(super) fn link(linker: &mut Linker<HostState>) -> wasmtime::Result<()> {
    bindings::clock::add_to_linker::<_, Clock>(linker, HostState::clock)?;
    bindings::log::add_to_linker::<_, Log>(linker, HostState::log)?;
    bindings::jobs::add_to_linker::<_, Jobs>(linker, HostState::jobs)?;
    bindings::broker::add_to_linker::<_, Brokers>(linker, HostState::broker)?;
    bindings::permits::add_to_linker::<_, Permits>(linker, HostState::permits)?;
    bindings::process_lock::add_to_linker::<_, ProcessLocks>(linker, HostState::process_locks)?;
    bindings::redis::add_to_linker::<_, GuestRedis>(linker, HostState::redis)?;
    bindings::redis_channels::add_to_linker::<_, GuestRedis>(linker, HostState::redis)?;
    bindings::redis_watchdog::add_to_linker::<_, GuestRedis>(linker, HostState::redis)?;
    bindings::sql::add_to_linker::<_, GuestSql>(linker, HostState::sql)?;
    bindings::named_lock::add_to_linker::<_, GuestSql>(linker, HostState::sql)?;
    types::add_to_linker::<_, HasSelf<HostState>>(linker, |state| state)?;
    Ok(())
}
