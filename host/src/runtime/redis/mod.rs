//! The `redis` capability: what a component may do with Redis, what it may
//! not, and who enforces each rule.
//!
//! - Redis enforces what a component reaches: every connection it uses
//!   authenticates as the ACL user of [`acl`] — `coupon:*` keys and the
//!   commands issuance needs, checked by the server for commands a Lua
//!   script calls as well.
//! - The host enforces what an ACL cannot express: commands that change a
//!   connection's identity (AUTH, HELLO, RESET, SELECT, QUIT — RESET would
//!   log the connection in as the default user) are refused on every
//!   connection a component uses, and commands that carry connection state
//!   (MULTI, EXEC, DISCARD, WATCH, UNWATCH) on the shared one, which every
//!   request uses at once. A reply heavier than `COUPONLAB_MAX_REPLY_BYTES`
//!   is refused, a call holds at most `COUPONLAB_MAX_CONNECTIONS_PER_CALL`
//!   dedicated connections, and waits for one no longer than its deadline.
//! - A script whose reply has not come by its call's deadline is ended
//!   (SCRIPT KILL as the server's user); one Redis cannot kill quarantines
//!   its component ([`scripts`]). While any script holds Redis, calls get
//!   `BUSY` at once and fail with a message saying so.
//! - [`pools`]: the shared connection, the dedicated pool, and how a
//!   dedicated connection comes back clean; [`setup`]: what the server
//!   puts on Redis, again after Redis forgot it; [`reply`]: replies as WIT
//!   lists.

pub mod acl;
mod pools;
pub mod reply;
mod scripts;
mod setup;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{RedisError, Value};
use wasmtime::component::Resource;

use super::bindings::redis::{self as wit, Command, RedisError as WitError};
use super::capabilities::{Admin, Capabilities};
use super::registry::Strategy;
use super::store::HostState;
use crate::metrics::Metrics;
use crate::redis_target::first_key;

pub use self::pools::{GuestRedis, RedisArgs, RedisConnection, is_connection_error};
pub use self::scripts::{ScriptEnd, is_busy};
use self::scripts::SentOn;
use self::setup::NodeSetup;

/// Commands that would change who a connection is, or which database it
/// reaches: refused on every connection a component uses.
const IDENTITY: [&str; 5] = ["AUTH", "HELLO", "RESET", "SELECT", "QUIT"];

/// How long before the reply timeout a script still running is ended, so
/// the kill goes out while its caller still waits for the reply.
const KILL_MARGIN: Duration = Duration::from_millis(100);

/// How long past the busy threshold a script's reply may be late before
/// the shared connection it holds is replaced.
const BUSY_MARGIN: Duration = Duration::from_millis(100);

/// Commands that leave state on their connection: they need a dedicated one.
const CONNECTION_STATE: [&str; 5] = ["MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH"];

/// Maps a client error to what the guest sees: the ACL's refusals get their
/// own case.
fn to_wit_error(err: RedisError) -> WitError {
    if is_busy(&err) {
        WitError::Connection(format!("Redis is busy running a script and serves nobody until it ends: {err}"))
    } else if is_connection_error(&err) {
        WitError::Connection(format!("Redis is unavailable: {err}"))
    } else if err.code() == Some("NOPERM")
        || err
            .detail()
            .is_some_and(|detail| detail.starts_with("The user executing the script can't"))
    {
        WitError::Refused(format!(
            "the components' Redis user may not: {err}"
        ))
    } else {
        WitError::Server(err.to_string())
    }
}

impl HostState {
    /// A reply as the guest receives it, unless it is over the cap.
    fn reply(&self, result: Result<Value, RedisError>) -> Result<Vec<wit::Value>, WitError> {
        let value = result.map_err(to_wit_error)?;
        let cap = self.caps.redis.args.max_reply_bytes;
        let weight = reply::weight(&value);
        if weight > cap {
            return Err(WitError::Refused(format!(
                "the reply is {weight} bytes, over COUPONLAB_MAX_REPLY_BYTES ({cap})"
            )));
        }
        let mut out = Vec::new();
        reply::flatten(value, &mut out);
        Ok(out)
    }
}

/// The Redis components reach: as the operator's user, or as the ACL user
/// this server creates. A Redis that is down now is set up when it is first
/// needed; one that refuses to create the user stops the start, saying why.
pub async fn connect(
    args: &RedisArgs,
    admin: &Admin<'_>,
    metrics: &Metrics,
) -> anyhow::Result<GuestRedis> {
    let setup = NodeSetup {
        admin: admin.redis.clone(),
        admin_url: admin.redis_url.to_string(),
        creates_user: args.strategy_redis_url.is_none(),
        busy_script_ms: args.busy_script_ms,
    };
    match setup.apply().await {
        Ok(()) => {}
        Err(err) if is_connection_error(&err) => {
            tracing::warn!(error = %err, "Redis is unreachable; it is set up (the components' user, the script threshold) once it answers")
        }
        Err(err) => return Err(acl::cannot_set_up(err)),
    }
    let url = match &args.strategy_redis_url {
        Some(url) => url.clone(),
        None => acl::url(admin.redis_url)?,
    };
    GuestRedis::new(
        &url,
        admin.cluster,
        args,
        setup,
        metrics.scripts_killed.clone(),
    )
}

/// What a call's script commands are watched with.
struct Watch<'a> {
    caps: &'a Arc<Capabilities>,
    strategy: &'a Option<Arc<Strategy>>,
    method: &'a Arc<str>,
    deadline: Instant,
    killed: &'a mut u32,
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
    async fn reply<T>(
        self,
        script: Option<(&str, &[String])>,
        on: impl FnOnce(Option<&str>) -> SentOn,
        reply: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T, RedisError> {
        let Some((name, args)) = script else {
            return reply.await;
        };
        let redis = &self.caps.redis;
        let key = first_key(name, args);
        let on = on(key);
        let sent = redis.in_flight.send(on);
        let now = Instant::now();
        let kill_at = self
            .deadline
            .min(now + pools::RESPONSE_TIMEOUT - KILL_MARGIN);
        let busy_at = kill_at.min(now + Duration::from_millis(redis.args.busy_script_ms) + BUSY_MARGIN);
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
            self.caps.clone(),
            self.strategy.clone(),
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
    caps: Arc<Capabilities>,
    strategy: Option<Arc<Strategy>>,
    method: Arc<str>,
    key: Option<String>,
) -> ScriptEnd {
    let end = caps.redis.end_script(key.as_deref()).await;
    match &end {
        ScriptEnd::Killed => {
            caps.redis.scripts_killed.with_label_values(&[&*method]).inc();
            tracing::warn!(%method, "a script outlived its call's deadline; SCRIPT KILL ended it");
        }
        ScriptEnd::Unkillable(refusal) => {
            let mut stuck_by = caps.redis.stuck_by.lock();
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
            if let Some(strategy) = &strategy {
                strategy.quarantine(reason);
            }
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

/// The call's [`Watch`], built from the fields it needs so that the call's
/// resource table can be borrowed beside it.
macro_rules! watch {
    ($state:expr) => {
        Watch {
            caps: &$state.caps,
            strategy: &$state.strategy,
            method: &$state.method,
            deadline: $state.deadline,
            killed: &mut $state.scripts_killed,
        }
    };
}

/// The command, if it runs a script.
fn script<'a>(name: &'a str, args: &'a [String]) -> Option<(&'a str, &'a [String])> {
    scripts::runs_a_script(name).then_some((name, args))
}

fn refuse(name: &str, list: &[&str], why: &str) -> Option<WitError> {
    list.contains(&name)
        .then(|| WitError::Refused(format!("{name} is not allowed {why}")))
}

fn refuse_identity(name: &str) -> Option<WitError> {
    refuse(
        name,
        &IDENTITY,
        "on a component's connection: it would change who the connection is",
    )
}

impl wit::Host for HostState {
    #[tracing::instrument(name = "redis.execute", level = "debug", skip_all, fields(method = %self.method))]
    async fn execute(
        &mut self,
        name: String,
        args: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<wit::Value>, WitError>> {
        let name = name.to_ascii_uppercase();
        let refused = refuse_identity(&name).or_else(|| {
            refuse(
                &name,
                &CONNECTION_STATE,
                "on the shared connection; use redis.open() for connection state",
            )
        });
        if let Some(err) = refused {
            return Ok(Err(err));
        }
        let caps = self.caps.clone();
        let result = watch!(self)
            .reply(
                script(&name, &args),
                |key| caps.redis.shared_for(key),
                caps.redis.execute(&name, &args),
            )
            .await;
        Ok(self.reply(result))
    }

    #[tracing::instrument(name = "redis.eval", level = "debug", skip_all, fields(method = %self.method))]
    async fn eval(
        &mut self,
        script: String,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<wit::Value>, WitError>> {
        let caps = self.caps.clone();
        // Routed as EVALSHA is: by its first key.
        let routed = [vec![String::new(), keys.len().to_string()], keys.clone()].concat();
        let result = watch!(self)
            .reply(
                Some(("EVALSHA", &routed)),
                |key| caps.redis.shared_for(key),
                caps.redis.eval(&script, &keys, &args),
            )
            .await;
        Ok(self.reply(result))
    }

    /// Waits for a free dedicated connection no longer than the call's
    /// deadline.
    #[tracing::instrument(name = "redis.open", level = "debug", skip_all, fields(method = %self.method))]
    async fn open(&mut self) -> wasmtime::Result<Result<Resource<RedisConnection>, WitError>> {
        let cap = self.caps.redis.args.max_connections_per_call;
        if self.open_connections >= cap {
            return Ok(Err(WitError::Refused(format!(
                "this call already holds {cap} dedicated connections (COUPONLAB_MAX_CONNECTIONS_PER_CALL)"
            ))));
        }
        let left = self
            .deadline
            .saturating_duration_since(std::time::Instant::now());
        match tokio::time::timeout(left, self.caps.redis.open()).await {
            Ok(Ok(conn)) => {
                self.open_connections += 1;
                Ok(Ok(self.table.push(conn)?))
            }
            Ok(Err(err)) => Ok(Err(to_wit_error(err))),
            Err(_) => Ok(Err(WitError::Connection(
                "no dedicated Redis connection was free before the call's deadline".into(),
            ))),
        }
    }
}

impl wit::HostConnection for HostState {
    #[tracing::instrument(name = "redis.connection.execute", level = "debug", skip_all, fields(method = %self.method))]
    async fn execute(
        &mut self,
        conn: Resource<RedisConnection>,
        name: String,
        args: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<wit::Value>, WitError>> {
        let name = name.to_ascii_uppercase();
        if let Some(err) = refuse_identity(&name) {
            return Ok(Err(err));
        }
        let borrowed = self.table.get_mut(&conn)?;
        let result = watch!(self)
            .reply(
                script(&name, &args),
                |_| SentOn::Dedicated,
                borrowed.execute(&name, &args),
            )
            .await;
        Ok(self.reply(result))
    }

    #[tracing::instrument(name = "redis.connection.pipeline", level = "debug", skip_all, fields(method = %self.method))]
    async fn pipeline(
        &mut self,
        conn: Resource<RedisConnection>,
        commands: Vec<Command>,
    ) -> wasmtime::Result<Result<Vec<Vec<wit::Value>>, WitError>> {
        for command in &commands {
            if let Some(err) = refuse_identity(&command.name.to_ascii_uppercase()) {
                return Ok(Err(err));
            }
        }
        let names: Vec<String> = commands
            .iter()
            .map(|command| command.name.to_ascii_uppercase())
            .collect();
        let first_script = names
            .iter()
            .zip(&commands)
            .find_map(|(name, command)| script(name, &command.args));
        let borrowed = self.table.get_mut(&conn)?;
        let values = match watch!(self)
            .reply(first_script, |_| SentOn::Dedicated, borrowed.pipeline(&commands))
            .await
        {
            Ok(values) => values,
            Err(err) => return Ok(Err(to_wit_error(err))),
        };
        Ok(values
            .into_iter()
            .map(|value| self.reply(Ok(value)))
            .collect())
    }

    #[tracing::instrument(name = "redis.connection.drop", level = "debug", skip_all, fields(method = %self.method))]
    async fn drop(&mut self, conn: Resource<RedisConnection>) -> wasmtime::Result<()> {
        let conn = self.table.delete(conn)?;
        self.open_connections = self.open_connections.saturating_sub(1);
        conn.release().await;
        Ok(())
    }
}
