//! The engine every component runs on, built once per server: the pooling
//! allocator's settings, epoch interruption, the linker with every
//! capability, and the cache of compiled components.

use std::collections::VecDeque;
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use wasmtime::component::{Component, Linker};
use wasmtime::{
    Cache, CacheConfig, Config, Enabled, Engine, InstanceAllocationStrategy,
    PoolingAllocationConfig,
};

use super::capabilities::Capabilities;
use super::loaded::Strategy;
use super::store::{self, HostState};
use crate::metrics::Metrics;

/// The sandbox every call runs in.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Wall-clock budget of one call, host calls included.
    pub timeout: Duration,
    /// Linear memory one instance may grow to.
    pub memory_bytes: usize,
    /// Instances alive at once (the pool's size).
    pub max_instances: u32,
    /// Whether each call records its capability calls (`COUPONLAB_TRACES`).
    pub trace_calls: bool,
}

/// How often the engine's epoch advances: the granularity of deadlines, and
/// how often a busy guest yields its thread to other requests.
const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Bytes of each slot's linear memory and tables kept resident between
/// calls: the components' stack, data and usual heap fit in it.
const KEEP_RESIDENT: usize = 2 << 20;

/// Slots whose extra pages are given back to the kernel together.
const DECOMMIT_BATCH: usize = 32;

/// Compiled components kept in memory, by content hash.
const COMPILED_CACHE: usize = 32;

/// What the pool gives each instance. A Rust component built by
/// wasm-component-ld holds its program's core instance and a few shim
/// instances; a componentize-py one a dozen or so (the interpreter
/// and its libraries are dynamically linked modules, each a core instance
/// and a table); a componentize-js one a few. Core instances and tables
/// are counts and small reservations; memories reserve address space, and
/// every component here needs one (an interpreter's heap starts at 9 to
/// 13 MiB, a Rust component's at 1).
const CORE_INSTANCES_PER_INSTANCE: u32 = 24;
const TABLES_PER_INSTANCE: u32 = 24;
const MEMORIES_PER_INSTANCE: u32 = 2;

pub struct Runtime {
    pub(super) engine: Engine,
    pub(super) linker: Linker<HostState>,
    pub(super) caps: Arc<Capabilities<Strategy>>,
    pub(super) limits: Limits,
    /// Instances in use, failed calls and component changes are counted here.
    pub(super) metrics: Arc<Metrics>,
    /// Recently compiled components by the SHA-256 of their bytes, newest
    /// last, so switching back to a build seen before costs no compilation.
    /// Keyed by content and compiled from bytes read into memory: nothing
    /// here is ever mapped from a file that could change under it.
    compiled: Mutex<VecDeque<(String, Component)>>,
}

impl Runtime {
    pub fn new(
        caps: Arc<Capabilities<Strategy>>,
        limits: Limits,
        compile_cache: Option<&Path>,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<Self> {
        let mut config = engine_config(&limits);
        config.cache(compile_cache.map(open_compile_cache).transpose()?);
        let engine = Engine::new(&config)
            .map_err(anyhow::Error::from)
            .context("cannot create the wasm engine")?;
        spawn_epoch_ticker(&engine);

        // WASI is in the linker for the interpreters (Python, JavaScript)
        // that import it; a component is linked only to what it imports,
        // so a Rust one, whose only imports are the lab's, links none of it.
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(anyhow::Error::from)
            .context("cannot link WASI")?;
        store::link(&mut linker)
            .map_err(anyhow::Error::from)
            .context("cannot link the couponlab capabilities")?;
        Ok(Self {
            engine,
            linker,
            caps,
            limits,
            metrics,
            compiled: Mutex::new(VecDeque::new()),
        })
    }

    pub fn capabilities(&self) -> &Arc<Capabilities<Strategy>> {
        &self.caps
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Counts a component file loaded, replaced, unloaded or rejected.
    pub(super) fn count_change(&self, method: &str, change: &str) {
        self.metrics
            .component_changes
            .with_label_values(&[method, change])
            .inc();
        if matches!(change, "loaded" | "replaced") {
            self.metrics.show_method(method);
        }
    }

    /// Refuses a component one instance of which needs more of the pool
    /// than it gives an instance, saying how much: it would otherwise load,
    /// and then fail every call, or take the slots of others.
    pub(super) fn fits_pool(&self, component: &Component) -> Result<(), String> {
        let Some(needs) = component.resources_required() else {
            return Err("its instances need resources that cannot be known before it runs (it instantiates an imported module)".into());
        };
        tracing::debug!(memories = needs.num_memories, tables = needs.num_tables, initial_memory = ?needs.max_initial_memory_size, "a component's pool needs");
        // In wasm pages of 64 KiB.
        let memory = needs.max_initial_memory_size.unwrap_or(0) << 16;
        let limit = self.limits.memory_bytes as u64;
        if needs.num_memories > MEMORIES_PER_INSTANCE {
            return Err(format!(
                "an instance of it needs {} linear memories; the pool gives each instance {MEMORIES_PER_INSTANCE}",
                needs.num_memories
            ));
        }
        if needs.num_tables > TABLES_PER_INSTANCE {
            return Err(format!(
                "an instance of it needs {} tables; the pool gives each instance {TABLES_PER_INSTANCE}",
                needs.num_tables
            ));
        }
        if memory > limit {
            return Err(format!(
                "its memory starts at {} MiB; an instance may grow to {} MiB (COUPONLAB_STRATEGY_MEMORY_MIB)",
                memory >> 20,
                limit >> 20
            ));
        }
        Ok(())
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
}

/// The engine's settings for `limits`: the pooling allocator sized for
/// them, and epoch interruption for deadlines.
pub(super) fn engine_config(limits: &Limits) -> Config {
    let instances = limits.max_instances.max(1);
    let mut pool = PoolingAllocationConfig::default();
    pool.total_component_instances(instances)
        .total_core_instances(instances.saturating_mul(CORE_INSTANCES_PER_INSTANCE))
        .total_memories(instances.saturating_mul(MEMORIES_PER_INSTANCE))
        .total_tables(instances.saturating_mul(TABLES_PER_INSTANCE))
        .total_stacks(instances)
        .max_tables_per_module(4)
        .max_memory_size(limits.memory_bytes)
        // A slot's pages stay mapped between calls and are reset in place
        // (the pages a call dirtied are found with PAGEMAP_SCAN where the
        // kernel has it): returning them to the kernel after every call
        // cost a TLB shootdown on both cores per call and a page fault
        // per page touched by the next one. Each call still starts from
        // the component's initial memory. The scan is wasmtime 50's
        // (vendor/README.md): 48's stopped after 32 runs of dirty pages and
        // dropped the rest, so an interpreter's heap was faulted in again
        // every call, and it skipped a dirty page the kernel had swapped
        // out, which could reach the next call.
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
    config
}

/// wasmtime's compile cache in `dir`, created readable and writable by this
/// user alone: a component compiled once (by this server or another
/// sharing the directory, the tests' many servers among them) loads in
/// milliseconds at the next start instead of seconds.
fn open_compile_cache(dir: &Path) -> anyhow::Result<Cache> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .and_then(|()| std::fs::canonicalize(dir))
        .map_err(anyhow::Error::from)
        .and_then(|dir| {
            let mut config = CacheConfig::new();
            config.with_directory(dir);
            Cache::new(config).map_err(anyhow::Error::from)
        })
        .with_context(|| {
            format!(
                "cannot open the compile cache {} (COUPONLAB_COMPILE_CACHE; `off` keeps none)",
                dir.display()
            )
        })
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
