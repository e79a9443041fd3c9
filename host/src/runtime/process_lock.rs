//! The `process-lock` capability: named locks inside this server process,
//! as Java's `synchronized` — they exclude the calls of this process only,
//! which is IN_PROCESS_LOCK's lesson on two hosts. A call holds a lock from
//! `acquire` until `release` or its end: the locks it holds live in its
//! store ([`HeldLocks`]) and are released when the store goes, however the
//! call ended.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use couponlab_contract::keys::LOCK_PREFIX;
use parking_lot::Mutex;
use prometheus::IntGauge;
use tokio::sync::OwnedMutexGuard;
use wasmtime::component::HasData;

use super::bindings::process_lock;
use super::call_context::CallContext;

/// The longest lock name.
const MAX_NAME: usize = 200;
/// Locks the map keeps before it forgets those nobody holds or waits for.
const KEPT: usize = 4096;

/// The `process-lock` capability's settings.
#[derive(Debug, Clone, clap::Args)]
pub struct ProcessLockArgs {
    /// Locks one call may hold at once.
    #[arg(long, env = "COUPONLAB_PROCESS_LOCKS_PER_CALL", default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub process_locks_per_call: u32,
}

/// This process's named locks.
pub struct ProcessLocks {
    per_call: usize,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Locks held now, in `/metrics`.
    held: IntGauge,
}

/// The locks one call holds; dropping it releases them.
#[derive(Default)]
pub struct HeldLocks(HashMap<String, Held>);

impl HeldLocks {
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

struct Held {
    _guard: OwnedMutexGuard<()>,
    gauge: IntGauge,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

impl ProcessLocks {
    pub fn new(args: &ProcessLockArgs, held: IntGauge) -> Self {
        Self {
            per_call: args.process_locks_per_call as usize,
            locks: Mutex::default(),
            held,
        }
    }

    /// Takes `name` for the call holding `held`, waiting at most `wait`.
    pub async fn acquire(
        &self,
        held: &mut HeldLocks,
        name: &str,
        wait: Duration,
    ) -> Result<bool, String> {
        if !name.starts_with(LOCK_PREFIX) || name.len() > MAX_NAME {
            return Err(format!(
                "a lock's name starts with {LOCK_PREFIX} and has at most {MAX_NAME} bytes: {name:.60}"
            ));
        }
        if held.0.contains_key(name) {
            return Ok(true);
        }
        if held.0.len() >= self.per_call {
            return Err(format!(
                "a call holds at most {} locks at once",
                self.per_call
            ));
        }
        let lock = self.lock_of(name);
        let Ok(guard) = tokio::time::timeout(wait, lock.lock_owned()).await else {
            return Ok(false);
        };
        self.held.inc();
        let gauge = self.held.clone();
        held.0.insert(
            name.to_string(),
            Held {
                _guard: guard,
                gauge,
            },
        );
        Ok(true)
    }

    /// Releases `name` if the call holding `held` holds it.
    pub fn release(&self, held: &mut HeldLocks, name: &str) -> bool {
        held.0.remove(name).is_some()
    }

    fn lock_of(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.locks.lock();
        if locks.len() >= KEPT && !locks.contains_key(name) {
            // Held or waited for: someone else has a clone.
            locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        }
        locks.entry(name.to_string()).or_default().clone()
    }
}

/// The `process-lock` capability as the linker knows it: its imports work
/// on a [`ProcessLockView`].
impl HasData for ProcessLocks {
    type Data<'a> = ProcessLockView<'a>;
}

/// What the process locks reach of one call: the process's locks, and
/// those the call holds.
pub struct ProcessLockView<'a> {
    pub locks: &'a ProcessLocks,
    pub held: &'a mut HeldLocks,
    pub call: &'a CallContext,
}

impl process_lock::Host for ProcessLockView<'_> {
    /// Waits no longer than the call's own deadline.
    #[tracing::instrument(name = "process_lock.acquire", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn acquire(
        &mut self,
        name: String,
        timeout_ms: u32,
    ) -> wasmtime::Result<Result<bool, String>> {
        let wait = Duration::from_millis(timeout_ms.into()).min(self.call.left());
        Ok(self.locks.acquire(self.held, &name, wait).await)
    }

    #[tracing::instrument(name = "process_lock.release", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn release(&mut self, name: String) -> wasmtime::Result<bool> {
        Ok(self.locks.release(self.held, &name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Duration = Duration::ZERO;

    fn locks() -> ProcessLocks {
        let args = ProcessLockArgs {
            process_locks_per_call: 2,
        };
        ProcessLocks::new(&args, IntGauge::new("held", "held").unwrap())
    }

    /// Whether `call` holds `name` after asking for it, waiting at most `wait`.
    async fn holds(locks: &ProcessLocks, call: &mut HeldLocks, name: &str, wait: Duration) -> bool {
        locks
            .acquire(call, name, wait)
            .await
            .expect("a name of the lab's locks")
    }

    #[tokio::test]
    async fn a_lock_excludes_other_calls_until_released_or_dropped() {
        let locks = locks();
        let (mut a, mut b) = (HeldLocks::default(), HeldLocks::default());
        let (first, second) = ("coupon:lock:{1}", "coupon:lock:{2}");
        assert!(holds(&locks, &mut a, first, NOW).await);
        // The holder asking again holds it still.
        assert!(holds(&locks, &mut a, first, NOW).await);
        let waited = Duration::from_millis(20);
        assert!(!holds(&locks, &mut b, first, waited).await);
        assert!(holds(&locks, &mut b, second, NOW).await);
        assert_eq!(locks.held.get(), 2);

        assert!(locks.release(&mut a, first));
        assert!(!locks.release(&mut a, first), "released twice");
        assert!(holds(&locks, &mut b, first, NOW).await);
        // A call that ends, however it ends, lets go of what it holds.
        drop(b);
        assert_eq!(locks.held.get(), 0);
        assert!(holds(&locks, &mut a, first, NOW).await);
    }

    #[tokio::test]
    async fn a_name_outside_the_labs_or_one_lock_too_many_is_refused() {
        let locks = locks();
        let mut call = HeldLocks::default();
        let outside = locks.acquire(&mut call, "couponlab:hosts", NOW).await;
        assert!(outside.unwrap_err().contains("coupon:lock:"));
        let long = format!("coupon:lock:{}", "x".repeat(MAX_NAME));
        assert!(locks.acquire(&mut call, &long, NOW).await.is_err());
        for n in 0..2 {
            let name = format!("coupon:lock:{{{n}}}");
            assert_eq!(locks.acquire(&mut call, &name, NOW).await, Ok(true));
        }
        let third = locks.acquire(&mut call, "coupon:lock:{3}", NOW).await;
        assert!(third.unwrap_err().contains("at most 2"));
    }
}
