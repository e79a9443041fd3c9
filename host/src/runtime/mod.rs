//! The WebAssembly side of the host.
//!
//! One [`Engine`] (pooling allocator, epoch interruption) and one [`Linker`]
//! serve every component. A component is compiled and checked once, when it
//! is loaded; each call then gets a fresh [`Store`] instantiated from the
//! component's `InstancePre`, with a wall-clock deadline and a memory limit,
//! so a looping or greedy component fails its own call and nothing else.
//!
//! Capabilities, one module each: [`redis`], [`sql`], [`jobs`], [`permits`],
//! `clock`, `log`.
//! [`registry`] maps method names to loaded components; [`watcher`] reloads
//! them when the strategy directory changes.

pub mod bindings;
mod clock;
pub mod jobs;
mod log;
pub mod permits;
pub mod redis;
pub mod registry;
pub mod sql;
mod store;
pub mod watcher;

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use parking_lot::Mutex;
use sqlx::MySqlPool;
use tokio_util::task::TaskTracker;
use wasmtime::component::{Component, HasSelf, Instance, InstancePre, Linker};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, PoolConcurrencyLimitError,
    PoolingAllocationConfig, Store, UpdateDeadline,
};

use self::bindings::LabHost;
use self::bindings::types::{
    Compensation, Confirmation, Handled, IssueRequest, IssueResult, ReconcileReport, SeedAnswer,
    StreamEntry,
};
use self::jobs::JobQueue;
use self::permits::Permits;
use self::redis::GuestRedis;
use self::registry::{Exports, Prepared};
use self::sql::lent::Limits as SqlLimits;
use self::store::HostState;
use crate::config::CallCaps;

pub use self::registry::{Registry, Role, Strategy};

/// What every capability works through: the server's pools and queues.
pub struct Capabilities {
    pub db: MySqlPool,
    /// How the server cuts strategy statements.
    pub sql_limits: SqlLimits,
    pub redis: GuestRedis,
    pub jobs: JobQueue,
    pub permits: Permits,
    /// What one call may use.
    pub caps: CallCaps,
}

/// The sandbox every call runs in.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Wall-clock budget of one call, host calls included.
    pub timeout: Duration,
    /// Linear memory one instance may grow to.
    pub memory_bytes: usize,
    /// Instances alive at once (the pool's size).
    pub max_instances: u32,
}

/// How often the engine's epoch advances: the granularity of deadlines, and
/// how often a busy guest yields its thread to other requests.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Extra time the async timeout allows past the deadline, so a guest that is
/// executing wasm is stopped by its epoch deadline (a clean trap) and the
/// timeout only catches a host call stuck past it.
const TIMEOUT_GRACE: Duration = Duration::from_millis(500);

/// How long the clean-up of a failed call (rolling back its transactions)
/// may take before its strategy is asked to compensate anyway.
const CLEANUP_LIMIT: Duration = Duration::from_secs(5);

/// Bytes of each slot's linear memory and tables kept resident between
/// calls: the components' stack, data and usual heap fit in it.
const KEEP_RESIDENT: usize = 2 << 20;

/// Slots whose extra pages are given back to the kernel together.
const DECOMMIT_BATCH: usize = 32;

/// Compiled components kept in memory, by content hash.
const COMPILED_CACHE: usize = 32;

pub struct Runtime {
    engine: Engine,
    linker: Linker<HostState>,
    caps: Arc<Capabilities>,
    limits: Limits,
    /// Recently compiled components by the SHA-256 of their bytes, newest
    /// last, so switching back to a build seen before costs no compilation.
    /// Keyed by content and compiled from bytes read into memory: nothing
    /// here is ever mapped from a file that could change under it.
    compiled: Mutex<VecDeque<(String, Component)>>,
}

/// Why a call produced no answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("the strategy trapped: {0}")]
    Trapped(String),
    #[error("the strategy ran past its {0:?} deadline")]
    DeadlineExceeded(Duration),
    #[error("all {0} strategy instances are busy")]
    Busy(u32),
    #[error("{method} is a {role} and exports no {export}")]
    Unsupported {
        method: String,
        role: &'static str,
        export: &'static str,
    },
}

impl CallError {
    /// Whether the guest ran and stopped somewhere in the middle: what it
    /// did so far may need undoing.
    pub fn ended_midway(&self) -> bool {
        matches!(self, CallError::Trapped(_) | CallError::DeadlineExceeded(_))
    }
}

/// An issue call that produced no answer, and what its strategy undid.
#[derive(Debug)]
pub struct Unanswered {
    pub error: CallError,
    /// For a call that ended midway: the strategy's `compensate`, or why
    /// that failed too. `None` when the call never ran.
    pub compensation: Option<Result<Compensation, CallError>>,
}

/// The error an expired epoch deadline raises inside the guest.
#[derive(Debug, thiserror::Error)]
#[error("deadline exceeded")]
struct DeadlineExceeded;

impl Runtime {
    pub fn new(caps: Arc<Capabilities>, limits: Limits) -> anyhow::Result<Self> {
        let instances = limits.max_instances.max(1);
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(instances)
            // A component built by wasm-component-ld holds the program's core
            // instance plus a few adapter and shim instances.
            .total_core_instances(instances.saturating_mul(8))
            .total_memories(instances.saturating_mul(2))
            .total_tables(instances.saturating_mul(8))
            .total_stacks(instances)
            .max_tables_per_module(4)
            .max_memory_size(limits.memory_bytes)
            // A slot's pages stay mapped between calls and are reset in place
            // (the pages a call dirtied are found with PAGEMAP_SCAN where the
            // kernel has it): returning them to the kernel after every call
            // cost a TLB shootdown on both cores per call and a page fault
            // per page touched by the next one. Isolation is unchanged: each
            // call still starts from the component's initial memory.
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(KEEP_RESIDENT)
            .pagemap_scan(Enabled::Auto)
            // What still goes back to the kernel (memory a call grew past
            // the resident part) goes in batches: one shootdown per batch.
            .decommit_batch_size(DECOMMIT_BATCH);

        let mut config = Config::new();
        config
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)
            .map_err(anyhow::Error::from)
            .context("cannot create the wasm engine")?;
        spawn_epoch_ticker(&engine);

        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(anyhow::Error::from)
            .context("cannot link WASI")?;
        LabHost::add_to_linker::<HostState, HasSelf<HostState>>(&mut linker, |state| state)
            .map_err(anyhow::Error::from)
            .context("cannot link the couponlab capabilities")?;
        Ok(Self {
            engine,
            linker,
            caps,
            limits,
            compiled: Mutex::new(VecDeque::new()),
        })
    }

    pub fn capabilities(&self) -> &Arc<Capabilities> {
        &self.caps
    }

    /// Compiles a component on a blocking thread (compilation is CPU-bound
    /// and must not stall requests on the async runtime), unless a component
    /// with the same content hash was compiled recently.
    pub async fn compile(&self, bytes: Vec<u8>, sha256: &str) -> anyhow::Result<Component> {
        let cached = self
            .compiled
            .lock()
            .iter()
            .find(|(hash, _)| hash == sha256)
            .map(|(_, c)| c.clone());
        if let Some(component) = cached {
            return Ok(component);
        }
        let engine = self.engine.clone();
        let component = tokio::task::spawn_blocking(move || Component::new(&engine, &bytes))
            .await
            .context("the compiler thread panicked")??;
        let mut compiled = self.compiled.lock();
        compiled.push_back((sha256.to_string(), component.clone()));
        if compiled.len() > COMPILED_CACHE {
            compiled.pop_front();
        }
        Ok(component)
    }

    /// Checks a compiled component against the worlds the host knows: every
    /// import provided by the host, the `strategy` export, and the right
    /// types for whichever role exports it has. Then asks it what it is.
    async fn prepare(&self, component: &Component) -> anyhow::Result<Prepared> {
        let pre = self
            .linker
            .instantiate_pre(component)
            .map_err(anyhow::Error::from)
            .context("it imports something the host does not provide")?;
        let exports = Exports::find(&pre)?;
        let mut store = self.new_store(None, Arc::from("(loading)"), TaskTracker::new());
        // Loading runs the guest too: under the same deadline as a call, so a
        // component that hangs in describe() is rejected, not waited for.
        let described = tokio::time::timeout(self.limits.timeout + TIMEOUT_GRACE, async {
            let instance = self.instantiate(&pre, &mut store).await?;
            // Loading every export type-checks it now rather than at first use.
            exports.check(&mut store, &instance)?;
            exports
                .strategy
                .load(&mut store, &instance)?
                .call_describe(&mut store)
                .await
                .map_err(|err| anyhow::Error::new(self.call_error(err, &store)))
        })
        .await;
        let descriptor = match described {
            Ok(described) => described.context("describe() failed")?,
            Err(_) => anyhow::bail!(
                "describe() failed: {}",
                CallError::DeadlineExceeded(self.limits.timeout)
            ),
        };
        let role = exports.role();
        let uses_redis = component
            .component_type()
            .imports(&self.engine)
            .any(|(name, _)| name.starts_with("couponlab:strategy/redis"));
        Ok(Prepared {
            pre,
            exports,
            role,
            uses_redis,
            descriptor,
        })
    }

    /// Runs one issue request on a fresh instance of `strategy`. A call that
    /// ends midway (a trap, the deadline) is torn down — its transactions
    /// rolled back — and then the strategy's `compensate` runs with the same
    /// request in a fresh instance, so it can undo what the database does
    /// not hold.
    pub async fn issue(
        &self,
        strategy: &Arc<Strategy>,
        request: &IssueRequest,
    ) -> Result<IssueResult, Unanswered> {
        let error = match self
            .call(strategy, async |store, instance| {
                let guest = strategy.exports.strategy.load(&mut *store, instance)?;
                guest.call_issue(store, request).await
            })
            .await
        {
            Ok(result) => return Ok(result),
            Err(error) => error,
        };
        if !error.ended_midway() {
            return Err(Unanswered {
                error,
                compensation: None,
            });
        }
        let compensation = self
            .call(strategy, async |store, instance| {
                let guest = strategy.exports.strategy.load(&mut *store, instance)?;
                guest.call_compensate(store, request).await
            })
            .await;
        if let Err(failed) = &compensation {
            tracing::error!(method = %strategy.method, error = %failed, "compensation failed");
        }
        Err(Unanswered {
            error,
            compensation: Some(compensation),
        })
    }

    /// Runs a job `strategy` submitted (stage 4).
    pub async fn run_job(
        &self,
        strategy: &Arc<Strategy>,
        payload: &str,
    ) -> Result<Confirmation, CallError> {
        let indices = strategy
            .exports
            .job_runner
            .as_ref()
            .ok_or_else(|| strategy.unsupported("job-runner"))?;
        self.call(strategy, async |store, instance| {
            indices
                .load(&mut *store, instance)?
                .call_run_job(store, payload)
                .await
        })
        .await
    }

    /// Hands one pub/sub message to `strategy` (stage 5).
    pub async fn handle_message(
        &self,
        strategy: &Arc<Strategy>,
        payload: &str,
    ) -> Result<Option<Confirmation>, CallError> {
        let indices = strategy
            .exports
            .message_handler
            .as_ref()
            .ok_or_else(|| strategy.unsupported("message-handler"))?;
        self.call(strategy, async |store, instance| {
            indices
                .load(&mut *store, instance)?
                .call_handle_message(store, payload)
                .await
        })
        .await
    }

    /// Hands one stream entry to `strategy` (stage 6).
    pub async fn handle_entry(
        &self,
        strategy: &Arc<Strategy>,
        entry: &StreamEntry,
    ) -> Result<Handled, CallError> {
        let indices = strategy
            .exports
            .stream_consumer
            .as_ref()
            .ok_or_else(|| strategy.unsupported("stream-consumer"))?;
        self.call(strategy, async |store, instance| {
            indices
                .load(&mut *store, instance)?
                .call_handle_entry(store, entry)
                .await
        })
        .await
    }

    /// Asks `strategy` to undo a dead-lettered entry (stage 6).
    pub async fn dead_letter(
        &self,
        strategy: &Arc<Strategy>,
        entry: &StreamEntry,
    ) -> Result<Confirmation, CallError> {
        let indices = strategy
            .exports
            .stream_consumer
            .as_ref()
            .ok_or_else(|| strategy.unsupported("stream-consumer"))?;
        self.call(strategy, async |store, instance| {
            indices
                .load(&mut *store, instance)?
                .call_dead_letter(store, entry)
                .await
        })
        .await
    }

    /// Writes a batch of write-behind entries in one transaction (stage 9).
    pub async fn load_batch(
        &self,
        strategy: &Arc<Strategy>,
        entries: &[StreamEntry],
    ) -> Result<Result<(), String>, CallError> {
        let indices = strategy
            .exports
            .write_behind
            .as_ref()
            .ok_or_else(|| strategy.unsupported("write-behind"))?;
        self.call(strategy, async |store, instance| {
            indices
                .load(&mut *store, instance)?
                .call_load_batch(store, entries)
                .await
        })
        .await
    }

    /// Writes one write-behind entry alone (stage 9).
    pub async fn load_entry(
        &self,
        strategy: &Arc<Strategy>,
        entry: &StreamEntry,
    ) -> Result<Result<(), String>, CallError> {
        let indices = strategy
            .exports
            .write_behind
            .as_ref()
            .ok_or_else(|| strategy.unsupported("write-behind"))?;
        self.call(strategy, async |store, instance| {
            indices
                .load(&mut *store, instance)?
                .call_load_entry(store, entry)
                .await
        })
        .await
    }

    /// Reconciles one coupon's DB rows with its Redis set (stage 9).
    pub async fn reconcile(
        &self,
        strategy: &Arc<Strategy>,
        coupon_id: u64,
    ) -> Result<Result<ReconcileReport, String>, CallError> {
        let indices = strategy
            .exports
            .write_behind
            .as_ref()
            .ok_or_else(|| strategy.unsupported("write-behind"))?;
        self.call(strategy, async |store, instance| {
            indices
                .load(&mut *store, instance)?
                .call_reconcile(store, coupon_id)
                .await
        })
        .await
    }

    /// Cancels a limited-drop reservation (seed 000).
    pub async fn cancel(
        &self,
        strategy: &Arc<Strategy>,
        coupon_id: u64,
        member_id: u64,
        idempotency_key: &str,
    ) -> Result<Result<bool, String>, CallError> {
        let indices = strategy
            .exports
            .drop_gate
            .as_ref()
            .ok_or_else(|| strategy.unsupported("drop-gate"))?;
        self.call(strategy, async |store, instance| {
            indices
                .load(&mut *store, instance)?
                .call_cancel(store, coupon_id, member_id, idempotency_key)
                .await
        })
        .await
    }

    /// Seeds a limited drop's stock if it is not seeded yet (seed 000).
    pub async fn seed(
        &self,
        strategy: &Arc<Strategy>,
        coupon_id: u64,
        quantity: u32,
        ttl_seconds: u32,
    ) -> Result<Result<SeedAnswer, String>, CallError> {
        let indices = strategy
            .exports
            .drop_gate
            .as_ref()
            .ok_or_else(|| strategy.unsupported("drop-gate"))?;
        self.call(strategy, async |store, instance| {
            indices
                .load(&mut *store, instance)?
                .call_seed(store, coupon_id, quantity, ttl_seconds)
                .await
        })
        .await
    }

    /// Instantiates `strategy` in a fresh store and runs `body` on it, within
    /// the deadline. Returns once the store is gone and what it left open is
    /// cleaned up: transactions rolled back (or their connections closed),
    /// dedicated connections reset or closed.
    async fn call<R>(
        &self,
        strategy: &Arc<Strategy>,
        body: impl AsyncFnOnce(&mut Store<HostState>, &Instance) -> wasmtime::Result<R>,
    ) -> Result<R, CallError> {
        let cleanup = TaskTracker::new();
        let mut store = self.new_store(
            Some(strategy.clone()),
            strategy.method.clone(),
            cleanup.clone(),
        );
        let call = async {
            let instance = self.instantiate(&strategy.pre, &mut store).await?;
            body(&mut store, &instance)
                .await
                .map_err(|err| self.call_error(err, &store))
        };
        let result = tokio::time::timeout(self.limits.timeout + TIMEOUT_GRACE, call)
            .await
            // A host call stuck past the deadline: the call is dropped where
            // it stands, and the store's resources with it below.
            .unwrap_or(Err(CallError::DeadlineExceeded(self.limits.timeout)));
        drop(store);
        cleanup.close();
        if tokio::time::timeout(CLEANUP_LIMIT, cleanup.wait())
            .await
            .is_err()
        {
            tracing::warn!(method = %strategy.method, "a failed call's clean-up did not finish in {CLEANUP_LIMIT:?}");
        }
        result
    }

    async fn instantiate(
        &self,
        pre: &InstancePre<HostState>,
        store: &mut Store<HostState>,
    ) -> Result<Instance, CallError> {
        pre.instantiate_async(&mut *store).await.map_err(|err| {
            if err.is::<PoolConcurrencyLimitError>() {
                CallError::Busy(self.limits.max_instances)
            } else {
                self.call_error(err, store)
            }
        })
    }

    fn new_store(
        &self,
        strategy: Option<Arc<Strategy>>,
        method: Arc<str>,
        cleanup: TaskTracker,
    ) -> Store<HostState> {
        let deadline = Instant::now() + self.limits.timeout;
        let state = HostState::new(
            self.caps.clone(),
            strategy,
            method,
            deadline,
            self.limits.memory_bytes,
            cleanup,
        );
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| state.limiter());
        store.set_epoch_deadline(1);
        // Checked at every tick while wasm runs: past the deadline the guest
        // traps; before it, the guest yields so a busy loop cannot hold a
        // runtime thread for long.
        store.epoch_deadline_callback(move |_| {
            if Instant::now() >= deadline {
                Err(wasmtime::Error::new(DeadlineExceeded))
            } else {
                Ok(UpdateDeadline::Yield(1))
            }
        });
        store
    }

    fn call_error(&self, err: wasmtime::Error, store: &Store<HostState>) -> CallError {
        if err.is::<DeadlineExceeded>() {
            return CallError::DeadlineExceeded(self.limits.timeout);
        }
        let stderr = store.data().stderr();
        let trap = match err.downcast_ref::<wasmtime::Trap>() {
            Some(trap) => trap.to_string(),
            None => format!("{err:#}"),
        };
        if stderr.is_empty() {
            CallError::Trapped(trap)
        } else {
            CallError::Trapped(format!("{trap}; stderr: {stderr}"))
        }
    }
}

/// Advances the engine's epoch every [`EPOCH_TICK`] for as long as the
/// engine is alive.
fn spawn_epoch_ticker(engine: &Engine) {
    let engine = engine.weak();
    std::thread::Builder::new()
        .name("epoch-ticker".into())
        .spawn(move || {
            while let Some(engine) = engine.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        })
        .expect("spawning the epoch ticker thread");
}
