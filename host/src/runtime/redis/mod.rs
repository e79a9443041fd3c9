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
//! - [`pools`]: the shared connection and what every command goes
//!   through; [`dedicated`]: the dedicated pool, and how a dedicated
//!   connection comes back clean; [`setup`]: what the server
//!   puts on Redis, again after Redis forgot it; [`reply`]: replies as WIT
//!   lists; [`failure`]: what a failed command tells the component —
//!   whether Redis may have run it.
//! - [`connection`], [`subscription`], [`renewal`]: the resources' types,
//!   which the bindings' `with:` names, each defined in a file that takes
//!   nothing from the bindings and implemented where it is used
//!   (`dedicated`, `channels`, `watchdog`).

pub mod acl;
#[cfg(test)]
mod call_futures;
mod channels;
pub mod connection;
mod dedicated;
mod failure;
pub(super) mod pools;
mod refusals;
pub mod renewal;
pub mod reply;
mod runaway;
mod scripts;
mod setup;
pub mod subscription;
mod watchdog;

use std::sync::Arc;

use redis::{RedisError, Value};
use wasmtime::component::{HasData, Resource, ResourceTable};

use super::bindings::redis::{self as wit, Command, RedisError as WitError};
use super::call_context::CallContext;
use super::trace::{Pending, Read};
use crate::metrics::Metrics;
use crate::redis_target::RedisConn;
use crate::redis_target::errors::is_connection_error;

use self::connection::RedisConnection;
use self::failure::{not_sent, to_wit_error};
pub use self::pools::{GuestRedis, RedisArgs};
use self::refusals::{refused_on_dedicated, refused_on_shared};
use self::runaway::{Watch, script};
pub use self::scripts::ScriptEnd;
use self::scripts::SentOn;
use self::setup::NodeSetup;

/// The `redis`, `redis-channels` and `redis-watchdog` capabilities as the
/// linker knows them: their imports work on a [`RedisView`].
impl HasData for GuestRedis {
    type Data<'a> = RedisView<'a>;
}

/// What one call holds of Redis, each against its cap.
#[derive(Debug, Default)]
pub struct Held {
    connections: u32,
    subscriptions: u32,
    renewals: u32,
    /// Scripts of this call that outlived its deadline and were killed.
    pub scripts_killed: u32,
}

impl Held {
    /// Whether the call holds no dedicated connection, subscription or
    /// renewal, which its store's end would release.
    pub fn nothing(&self) -> bool {
        self.connections == 0 && self.subscriptions == 0 && self.renewals == 0
    }
}

/// What Redis reaches of one call: the components' Redis, what the call
/// holds of it, its resources, and the call itself.
pub struct RedisView<'a> {
    pub redis: &'a Arc<GuestRedis>,
    pub held: &'a mut Held,
    pub table: &'a mut ResourceTable,
    pub call: &'a mut CallContext,
}

impl RedisView<'_> {
    /// Starts the trace of a command, on the keys of its first argument.
    fn trace_command(&self, name: &str, args: &[String]) -> Pending {
        if !self.call.trace.is_recording() {
            return self.call.trace.start("redis", "");
        }
        let pending = self.call.trace.start("redis", name.to_string());
        match args.first() {
            Some(key) => pending.target(key.as_str()),
            None => pending,
        }
    }

    /// The reply as the guest receives it, recorded in the call's trace.
    fn traced_reply(
        &mut self,
        pending: Pending,
        result: Result<Value, RedisError>,
    ) -> Result<Vec<wit::Value>, WitError> {
        let reply = self.reply(result);
        let answer = match &reply {
            Ok(values) => Ok(Read::integer(reply::integer(values))),
            Err(err) => Err(format!("{err:?}")),
        };
        self.call.trace.finish(pending, answer);
        reply
    }

    /// A reply as the guest receives it, unless it is over the cap.
    fn reply(&self, result: Result<Value, RedisError>) -> Result<Vec<wit::Value>, WitError> {
        let value = result.map_err(to_wit_error)?;
        let cap = self.redis.args.max_reply_bytes;
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
/// this server creates through `admin`, its own connection to `admin_url`
/// (`cluster`: a Redis Cluster's seed nodes). A Redis that is down now is
/// set up when it is first needed; one that refuses to create the user
/// stops the start, saying why.
pub async fn connect(
    args: &RedisArgs,
    (admin, admin_url, cluster): (&RedisConn, &str, bool),
    metrics: &Metrics,
) -> anyhow::Result<GuestRedis> {
    let setup = NodeSetup {
        admin: admin.clone(),
        admin_url: admin_url.to_string(),
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
        None => acl::url(admin_url)?,
    };
    GuestRedis::new(&url, cluster, args, setup, metrics.scripts_killed.clone())
}

/// The call's [`Watch`], built from the fields it needs so that the call's
/// resource table can be borrowed beside it. Its reply is awaited boxed:
/// with the command's future inside, it is the bulk of a host call's
/// future, which wasmtime moves by value (into a box of its own, and
/// through the call's wrappers) on every call.
macro_rules! watch {
    ($view:expr) => {
        Watch {
            redis: $view.redis,
            quarantine: &$view.call.quarantine,
            method: &$view.call.method,
            deadline: $view.call.deadline,
            killed: &mut $view.held.scripts_killed,
        }
    };
}

impl wit::Host for RedisView<'_> {
    #[tracing::instrument(name = "redis.execute", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn execute(
        &mut self,
        name: String,
        args: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<wit::Value>, WitError>> {
        let name = name.to_ascii_uppercase();
        let args = self.redis.in_lab_channel(&name, args);
        if let Some(err) = refused_on_shared(&name, &args) {
            return Ok(Err(err));
        }
        let pending = self.trace_command(&name, &args);
        let redis = self.redis;
        let result = Box::pin(watch!(self).reply(
            script(&name, &args),
            |key| redis.shared_for(key),
            redis.execute(&name, &args),
        ))
        .await;
        Ok(self.traced_reply(pending, result))
    }

    #[tracing::instrument(name = "redis.eval", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn eval(
        &mut self,
        script: String,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<wit::Value>, WitError>> {
        let mut pending = self.call.trace.start("redis", "EVALSHA");
        if self.call.trace.is_recording() {
            pending = pending.target(keys.join(" "));
        }
        let redis = self.redis;
        // Routed as EVALSHA is: by its first key.
        let routed = [vec![String::new(), keys.len().to_string()], keys.clone()].concat();
        let result = Box::pin(watch!(self).reply(
            Some(("EVALSHA", &routed)),
            |key| redis.shared_for(key),
            redis.eval(&script, &keys, &args),
        ))
        .await;
        Ok(self.traced_reply(pending, result))
    }

    /// Waits for a free dedicated connection no longer than the call's
    /// deadline.
    #[tracing::instrument(name = "redis.open", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn open(&mut self) -> wasmtime::Result<Result<Resource<RedisConnection>, WitError>> {
        let cap = self.redis.args.max_connections_per_call;
        if self.held.connections >= cap {
            return Ok(Err(WitError::Refused(format!(
                "this call already holds {cap} dedicated connections (COUPONLAB_MAX_CONNECTIONS_PER_CALL)"
            ))));
        }
        match tokio::time::timeout(self.call.left(), Box::pin(self.redis.open())).await {
            Ok(Ok(conn)) => {
                self.held.connections += 1;
                Ok(Ok(self.table.push(conn)?))
            }
            // Opening sends nothing the component asked to run.
            Ok(Err(err)) => Ok(Err(not_sent(err))),
            Err(_) => Ok(Err(not_sent(
                "no dedicated Redis connection was free before the call's deadline",
            ))),
        }
    }
}

impl wit::HostConnection for RedisView<'_> {
    #[tracing::instrument(name = "redis.connection.execute", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn execute(
        &mut self,
        conn: Resource<RedisConnection>,
        name: String,
        args: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<wit::Value>, WitError>> {
        let name = name.to_ascii_uppercase();
        if let Some(err) = refused_on_dedicated(&name, &args) {
            return Ok(Err(err));
        }
        let pending = self.trace_command(&name, &args);
        let borrowed = self.table.get_mut(&conn)?;
        let result = Box::pin(watch!(self).reply(
            script(&name, &args),
            |_| SentOn::Dedicated,
            borrowed.execute(&name, &args),
        ))
        .await;
        Ok(self.traced_reply(pending, result))
    }

    #[tracing::instrument(name = "redis.connection.pipeline", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn pipeline(
        &mut self,
        conn: Resource<RedisConnection>,
        commands: Vec<Command>,
    ) -> wasmtime::Result<Result<Vec<Vec<wit::Value>>, WitError>> {
        for command in &commands {
            let name = command.name.to_ascii_uppercase();
            if let Some(err) = refused_on_dedicated(&name, &command.args) {
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
        let pending = self.call.trace.start("redis", names.join(" "));
        let borrowed = self.table.get_mut(&conn)?;
        let values = match Box::pin(watch!(self).reply(
            first_script,
            |_| SentOn::Dedicated,
            borrowed.pipeline(&commands),
        ))
        .await
        {
            Ok(values) => values,
            Err(err) => {
                let err = to_wit_error(err);
                self.call.trace.finish(pending, Err(format!("{err:?}")));
                return Ok(Err(err));
            }
        };
        self.call
            .trace
            .finish(pending, Ok(Read::rows(values.len() as u64)));
        Ok(values
            .into_iter()
            .map(|value| self.reply(Ok(value)))
            .collect())
    }

    #[tracing::instrument(name = "redis.connection.drop", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn drop(&mut self, conn: Resource<RedisConnection>) -> wasmtime::Result<()> {
        let conn = self.table.delete(conn)?;
        self.held.connections = self.held.connections.saturating_sub(1);
        Box::pin(conn.release()).await;
        Ok(())
    }
}
