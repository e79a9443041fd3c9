//! The `redis-watchdog` capability: a lease kept alive while its call
//! works, as Redisson's watchdog renews a lock held past its first lease.
//! A component cannot do it itself — it waits on the database, single
//! threaded, exactly when the lease needs renewing — so the host runs the
//! component's renewal script every period on a task of its own, until the
//! script answers 0 or nil or fails, the [`Renewal`] is dropped, or the
//! call ends (its store drops every renewal). What the script may touch is
//! the components' user's, as for `redis.eval`, and it is watched as a
//! call's script is: one that runs past the call's deadline is ended.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::Value;
use wasmtime::component::Resource;

use super::RedisView;
use super::pools::GuestRedis;
use super::renewal::Renewal;
use super::runaway::Watch;
use crate::runtime::bindings::redis::RedisError as WitError;
use crate::runtime::bindings::redis_watchdog;
use crate::runtime::call_context::Quarantiner;

/// The shortest period between two renewals.
const SHORTEST_PERIOD: Duration = Duration::from_millis(100);

/// What one renewal runs, and whose call it belongs to.
struct Lease {
    redis: Arc<GuestRedis>,
    quarantine: Quarantiner,
    method: Arc<str>,
    deadline: Instant,
    script: String,
    keys: Vec<String>,
    args: Vec<String>,
    every: Duration,
}

impl Lease {
    /// Runs the script every period while it answers something other than
    /// 0 or nil, and the call's deadline has not passed.
    async fn renew(self) {
        // Routed as `redis.eval` is: by its first key.
        let routed = [
            vec![String::new(), self.keys.len().to_string()],
            self.keys.clone(),
        ]
        .concat();
        let mut killed = 0;
        loop {
            tokio::time::sleep(self.every).await;
            if Instant::now() >= self.deadline {
                return;
            }
            let redis = &self.redis;
            let watch = Watch {
                redis,
                quarantine: &self.quarantine,
                method: &self.method,
                deadline: self.deadline,
                killed: &mut killed,
            };
            let answer = watch
                .reply(
                    Some(("EVALSHA", &routed)),
                    |key| redis.shared_for(key),
                    redis.eval(&self.script, &self.keys, &self.args),
                )
                .await;
            match answer {
                Ok(Value::Nil | Value::Int(0)) => return,
                Ok(_) => {}
                Err(err) => {
                    tracing::debug!(method = %self.method, error = %err, "a lease's renewal failed; it is renewed no more");
                    return;
                }
            }
        }
    }
}

impl redis_watchdog::Host for RedisView<'_> {
    #[tracing::instrument(name = "redis_watchdog.renew", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn renew(
        &mut self,
        script: String,
        keys: Vec<String>,
        args: Vec<String>,
        every_ms: u32,
    ) -> wasmtime::Result<Result<Resource<Renewal>, WitError>> {
        let cap = self.redis.args.renewals_per_call;
        if self.held.renewals >= cap {
            return Ok(Err(WitError::Refused(format!(
                "this call already holds {cap} renewals (COUPONLAB_RENEWALS_PER_CALL)"
            ))));
        }
        let lease = Lease {
            redis: self.redis.clone(),
            quarantine: self.call.quarantine.clone(),
            method: self.call.method.clone(),
            deadline: self.call.deadline,
            script,
            keys,
            args,
            every: Duration::from_millis(every_ms.into()).max(SHORTEST_PERIOD),
        };
        let task = tokio::spawn(lease.renew());
        self.held.renewals += 1;
        Ok(Ok(self.table.push(Renewal(task.abort_handle()))?))
    }
}

impl redis_watchdog::HostRenewal for RedisView<'_> {
    #[tracing::instrument(name = "redis_watchdog.renewal.drop", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn drop(&mut self, renewal: Resource<Renewal>) -> wasmtime::Result<()> {
        self.table.delete(renewal)?;
        self.held.renewals = self.held.renewals.saturating_sub(1);
        Ok(())
    }
}
