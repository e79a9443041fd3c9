//! One call into a component: a fresh store and instance, the deadline, the
//! clean-up of what the call left open, the issue call and its
//! compensation. Loading a component is a call too (`describe`). The other
//! exports' typed calls are [`super::exports`]'; what a call's end is made
//! of, and what is read from it, is [`super::ended`]'s.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_util::task::TaskTracker;
use tracing::Instrument;
use wasmtime::component::{Component, Instance, InstancePre};
use wasmtime::{PoolConcurrencyLimitError, Store, UpdateDeadline};

use super::bindings::types::{Compensation, IssueRequest};
use super::call_context::{self, CallContext, Quarantiner};
use super::ended::{CallError, Ended, Run};
use super::engine::Runtime;
use super::exports::Export;
use super::loaded::{Prepared, Strategy};
use super::store::HostState;
use super::trace::CallTrace;
use super::world::World;
use crate::budget::{self, Stage};

/// Extra time the async timeout allows past the deadline, so a guest that is
/// executing wasm is stopped by its epoch deadline (a clean trap) and the
/// timeout only catches a host call stuck past it.
const TIMEOUT_GRACE: Duration = Duration::from_millis(500);

/// How long the clean-up of a failed call (rolling back its transactions)
/// may take before its strategy is asked to compensate anyway.
const CLEANUP_LIMIT: Duration = Duration::from_secs(5);

/// How long loading a component waits for a free instance of the pool.
const LOADING_WAIT: Duration = Duration::from_secs(60);
/// How often it looks.
const BUSY_LOOK: Duration = Duration::from_millis(20);

/// An instance counted as in use for as long as this lives.
struct InUse<'a>(&'a prometheus::IntGauge);

impl<'a> InUse<'a> {
    fn count(gauge: &'a prometheus::IntGauge) -> Self {
        gauge.inc();
        Self(gauge)
    }
}

impl Drop for InUse<'_> {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// The error an expired epoch deadline raises inside the guest.
#[derive(Debug, thiserror::Error)]
#[error("deadline exceeded")]
struct DeadlineExceeded;

impl Runtime {
    /// Checks a compiled component against the worlds the host knows: every
    /// import provided by the host, the `strategy` export, and the types of
    /// its world's own export. Then asks it what it is.
    pub(super) async fn prepare(&self, component: &Component) -> anyhow::Result<Prepared> {
        let pre = self
            .linker
            .instantiate_pre(component)
            .map_err(anyhow::Error::from)
            .context("it imports something the host does not provide")?;
        let (strategy_export, world) = World::find(component)?;
        let (mut store, instance) = self.instance_for_loading(&pre).await?;
        // Loading runs the guest too: under the same deadline as a call, so a
        // component that hangs in describe() is rejected, not waited for.
        let described = tokio::time::timeout(self.limits.timeout + TIMEOUT_GRACE, async {
            // Every export is type-checked now rather than at first use.
            world.check(&mut store, &instance)?;
            strategy_export
                .check(&mut store, &instance)
                .map_err(|err| {
                    anyhow::anyhow!("its strategy export does not have the host's types: {err}")
                })?;
            strategy_export
                .describe(&mut store, &instance)
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
        Ok(Prepared {
            pre,
            strategy_export,
            world,
            descriptor,
        })
    }

    /// Runs one issue request on a fresh instance of `strategy`. A call that
    /// ends midway (a trap, the deadline) is torn down — its transactions
    /// rolled back — and then the strategy's `compensate` runs with the same
    /// request in a fresh instance, so it can undo what the database does
    /// not hold.
    pub async fn issue(&self, strategy: &Arc<Strategy>, request: &IssueRequest) -> Ended {
        let started = Instant::now();
        let export = Some(&strategy.strategy_export);
        let Run {
            result,
            scripts_killed,
            mut trace,
        } = self
            .call_export(strategy, export, async |export, store, instance| {
                export.issue(store, instance, request).await
            })
            .await;
        let compensation = match &result {
            Err(error) if error.ended_midway() => {
                let compensated = self.compensation(strategy, request).await;
                trace.append_compensation(compensated.trace);
                if let Err(failed) = &compensated.result {
                    tracing::error!(method = %strategy.method, error = %failed, "compensation failed");
                }
                Some(compensated.result)
            }
            _ => None,
        };
        Ended {
            coupon_id: request.coupon_id,
            member_id: request.member_id,
            answer: result,
            compensation,
            scripts_killed,
            took: started.elapsed(),
            trace,
        }
    }

    /// Asks `strategy` to undo what `request` may have done: after a call
    /// that ended midway, and for a request to be settled later.
    pub async fn compensate(
        &self,
        strategy: &Arc<Strategy>,
        request: &IssueRequest,
    ) -> Result<Compensation, CallError> {
        self.compensation(strategy, request).await.result
    }

    async fn compensation(
        &self,
        strategy: &Arc<Strategy>,
        request: &IssueRequest,
    ) -> Run<Compensation> {
        let export = Some(&strategy.strategy_export);
        self.call_export(strategy, export, async |export, store, instance| {
            export.compensate(store, instance, request).await
        })
        .await
    }

    /// Calls one export of `strategy` (`None`: its world has no such
    /// export, and the call is `Unsupported`) with `body`.
    pub(super) async fn call_export<E: Export, R>(
        &self,
        strategy: &Arc<Strategy>,
        export: Option<&E>,
        body: impl AsyncFnOnce(&E, &mut Store<HostState>, &Instance) -> wasmtime::Result<R>,
    ) -> Run<R> {
        let Some(export) = export else {
            return Run::without_running(CallError::Unsupported {
                method: strategy.method.to_string(),
                world: strategy.world.name(),
                export: E::NAME,
            });
        };
        // One span per strategy call, its capability calls inside it.
        let span =
            tracing::debug_span!("strategy.call", method = %strategy.method, export = E::NAME);
        self.call(strategy, async |store, instance| {
            body(export, store, instance).await
        })
        .instrument(span)
        .await
    }

    /// Instantiates `strategy` in a fresh store and runs `body` on it, within
    /// the deadline. Returns once the store is gone and what it left open is
    /// cleaned up: transactions rolled back (or their connections closed),
    /// dedicated connections reset or closed. A quarantined component is
    /// not run.
    async fn call<R>(
        &self,
        strategy: &Arc<Strategy>,
        body: impl AsyncFnOnce(&mut Store<HostState>, &Instance) -> wasmtime::Result<R>,
    ) -> Run<R> {
        if let Some(quarantine) = strategy.quarantined() {
            return Run::without_running(CallError::Quarantined(quarantine.reason.clone()));
        }
        budget::call_starts(&strategy.method);
        let cleanup = TaskTracker::new();
        let mut store = self.new_store(
            Some(strategy.clone()),
            strategy.method.clone(),
            cleanup.clone(),
        );
        budget::lap(Stage::Store);
        let call = async {
            let instance = self.instantiate(&strategy.pre, &mut store).await?;
            budget::lap(Stage::Instantiate);
            let _in_use = InUse::count(&self.metrics.instances_in_use);
            let result = body(&mut store, &instance).await;
            budget::lap(Stage::Boundary);
            result.map_err(|err| self.call_error(err, &store))
        };
        let result = tokio::time::timeout(self.limits.timeout + TIMEOUT_GRACE, call)
            .await
            // A host call stuck past the deadline: the call is dropped where
            // it stands, and the store's resources with it below.
            .unwrap_or(Err(CallError::DeadlineExceeded(self.limits.timeout)));
        let scripts_killed = store.data().redis.scripts_killed;
        let trace = std::mem::take(&mut store.data_mut().call.trace);
        if result.is_ok() && store.data().holds_nothing() {
            // Nothing to release or clean up: the store (its slot's memory
            // reset in place) goes after the answer, off the request's path.
            tokio::spawn(async move { drop(store) });
            budget::lap(Stage::Teardown);
            return Run {
                result,
                scripts_killed,
                trace,
            };
        }
        drop(store);
        cleanup.close();
        if tokio::time::timeout(CLEANUP_LIMIT, cleanup.wait())
            .await
            .is_err()
        {
            tracing::warn!(method = %strategy.method, "a failed call's clean-up did not finish in {CLEANUP_LIMIT:?}");
        }
        // A call ended midway may have left a session behind on a lost
        // connection, a COMMIT maybe still in it: what comes next (its
        // compensation) reads the database only once it is gone.
        if matches!(&result, Err(error) if error.ended_midway())
            && !self.caps.sql.orphans.until_none(CLEANUP_LIMIT).await
        {
            tracing::warn!(method = %strategy.method, "a lost session of a failed call was not ended in {CLEANUP_LIMIT:?}");
        }
        if let Err(error) = &result
            && strategy.serving()
        {
            self.metrics
                .call_failures
                .with_label_values(&[&*strategy.method, error.reason()])
                .inc();
        }
        budget::lap(Stage::Teardown);
        Run {
            result,
            scripts_killed,
            trace,
        }
    }

    /// A store and an instance to load a component with. While every
    /// instance of the pool serves a call (canaries bursting side by side),
    /// loading waits for one, up to [`LOADING_WAIT`], rather than refuse a
    /// component for the pool's moment; the store is made once the instance
    /// is, so the wait does not eat the call's deadline.
    async fn instance_for_loading(
        &self,
        pre: &InstancePre<HostState>,
    ) -> anyhow::Result<(Store<HostState>, Instance)> {
        let give_up = Instant::now() + LOADING_WAIT;
        loop {
            let mut store = self.new_store(None, Arc::from("(loading)"), TaskTracker::new());
            match self.instantiate(pre, &mut store).await {
                Ok(instance) => return Ok((store, instance)),
                Err(CallError::Busy(_)) if Instant::now() < give_up => {
                    tokio::time::sleep(BUSY_LOOK).await;
                }
                Err(err) => return Err(anyhow::Error::new(err).context("describe() failed")),
            }
        }
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
        let jobs = strategy
            .as_ref()
            .filter(|strategy| strategy.world.job_runner().is_some())
            .map(|strategy| self.caps.jobs.submitter(strategy.clone()));
        let call = CallContext {
            method,
            deadline,
            cleanup,
            trace: CallTrace::recording(self.limits.trace_calls),
            quarantine: strategy.map_or_else(Quarantiner::default, |strategy| {
                Quarantiner::new(move |reason| strategy.quarantine(reason))
            }),
            node: call_context::node(),
        };
        let state = HostState::new(self.caps.shared(), call, jobs, self.limits.memory_bytes);
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| state.limiter());
        if budget::enabled() {
            store.call_hook(|_, crossing| {
                budget::crossing(crossing);
                Ok(())
            });
        }
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
        let trap = match err.downcast_ref::<wasmtime::Trap>() {
            Some(trap) => trap.to_string(),
            None => format!("{err:#}"),
        };
        // What the guest said of it: an interpreter's traceback on stderr,
        // a Rust panic's message in the log.
        let stderr = store.data().stderr();
        CallError::Trapped(match &store.data().log.last_error {
            _ if !stderr.is_empty() => format!("{trap}; stderr: {stderr}"),
            Some(logged) => format!("{trap}; logged: {logged}"),
            None => trap,
        })
    }
}
