//! The `permits` capability (seed 000): named in-process semaphores whose
//! permits outlive a request. A permit is held under a token (the
//! reservation) from `try-acquire` until `release`, which may come from a
//! later request. A permit never released is dropped when its lease runs
//! out, so a gate cannot leak shut. It also hands the gate the operator's
//! `COUPONLAB_GATE_FAIL_OPEN`, which the component acts on.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use wasmtime::component::HasData;

use super::bindings::permits;
use super::call_context::CallContext;

/// Gates one server may hold: a component cannot grow the map without bound.
const MAX_GATES: usize = 1024;

/// The `permits` capability's settings.
#[derive(Debug, Clone, clap::Args)]
pub struct PermitsArgs {
    /// Permits of each gate (the limited drop's semaphore buffer). At least
    /// 1: a gate without permits refuses every request.
    #[arg(long = "permits", env = "COUPONLAB_PERMITS", default_value_t = 32, value_parser = clap::value_parser!(u64).range(1..))]
    pub per_gate: u64,

    /// How long a gate waits for a permit when the component does not say.
    #[arg(long, env = "COUPONLAB_PERMIT_TIMEOUT_MS", default_value_t = 100)]
    pub permit_timeout_ms: u64,

    /// How long a permit may stay unreleased before the host drops it.
    #[arg(long, env = "COUPONLAB_PERMIT_LEASE_MS", default_value_t = 30_000)]
    pub permit_lease_ms: u64,

    /// What a gate does when Redis cannot give its verdict: `on` serves
    /// through the component's database path (seed 000's BE-03), `off`
    /// answers 503. Passed to the component, which decides.
    #[arg(long = "gate-fail-open", env = "COUPONLAB_GATE_FAIL_OPEN", default_value = "on", value_parser = clap::builder::BoolishValueParser::new())]
    pub gate_fail_open: bool,
}

impl PermitsArgs {
    pub fn settings(&self) -> PermitSettings {
        PermitSettings {
            per_gate: usize::try_from(self.per_gate).unwrap_or(usize::MAX),
            acquire_timeout: Duration::from_millis(self.permit_timeout_ms),
            lease: Duration::from_millis(self.permit_lease_ms),
            fail_open: self.gate_fail_open,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct PermitSettings {
    /// Permits of each gate.
    pub per_gate: usize,
    /// How long `try-acquire` waits when the component does not say.
    pub acquire_timeout: Duration,
    /// How long a permit may be held without being released.
    pub lease: Duration,
    /// Whether a gate serves without Redis (`COUPONLAB_GATE_FAIL_OPEN`).
    pub fail_open: bool,
}

pub struct Permits {
    settings: PermitSettings,
    gates: Arc<Mutex<HashMap<String, Arc<Gate>>>>,
}

struct Gate {
    semaphore: Arc<Semaphore>,
    held: Mutex<HashMap<String, Lease>>,
}

struct Lease {
    _permit: OwnedSemaphorePermit,
    expires: Instant,
}

impl Permits {
    /// Creates the gates' map and a task that drops expired leases; the task
    /// ends when the `Permits` is dropped.
    pub fn new(settings: PermitSettings) -> Self {
        let gates: Arc<Mutex<HashMap<String, Arc<Gate>>>> = Arc::default();
        let weak = Arc::downgrade(&gates);
        let every = (settings.lease / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
        tokio::spawn(reap_expired(weak, every));
        Self { settings, gates }
    }

    pub fn settings(&self) -> PermitSettings {
        self.settings
    }

    /// Takes a permit of `gate` for `token`, waiting at most `timeout`.
    pub async fn try_acquire(&self, gate: &str, token: &str, timeout: Duration) -> bool {
        let Some(gate) = self.gate(gate) else {
            return false;
        };
        if gate.held.lock().contains_key(token) {
            return true;
        }
        let Ok(Ok(permit)) =
            tokio::time::timeout(timeout, gate.semaphore.clone().acquire_owned()).await
        else {
            return false;
        };
        // Should the same token have won a permit meanwhile, this one drops
        // here and goes back to the gate.
        gate.held.lock().entry(token.to_string()).or_insert(Lease {
            _permit: permit,
            expires: Instant::now() + self.settings.lease,
        });
        true
    }

    /// Gives back the permit `token` holds.
    pub fn release(&self, gate: &str, token: &str) -> bool {
        let gate = self.gates.lock().get(gate).cloned();
        gate.is_some_and(|gate| gate.held.lock().remove(token).is_some())
    }

    /// Permits held now, by gate.
    pub fn held(&self) -> Vec<(String, usize)> {
        self.gates
            .lock()
            .iter()
            .map(|(name, gate)| (name.clone(), gate.held.lock().len()))
            .collect()
    }

    fn gate(&self, name: &str) -> Option<Arc<Gate>> {
        let mut gates = self.gates.lock();
        if let Some(gate) = gates.get(name) {
            return Some(gate.clone());
        }
        if gates.len() >= MAX_GATES {
            tracing::warn!(gate = name, "too many permit gates; refusing a new one");
            return None;
        }
        let gate = Arc::new(Gate {
            semaphore: Arc::new(Semaphore::new(self.settings.per_gate)),
            held: Mutex::new(HashMap::new()),
        });
        gates.insert(name.to_string(), gate.clone());
        Some(gate)
    }
}

async fn reap_expired(gates: Weak<Mutex<HashMap<String, Arc<Gate>>>>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    loop {
        ticks.tick().await;
        let Some(gates) = gates.upgrade() else { return };
        let gates: Vec<Arc<Gate>> = gates.lock().values().cloned().collect();
        let now = Instant::now();
        for gate in gates {
            gate.held.lock().retain(|_, lease| lease.expires > now);
        }
    }
}

/// The `permits` capability as the linker knows it: its imports work on a
/// [`PermitsView`].
impl HasData for Permits {
    type Data<'a> = PermitsView<'a>;
}

/// What the permits reach of one call: the server's gates.
pub struct PermitsView<'a> {
    pub permits: &'a Permits,
    pub call: &'a CallContext,
}

impl permits::Host for PermitsView<'_> {
    /// Waits no longer than the call's own deadline.
    #[tracing::instrument(name = "permits.try_acquire", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn try_acquire(
        &mut self,
        gate: String,
        token: String,
        timeout_ms: Option<u32>,
    ) -> wasmtime::Result<bool> {
        let wanted = timeout_ms.map_or(self.permits.settings().acquire_timeout, |ms| {
            Duration::from_millis(ms.into())
        });
        let wait = wanted.min(self.call.left());
        Ok(self.permits.try_acquire(&gate, &token, wait).await)
    }

    #[tracing::instrument(name = "permits.release", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn release(&mut self, gate: String, token: String) -> wasmtime::Result<bool> {
        Ok(self.permits.release(&gate, &token))
    }

    #[tracing::instrument(name = "permits.fail_open", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn fail_open(&mut self) -> wasmtime::Result<bool> {
        Ok(self.permits.settings().fail_open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Duration = Duration::ZERO;

    fn permits(per_gate: usize, lease: Duration) -> Permits {
        Permits::new(PermitSettings {
            per_gate,
            acquire_timeout: Duration::from_millis(10),
            lease,
            fail_open: true,
        })
    }

    #[tokio::test]
    async fn a_permit_is_held_by_its_token_until_released() {
        let permits = permits(1, Duration::from_secs(60));
        assert!(permits.try_acquire("drop", "a", NOW).await);
        // The same token asking again keeps its one permit.
        assert!(permits.try_acquire("drop", "a", NOW).await);
        assert!(
            !permits
                .try_acquire("drop", "b", Duration::from_millis(20))
                .await
        );
        // Gates are independent.
        assert!(permits.try_acquire("other", "b", NOW).await);

        assert!(permits.release("drop", "a"));
        assert!(!permits.release("drop", "a"), "released twice");
        assert!(!permits.release("nowhere", "a"));
        assert!(permits.try_acquire("drop", "b", NOW).await);
    }

    #[tokio::test]
    async fn a_waiter_gets_the_permit_released_while_it_waits() {
        let permits = Arc::new(permits(1, Duration::from_secs(60)));
        assert!(permits.try_acquire("drop", "a", NOW).await);
        let waiter = {
            let permits = permits.clone();
            tokio::spawn(async move {
                permits
                    .try_acquire("drop", "b", Duration::from_secs(5))
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(permits.release("drop", "a"));
        assert!(waiter.await.unwrap());
    }

    #[tokio::test]
    async fn a_permit_never_released_comes_back_when_its_lease_runs_out() {
        let lease = Duration::from_millis(200);
        let permits = permits(1, lease);
        let taken = Instant::now();
        assert!(permits.try_acquire("drop", "leaked", NOW).await);
        assert!(
            !permits
                .try_acquire("drop", "b", Duration::from_millis(50))
                .await
        );

        assert!(
            permits
                .try_acquire("drop", "b", Duration::from_secs(5))
                .await
        );
        assert!(
            taken.elapsed() >= lease,
            "freed after {:?}",
            taken.elapsed()
        );
        // The expired lease is gone: releasing it now gives nothing back.
        assert!(!permits.release("drop", "leaked"));
        assert!(permits.release("drop", "b"));
    }
}
