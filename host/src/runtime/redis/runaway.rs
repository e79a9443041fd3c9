//! A call's script commands, watched against its deadline ([`super::scripts`]
//! says why and what Redis allows): past the busy threshold, new commands
//! leave the shared connection the script holds; at the deadline, the
//! script is killed if it can be the one running, and a script Redis
//! refuses to kill quarantines its component.

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::RedisError;

use super::pools::GuestRedis;
use super::pools::RESPONSE_TIMEOUT;
use super::scripts::{ScriptEnd, SentOn, runs_a_script};
use crate::redis_target::first_key;
use crate::runtime::call_context::Quarantiner;

/// How long before the reply timeout a script still running is ended, so
/// the kill goes out while its caller still waits for the reply.
const KILL_MARGIN: Duration = Duration::from_millis(100);

/// How long past the busy threshold a script's reply may be late before
/// the shared connection it holds is replaced.
const BUSY_MARGIN: Duration = Duration::from_millis(100);

/// What a call's script commands are watched with.
pub(super) struct Watch<'a> {
    pub(super) redis: &'a Arc<GuestRedis>,
    pub(super) quarantine: &'a Quarantiner,
    pub(super) method: &'a Arc<str>,
    pub(super) deadline: Instant,
    pub(super) killed: &'a mut u32,
}

impl Watch<'_> {
    /// Awaits `reply` to commands that may run a script (`script`: the
    /// first script command and its arguments, `None` when there is none)
    /// sent `on` a connection. Past the busy threshold a script is running
    /// (this one, or one sent before it on the same connection): commands
    /// sent from then on go out on a new shared connection, which Redis
    /// answers `BUSY` at once instead of holding behind it. A script whose
    /// reply has not come by the call's deadline, or just before the reply
    /// timeout, is ended if it can be the one running; the call then gets
    /// the killed script's error.
    pub(super) async fn reply<T>(
        self,
        script: Option<(&str, &[String])>,
        on: impl FnOnce(Option<&str>) -> SentOn,
        reply: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, RedisError> {
        let Some((name, args)) = script else {
            return reply.await;
        };
        let redis = self.redis;
        let key = first_key(name, args);
        let on = on(key);
        let sent = redis.in_flight.send(on);
        let now = Instant::now();
        let kill_at = self.deadline.min(now + RESPONSE_TIMEOUT - KILL_MARGIN);
        let busy_at =
            kill_at.min(now + Duration::from_millis(redis.args.busy_script_ms) + BUSY_MARGIN);
        tokio::pin!(reply);
        for until in [busy_at, kill_at] {
            tokio::select! {
                biased;
                answer = &mut reply => return answer,
                () = tokio::time::sleep_until(until.into()) => {}
            }
            // A slow link makes a reply late too: only Redis answering BUSY
            // says that a script holds it. A cluster connection holds one
            // connection per node, and a new one would first ask a node
            // for the slots — maybe the busy one: it is left as it is.
            if let SentOn::Shared { id, slot: None } = on
                && !redis.is_cluster()
                && redis.running_a_script().await
                && let Err(err) = redis.replace_shared(id)
            {
                tracing::warn!(error = %err, "cannot replace the shared Redis connection a script holds");
            }
        }
        if !sent.is_oldest() {
            return reply.await;
        }
        // Its own task: the kill and its verdict outlive this call if the
        // call is dropped at its deadline meanwhile.
        let ending = tokio::spawn(end_runaway(
            self.redis.clone(),
            self.quarantine.clone(),
            self.method.clone(),
            key.map(str::to_string),
        ));
        if let Ok(ScriptEnd::Killed) = ending.await {
            *self.killed += 1;
        }
        reply.await
    }
}

/// Ends a script that outlived its call, and acts on what Redis says.
async fn end_runaway(
    redis: Arc<GuestRedis>,
    quarantine: Quarantiner,
    method: Arc<str>,
    key: Option<String>,
) -> ScriptEnd {
    let end = redis.end_script(key.as_deref()).await;
    match &end {
        ScriptEnd::Killed => {
            redis.scripts_killed.with_label_values(&[&*method]).inc();
            tracing::warn!(%method, "a script outlived its call's deadline; SCRIPT KILL ended it");
        }
        ScriptEnd::Unkillable(refusal) => {
            let mut stuck_by = redis.stuck_by.lock();
            if let Some(culprit) = &*stuck_by {
                // A call that waited behind the script, not its sender.
                tracing::warn!(%method, %culprit, "a call waited past its deadline behind a script Redis cannot kill");
                return end;
            }
            *stuck_by = Some(method.clone());
            let reason = format!(
                "{method} is quarantined: a script it sent wrote and then ran past its call's deadline, \
                 and Redis refuses to kill a script that wrote ({refusal}); Redis serves nobody until \
                 that script ends. Replace its file to serve it again"
            );
            quarantine.quarantine(reason);
            tracing::error!(
                %method,
                "a script of {method} wrote and then ran past its call's deadline: Redis cannot kill it \
                 (UNKILLABLE) and answers every client BUSY until it ends. The only remedy is \
                 `redis-cli SHUTDOWN NOSAVE` (Redis loses what it holds; the lab sets it up again when it \
                 is back) or waiting for the script to end. {method} is quarantined until its file changes"
            );
        }
        ScriptEnd::AlreadyOver => {}
        ScriptEnd::NotSent(err) => {
            tracing::warn!(%method, error = %err, "a script outlived its call's deadline and SCRIPT KILL failed")
        }
    }
    end
}

/// The command, if it runs a script.
pub(super) fn script<'a>(name: &'a str, args: &'a [String]) -> Option<(&'a str, &'a [String])> {
    runs_a_script(name).then_some((name, args))
}
