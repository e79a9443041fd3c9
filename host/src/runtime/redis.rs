//! The `redis` capability.
//!
//! Single commands and scripts share one multiplexed connection: it pipelines
//! every request's commands over one socket, which is what makes a one-command
//! strategy cheap. WATCH and MULTI/EXEC are connection state, so they run on a
//! dedicated connection borrowed from a bounded pool for as long as the guest
//! holds its `connection` resource.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::{Mutex, RwLock};
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Client, ErrorKind, RedisError, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::component::Resource;

use super::bindings::redis::{self as wit, Command, RedisError as WitError};
use super::store::HostState;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Commands refused on the shared connection: they change the state of a
/// connection every request shares, or block it for everyone.
const NOT_SHARED: &[&str] = &[
    "MULTI",
    "EXEC",
    "DISCARD",
    "WATCH",
    "UNWATCH",
    "SELECT",
    "SWAPDB",
    "SUBSCRIBE",
    "PSUBSCRIBE",
    "SSUBSCRIBE",
    "UNSUBSCRIBE",
    "PUNSUBSCRIBE",
    "MONITOR",
    "QUIT",
    "RESET",
    "HELLO",
    "AUTH",
    "CLIENT",
    "BLPOP",
    "BRPOP",
    "BLMOVE",
    "BRPOPLPUSH",
    "BZPOPMIN",
    "BZPOPMAX",
    "BLMPOP",
    "BZMPOP",
    "WAIT",
    "SHUTDOWN",
    "DEBUG",
];

/// Commands refused on any connection: they would leave it unusable for the
/// next borrower or reach beyond the lab's keys.
const NEVER: &[&str] = &[
    "SELECT",
    "SWAPDB",
    "SUBSCRIBE",
    "PSUBSCRIBE",
    "SSUBSCRIBE",
    "MONITOR",
    "QUIT",
    "RESET",
    "HELLO",
    "AUTH",
    "SHUTDOWN",
    "DEBUG",
    "FLUSHALL",
    "CONFIG",
];

/// The Redis pools of one server.
pub struct RedisPools {
    shared: ConnectionManager,
    dedicated: Arc<DedicatedPool>,
    /// Script source -> SHA-1, so EVALSHA needs no hashing after the first call.
    scripts: RwLock<HashMap<String, String>>,
}

impl RedisPools {
    /// Creates the pools without connecting: a server starts (and answers
    /// every route that does not need Redis) while Redis is down.
    pub fn new(url: &str, dedicated_connections: usize) -> anyhow::Result<Self> {
        let client =
            Client::open(url).with_context(|| format!("REDIS_URL is not a Redis URL: {url}"))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let shared = ConnectionManager::new_lazy_with_config(client.clone(), config)
            .context("cannot set up the shared Redis connection")?;
        Ok(Self {
            shared,
            dedicated: Arc::new(DedicatedPool {
                client,
                permits: Arc::new(Semaphore::new(dedicated_connections.max(1))),
                idle: Mutex::new(Vec::new()),
            }),
            scripts: RwLock::new(HashMap::new()),
        })
    }

    /// The shared multiplexed connection, for host-side work (warming, results).
    pub fn shared(&self) -> ConnectionManager {
        self.shared.clone()
    }

    /// One command on the shared connection.
    pub async fn execute(&self, name: &str, args: &[String]) -> Result<Value, RedisError> {
        let mut cmd = redis::cmd(name);
        cmd.arg(args);
        cmd.query_async(&mut self.shared.clone()).await
    }

    /// EVALSHA with the cached SHA-1 of `script`; SCRIPT LOAD once on NOSCRIPT.
    pub async fn eval(
        &self,
        script: &str,
        keys: &[String],
        args: &[String],
    ) -> Result<Value, RedisError> {
        let sha = self.sha_of(script);
        let evalsha = || {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&sha).arg(keys.len()).arg(keys).arg(args);
            cmd
        };
        match evalsha().query_async(&mut self.shared.clone()).await {
            Err(err) if err.code() == Some("NOSCRIPT") => {
                let _: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(script)
                    .query_async(&mut self.shared.clone())
                    .await?;
                evalsha().query_async(&mut self.shared.clone()).await
            }
            other => other,
        }
    }

    fn sha_of(&self, script: &str) -> String {
        if let Some(sha) = self.scripts.read().get(script) {
            return sha.clone();
        }
        let sha = sha1_smol::Sha1::from(script).digest().to_string();
        self.scripts.write().insert(script.to_string(), sha.clone());
        sha
    }

    /// Borrows a dedicated connection, waiting while all are in use.
    pub async fn open(&self) -> Result<RedisConnection, RedisError> {
        self.dedicated.clone().borrow().await
    }
}

/// Dedicated connections: at most `permits` exist at once; returned ones idle
/// here for the next borrower.
struct DedicatedPool {
    client: Client,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<MultiplexedConnection>>,
}

impl DedicatedPool {
    async fn borrow(self: Arc<Self>) -> Result<RedisConnection, RedisError> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| RedisError::from((ErrorKind::Client, "the Redis pool is closed")))?;
        let idle = self.idle.lock().pop();
        let conn = match idle {
            Some(conn) => conn,
            None => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(RESPONSE_TIMEOUT));
                self.client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?
            }
        };
        Ok(RedisConnection {
            conn: Some(conn),
            state: ConnectionState::default(),
            pool: self,
            _permit: permit,
        })
    }
}

/// What a guest left on a dedicated connection, so it can be undone before
/// the connection serves another request.
#[derive(Default)]
struct ConnectionState {
    in_multi: bool,
    watching: bool,
    broken: bool,
}

impl ConnectionState {
    fn track(&mut self, name: &str) {
        match name {
            "MULTI" => self.in_multi = true,
            "WATCH" => self.watching = true,
            "UNWATCH" => self.watching = false,
            "EXEC" | "DISCARD" => {
                self.in_multi = false;
                self.watching = false;
            }
            _ => {}
        }
    }
}

/// The host side of the WIT `connection` resource.
pub struct RedisConnection {
    /// `None` once released.
    conn: Option<MultiplexedConnection>,
    state: ConnectionState,
    pool: Arc<DedicatedPool>,
    /// Held for as long as the connection is borrowed; dropping it (also when
    /// a trapped guest's store is torn down) frees the slot.
    _permit: OwnedSemaphorePermit,
}

impl RedisConnection {
    pub async fn execute(&mut self, name: &str, args: &[String]) -> Result<Value, RedisError> {
        let conn = self
            .conn
            .as_mut()
            .expect("a borrowed connection is present until release");
        let mut cmd = redis::cmd(name);
        cmd.arg(args);
        let reply = cmd.query_async(conn).await;
        self.after(name, &reply);
        reply
    }

    pub async fn pipeline(&mut self, commands: &[Command]) -> Result<Vec<Value>, RedisError> {
        let conn = self
            .conn
            .as_mut()
            .expect("a borrowed connection is present until release");
        let mut pipe = redis::pipe();
        for command in commands {
            pipe.cmd(&command.name).arg(&command.args);
        }
        let replies = pipe.query_async::<Vec<Value>>(conn).await;
        for command in commands {
            self.state.track(&command.name.to_ascii_uppercase());
        }
        if let Err(err) = &replies {
            self.state.broken |= is_connection_error(err);
        }
        replies
    }

    fn after(&mut self, name: &str, reply: &Result<Value, RedisError>) {
        match reply {
            Ok(_) => self.state.track(name),
            // EXEC answers EXECABORT when a queued command was rejected; the
            // transaction is over either way.
            Err(err) if name == "EXEC" && !is_connection_error(err) => self.state.track(name),
            Err(err) => self.state.broken |= is_connection_error(err),
        }
    }

    /// Undoes what the guest left open and returns the connection to the pool.
    /// A broken connection, or one that cannot be reset, is closed instead.
    pub async fn release(mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        if self.state.broken {
            return;
        }
        let reset = if self.state.in_multi {
            Some("DISCARD")
        } else if self.state.watching {
            Some("UNWATCH")
        } else {
            None
        };
        if let Some(reset) = reset
            && redis::cmd(reset)
                .query_async::<Value>(&mut conn)
                .await
                .is_err()
        {
            return;
        }
        self.pool.idle.lock().push(conn);
    }
}

fn is_connection_error(err: &RedisError) -> bool {
    !matches!(err.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
}

/// Maps a client error to what the guest sees.
fn to_wit_error(err: RedisError) -> WitError {
    if is_connection_error(&err) {
        WitError::Connection(format!("Redis is unavailable: {err}"))
    } else {
        WitError::Server(err.to_string())
    }
}

/// Flattens a reply into the pre-order list the WIT `reply` type describes.
pub fn flatten(value: Value, out: &mut Vec<wit::Value>) {
    match value {
        Value::Nil => out.push(wit::Value::Nil),
        Value::Int(i) => out.push(wit::Value::Int(i)),
        Value::BulkString(bytes) => out.push(wit::Value::Data(bytes)),
        Value::SimpleString(s) => out.push(wit::Value::Status(s)),
        Value::Okay => out.push(wit::Value::Status("OK".into())),
        Value::Double(d) => out.push(wit::Value::Double(d)),
        Value::Boolean(b) => out.push(wit::Value::Boolean(b)),
        Value::VerbatimString { text, .. } => out.push(wit::Value::Data(text.into_bytes())),
        Value::BigNumber(digits) => out.push(wit::Value::Data(digits)),
        Value::Array(items) | Value::Set(items) | Value::Push { data: items, .. } => {
            out.push(wit::Value::Array(items.len() as u32));
            for item in items {
                flatten(item, out);
            }
        }
        Value::Map(pairs) => {
            out.push(wit::Value::Array(2 * pairs.len() as u32));
            for (key, value) in pairs {
                flatten(key, out);
                flatten(value, out);
            }
        }
        Value::Attribute { data, .. } => flatten(*data, out),
        Value::ServerError(err) => out.push(wit::Value::ServerError(match err.details() {
            Some(details) => format!("{} {details}", err.code()),
            None => err.code().to_string(),
        })),
        // A reply kind newer than this host: keep its text rather than fail.
        other => out.push(wit::Value::Data(format!("{other:?}").into_bytes())),
    }
}

fn reply(result: Result<Value, RedisError>) -> Result<Vec<wit::Value>, WitError> {
    let value = result.map_err(to_wit_error)?;
    let mut out = Vec::new();
    flatten(value, &mut out);
    Ok(out)
}

fn refuse(name: &str, list: &[&str], why: &str) -> Option<WitError> {
    list.contains(&name)
        .then(|| WitError::Server(format!("{name} is not allowed {why}")))
}

impl wit::Host for HostState {
    async fn execute(
        &mut self,
        name: String,
        args: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<wit::Value>, WitError>> {
        let name = name.to_ascii_uppercase();
        if let Some(err) = refuse(
            &name,
            NOT_SHARED,
            "on the shared connection; use redis.open() for connection state",
        ) {
            return Ok(Err(err));
        }
        Ok(reply(self.caps.redis.execute(&name, &args).await))
    }

    async fn eval(
        &mut self,
        script: String,
        keys: Vec<String>,
        args: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<wit::Value>, WitError>> {
        Ok(reply(self.caps.redis.eval(&script, &keys, &args).await))
    }

    async fn open(&mut self) -> wasmtime::Result<Result<Resource<RedisConnection>, WitError>> {
        match self.caps.redis.open().await {
            Ok(conn) => Ok(Ok(self.table.push(conn)?)),
            Err(err) => Ok(Err(to_wit_error(err))),
        }
    }
}

impl wit::HostConnection for HostState {
    async fn execute(
        &mut self,
        conn: Resource<RedisConnection>,
        name: String,
        args: Vec<String>,
    ) -> wasmtime::Result<Result<Vec<wit::Value>, WitError>> {
        let name = name.to_ascii_uppercase();
        if let Some(err) = refuse(&name, NEVER, "on a lab connection") {
            return Ok(Err(err));
        }
        let conn = self.table.get_mut(&conn)?;
        Ok(reply(conn.execute(&name, &args).await))
    }

    async fn pipeline(
        &mut self,
        conn: Resource<RedisConnection>,
        commands: Vec<Command>,
    ) -> wasmtime::Result<Result<Vec<Vec<wit::Value>>, WitError>> {
        for command in &commands {
            if let Some(err) = refuse(
                &command.name.to_ascii_uppercase(),
                NEVER,
                "on a lab connection",
            ) {
                return Ok(Err(err));
            }
        }
        let conn = self.table.get_mut(&conn)?;
        match conn.pipeline(&commands).await {
            Ok(values) => Ok(Ok(values
                .into_iter()
                .map(|value| {
                    let mut out = Vec::new();
                    flatten(value, &mut out);
                    out
                })
                .collect())),
            Err(err) => Ok(Err(to_wit_error(err))),
        }
    }

    async fn drop(&mut self, conn: Resource<RedisConnection>) -> wasmtime::Result<()> {
        let conn = self.table.delete(conn)?;
        conn.release().await;
        Ok(())
    }
}
