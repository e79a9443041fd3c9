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

pub mod acl;
#[cfg(test)]
mod call_futures;
mod channels;
mod dedicated;
mod failure;
mod pools;
pub mod reply;
mod runaway;
mod scripts;
mod setup;
mod watchdog;

use redis::{RedisError, Value};
use wasmtime::component::Resource;

use super::bindings::redis::{self as wit, Command, RedisError as WitError};
use super::capabilities::Admin;
use super::store::HostState;
use super::trace::{Pending, Read};
use crate::metrics::Metrics;
use crate::redis_target::errors::is_connection_error;

pub use self::channels::Subscription;
pub use self::dedicated::RedisConnection;
use self::failure::{not_sent, to_wit_error};
pub use self::pools::{GuestRedis, RedisArgs};
use self::runaway::{Watch, script};
pub use self::scripts::ScriptEnd;
use self::scripts::SentOn;
use self::setup::NodeSetup;
pub use self::watchdog::Renewal;

/// Commands that would change who a connection is, or which database it
/// reaches: refused on every connection a component uses.
const IDENTITY: [&str; 5] = ["AUTH", "HELLO", "RESET", "SELECT", "QUIT"];

/// Commands that would turn a connection into a subscriber, which answers
/// nothing else: refused on every connection a component uses (it hears
/// channels through `redis-channels`).
const SUBSCRIBER: [&str; 6] = [
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "PSUBSCRIBE",
    "PUNSUBSCRIBE",
    "SSUBSCRIBE",
    "SUNSUBSCRIBE",
];

/// Commands that leave state on their connection: they need a dedicated one.
const CONNECTION_STATE: [&str; 5] = ["MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH"];

impl HostState {
    /// Starts the trace of a command, on the keys of its first argument.
    fn trace_command(&self, name: &str, args: &[String]) -> Pending {
        if !self.trace.is_recording() {
            return self.trace.start("redis", "");
        }
        let pending = self.trace.start("redis", name.to_string());
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
        self.trace.finish(pending, answer);
        reply
    }

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

/// The call's [`Watch`], built from the fields it needs so that the call's
/// resource table can be borrowed beside it. Its reply is awaited boxed:
/// with the command's future inside, it is the bulk of a host call's
/// future, which wasmtime moves by value (into a box of its own, and
/// through the call's wrappers) on every call.
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
    .or_else(|| {
        refuse(
            name,
            &SUBSCRIBER,
            "on a component's connection: it would make it a subscriber; use redis-channels",
        )
    })
}

/// The longest WAIT a component may ask for. WAIT blocks the connection it
/// is sent on (on the shared one, every component's commands behind it),
/// and a timeout of 0 would block it until a replica answers, for ever on
/// a Redis without replicas.
const LONGEST_WAIT_MS: u64 = 1_000;

/// WAIT with its timeout missing, 0, or past [`LONGEST_WAIT_MS`].
fn refuse_unbounded_wait(name: &str, args: &[String]) -> Option<WitError> {
    let timeout = args.get(1).and_then(|ms| ms.parse::<u64>().ok());
    (name == "WAIT" && !timeout.is_some_and(|ms| (1..=LONGEST_WAIT_MS).contains(&ms))).then(|| {
        WitError::Refused(format!(
            "WAIT needs a timeout of 1 to {LONGEST_WAIT_MS} ms: it blocks its connection until then"
        ))
    })
}

impl wit::Host for HostState {
    #[tracing::instrument(name = "redis.execute", level = "debug", skip_all, fields(method = %self.method))]
    async fn execute(
        &mut self,
        name: String,
        args: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<wit::Value>, WitError>> {
        let name = name.to_ascii_uppercase();
        let args = self.caps.redis.in_lab_channel(&name, args);
        let refused = refuse_identity(&name)
            .or_else(|| refuse_unbounded_wait(&name, &args))
            .or_else(|| {
                refuse(
                    &name,
                    &CONNECTION_STATE,
                    "on the shared connection; use redis.open() for connection state",
                )
            });
        if let Some(err) = refused {
            return Ok(Err(err));
        }
        let pending = self.trace_command(&name, &args);
        let caps = self.caps.clone();
        let result = Box::pin(watch!(self).reply(
            script(&name, &args),
            |key| caps.redis.shared_for(key),
            caps.redis.execute(&name, &args),
        ))
        .await;
        Ok(self.traced_reply(pending, result))
    }

    #[tracing::instrument(name = "redis.eval", level = "debug", skip_all, fields(method = %self.method))]
    async fn eval(
        &mut self,
        script: String,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<wit::Value>, WitError>> {
        let mut pending = self.trace.start("redis", "EVALSHA");
        if self.trace.is_recording() {
            pending = pending.target(keys.join(" "));
        }
        let caps = self.caps.clone();
        // Routed as EVALSHA is: by its first key.
        let routed = [vec![String::new(), keys.len().to_string()], keys.clone()].concat();
        let result = Box::pin(watch!(self).reply(
            Some(("EVALSHA", &routed)),
            |key| caps.redis.shared_for(key),
            caps.redis.eval(&script, &keys, &args),
        ))
        .await;
        Ok(self.traced_reply(pending, result))
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
        match tokio::time::timeout(left, Box::pin(self.caps.redis.open())).await {
            Ok(Ok(conn)) => {
                self.open_connections += 1;
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

impl wit::HostConnection for HostState {
    #[tracing::instrument(name = "redis.connection.execute", level = "debug", skip_all, fields(method = %self.method))]
    async fn execute(
        &mut self,
        conn: Resource<RedisConnection>,
        name: String,
        args: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<wit::Value>, WitError>> {
        let name = name.to_ascii_uppercase();
        if let Some(err) = refuse_identity(&name).or_else(|| refuse_unbounded_wait(&name, &args)) {
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

    #[tracing::instrument(name = "redis.connection.pipeline", level = "debug", skip_all, fields(method = %self.method))]
    async fn pipeline(
        &mut self,
        conn: Resource<RedisConnection>,
        commands: Vec<Command>,
    ) -> wasmtime::Result<Result<Vec<Vec<wit::Value>>, WitError>> {
        for command in &commands {
            let name = command.name.to_ascii_uppercase();
            if let Some(err) =
                refuse_identity(&name).or_else(|| refuse_unbounded_wait(&name, &command.args))
            {
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
        let pending = self.trace.start("redis", names.join(" "));
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
                self.trace.finish(pending, Err(format!("{err:?}")));
                return Ok(Err(err));
            }
        };
        self.trace
            .finish(pending, Ok(Read::rows(values.len() as u64)));
        Ok(values
            .into_iter()
            .map(|value| self.reply(Ok(value)))
            .collect())
    }

    #[tracing::instrument(name = "redis.connection.drop", level = "debug", skip_all, fields(method = %self.method))]
    async fn drop(&mut self, conn: Resource<RedisConnection>) -> wasmtime::Result<()> {
        let conn = self.table.delete(conn)?;
        self.open_connections = self.open_connections.saturating_sub(1);
        Box::pin(conn.release()).await;
        Ok(())
    }
}

#[cfg(test)]
mod wait_tests {
    use super::*;

    fn refused(args: &[&str]) -> bool {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        refuse_unbounded_wait("WAIT", &args).is_some()
    }

    #[test]
    fn a_wait_is_refused_unless_its_timeout_is_bounded() {
        assert!(!refused(&["1", "100"]));
        assert!(!refused(&["1", "1000"]));
        assert!(refused(&["1", "0"]), "0 blocks until a replica answers");
        assert!(refused(&["1", "1001"]));
        assert!(refused(&["1"]));
        assert!(refused(&["1", "soon"]));
        assert!(refuse_unbounded_wait("GET", &["k".into()]).is_none());
    }
}
