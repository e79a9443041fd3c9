//! The connections components reach Redis through, all as the restricted
//! user, and how they come back clean.
//!
//! Single commands and scripts share one multiplexed connection: it
//! pipelines every request's commands over one socket, which is what makes a
//! one-command strategy cheap. WATCH and MULTI/EXEC are connection state, so
//! they run on a dedicated connection borrowed from a bounded pool for as
//! long as the guest holds its `connection` resource. On a Redis Cluster a
//! dedicated connection goes to the node owning the first key it names
//! (WATCH's, or a pipeline's first command with a key) and stays there, so
//! MULTI, EXEC and UNWATCH, which name none, reach the node holding the
//! transaction; the keys of one transaction share one slot (a coupon's do).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use parking_lot::Mutex;
use prometheus::IntCounterVec;
use redis::cluster_routing::Route;
use redis::{ErrorKind, RedisError, Value};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::scripts::{InFlight, SentOn, Shas};
use super::setup::NodeSetup;
use crate::redis_target::{RedisConn, RedisTarget, first_key, route_of};
use crate::runtime::bindings::redis::Command;

pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The `redis` capability's settings.
#[derive(Debug, Clone, clap::Args)]
pub struct RedisArgs {
    /// Redis URL of the ACL user components' commands run as. Unset: the
    /// server creates (or updates) the user `couponlab-strategy` (on
    /// database n, `couponlab-strategy-dbn`), limited to `coupon:*` keys and
    /// the commands issuance needs, through REDIS_URL.
    #[arg(long, env = "COUPONLAB_STRATEGY_REDIS_URL")]
    pub strategy_redis_url: Option<String>,

    /// Dedicated Redis connections (for WATCH and MULTI/EXEC) open at once.
    #[arg(long, env = "COUPONLAB_REDIS_CONNECTIONS", default_value_t = 64)]
    pub redis_connections: usize,

    /// Bytes of one Redis reply.
    #[arg(long, env = "COUPONLAB_MAX_REPLY_BYTES", default_value_t = 8 << 20)]
    pub max_reply_bytes: usize,

    /// Dedicated Redis connections one call may hold at once.
    #[arg(long, env = "COUPONLAB_MAX_CONNECTIONS_PER_CALL", default_value_t = 4)]
    pub max_connections_per_call: u32,

    /// Redis's `busy-reply-threshold`, which the server sets: a script
    /// running this long makes Redis answer every other client BUSY, and
    /// can be killed once its call's deadline passed.
    #[arg(long, env = "COUPONLAB_REDIS_BUSY_SCRIPT_MS", default_value_t = 500)]
    pub busy_script_ms: u64,
}

/// The Redis that components reach.
pub struct GuestRedis {
    /// What a call may use of it.
    pub args: RedisArgs,
    target: RedisTarget,
    /// Replaced when Redis forgot the components' user (a connection whose
    /// reconnection failed authentication never tries again by itself), and
    /// when a script holds it: Redis reads nothing more from the connection
    /// whose script runs, so every command behind it would wait too.
    shared: ArcSwap<Shared>,
    dedicated: Arc<DedicatedPool>,
    pub(super) shas: Shas,
    /// Scripts sent on the shared connection and not answered yet.
    pub(super) in_flight: InFlight,
    /// The method whose script Redis refused to kill, until Redis is set
    /// up again (after the only remedy, a shutdown).
    pub(super) stuck_by: Mutex<Option<Arc<str>>>,
    /// How to set Redis up again when it no longer knows the components'
    /// user; its admin connection also ends runaway scripts.
    pub(super) setup: NodeSetup,
    /// Counts the set-ups since the start, so that many calls failing at
    /// once set Redis up again once.
    set_ups: AtomicU64,
    setting_up: tokio::sync::Mutex<()>,
    /// Scripts that outlived their call and were killed, by method.
    pub scripts_killed: IntCounterVec,
}

impl GuestRedis {
    /// Creates the pools without connecting: a server starts (and answers
    /// every route that does not need Redis) while Redis is down.
    pub fn new(
        url: &str,
        cluster: bool,
        args: &RedisArgs,
        setup: NodeSetup,
        scripts_killed: IntCounterVec,
    ) -> anyhow::Result<Self> {
        let target = RedisTarget::open(url, cluster).context("the components' Redis URL")?;
        let shared = target
            .shared(RESPONSE_TIMEOUT)
            .context("cannot set up the shared Redis connection")?;
        Ok(Self {
            args: args.clone(),
            target: target.clone(),
            shared: ArcSwap::from_pointee(Shared {
                conn: shared,
                id: 0,
            }),
            dedicated: Arc::new(DedicatedPool {
                target,
                permits: Arc::new(Semaphore::new(args.redis_connections.max(1))),
                idle: Mutex::new(Vec::new()),
            }),
            shas: Shas::default(),
            in_flight: InFlight::default(),
            stuck_by: Mutex::new(None),
            setup,
            set_ups: AtomicU64::new(0),
            setting_up: tokio::sync::Mutex::new(()),
            scripts_killed,
        })
    }

    /// The shared connection, as a command takes it.
    pub(super) fn shared(&self) -> RedisConn {
        self.shared.load().conn.clone()
    }

    /// Where a script with first key `key` goes out on the shared
    /// connection now: its number (a new connection has a new one), and on
    /// a cluster the key's slot.
    pub(super) fn shared_for(&self, key: Option<&str>) -> SentOn {
        SentOn::Shared {
            id: self.shared_id(),
            slot: key
                .filter(|_| self.target.is_cluster())
                .map(route_of),
        }
    }

    pub(super) fn is_cluster(&self) -> bool {
        self.target.is_cluster()
    }

    fn shared_id(&self) -> u64 {
        self.shared.load().id
    }

    /// Replaces shared connection `id`, unless another call replaced it
    /// already; the calls waiting on it keep it until they end.
    pub(super) fn replace_shared(&self, id: u64) -> Result<(), RedisError> {
        if self.shared_id() != id {
            return Ok(());
        }
        let conn = self.target.shared(RESPONSE_TIMEOUT).map_err(|err| {
            RedisError::from((
                ErrorKind::Client,
                "cannot set up the shared Redis connection",
                err.to_string(),
            ))
        })?;
        let current = self.shared.load();
        if current.id == id {
            self.shared.compare_and_swap(
                &current,
                Arc::new(Shared {
                    conn,
                    id: id + 1,
                }),
            );
        }
        Ok(())
    }

    /// Times Redis was set up again since the start because it had
    /// forgotten the components' user (a restart, a node back or new).
    pub fn set_ups_again(&self) -> u64 {
        self.set_ups.load(Ordering::Relaxed)
    }

    /// Runs `op`; when Redis does not know the components' user (it
    /// restarted without its ACL, or a node was down when this server
    /// started), sets Redis up again and runs `op` once more.
    pub(super) async fn as_user<T, F>(&self, op: impl Fn() -> F) -> Result<T, RedisError>
    where
        F: Future<Output = Result<T, RedisError>>,
    {
        let seen = self.set_ups.load(Ordering::Acquire);
        match op().await {
            Err(err) if is_unknown_user(&err) && self.setup.creates_user => {
                self.set_up_again(seen).await?;
                op().await
            }
            result => result,
        }
    }

    /// Puts the user and the threshold back, and replaces every
    /// connection: the shared one, and the idle dedicated ones (which died
    /// with the old server). Calls that failed together wait for one
    /// set-up; `seen` is the count their failed attempt ran under.
    async fn set_up_again(&self, seen: u64) -> Result<(), RedisError> {
        let _one_at_a_time = self.setting_up.lock().await;
        if self.set_ups.load(Ordering::Acquire) != seen {
            return Ok(());
        }
        tracing::warn!(
            user = %super::acl::user(&self.setup.admin_url),
            "Redis does not know the components' user (it restarted empty, or a node came back); setting it up again"
        );
        self.setup.apply().await?;
        self.replace_shared(self.shared_id())?;
        self.dedicated.idle.lock().clear();
        *self.stuck_by.lock() = None;
        self.set_ups.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// One command on the shared connection.
    pub async fn execute(&self, name: &str, args: &[String]) -> Result<Value, RedisError> {
        self.as_user(|| async {
            let mut cmd = redis::cmd(name);
            cmd.arg(args);
            cmd.query_async(&mut self.shared()).await
        })
        .await
    }

    /// Dedicated connections lent to calls now.
    pub fn dedicated_in_use(&self) -> usize {
        self.args
            .redis_connections
            .max(1)
            .saturating_sub(self.dedicated.permits.available_permits())
    }

    /// Borrows a dedicated connection, waiting while all are in use.
    pub async fn open(&self) -> Result<RedisConnection, RedisError> {
        self.as_user(|| self.dedicated.clone().borrow()).await
    }
}

/// The shared connection and its number.
struct Shared {
    conn: RedisConn,
    id: u64,
}

/// Dedicated connections: at most `permits` exist at once; returned ones idle
/// here for the next borrower.
struct DedicatedPool {
    target: RedisTarget,
    permits: Arc<Semaphore>,
    idle: Mutex<Vec<RedisConn>>,
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
            None => self.target.connect(RESPONSE_TIMEOUT).await?,
        };
        Ok(RedisConnection {
            conn: Some(conn),
            node: None,
            held_multi: false,
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
    /// Broken, or with a command in flight: its state is unknown.
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

/// The host side of the WIT `connection` resource. Dropped without
/// [`RedisConnection::release`] (its store torn down by a trap or a
/// deadline), the connection is closed, not pooled.
pub struct RedisConnection {
    /// `None` once released.
    conn: Option<RedisConn>,
    /// On a cluster, the node this connection's commands go to, once a
    /// command named a key.
    node: Option<Route>,
    /// On a cluster, a MULTI sent before any command named a key: held
    /// until the transaction's first key tells the node, then sent ahead of
    /// it (sent at once, it would open a transaction on some other node).
    held_multi: bool,
    state: ConnectionState,
    pool: Arc<DedicatedPool>,
    /// Held for as long as the connection is borrowed; dropping it (also when
    /// a trapped guest's store is torn down) frees the slot.
    _permit: OwnedSemaphorePermit,
}

impl RedisConnection {
    pub async fn execute(&mut self, name: &str, args: &[String]) -> Result<Value, RedisError> {
        let unbound_on_a_cluster = self.pool.target.is_cluster() && self.node.is_none();
        if unbound_on_a_cluster {
            if let Some(answer) = self.hold(name) {
                return Ok(answer);
            }
            self.node = first_key(name, args).map(route_of);
        }
        let mut cmd = redis::cmd(name);
        cmd.arg(args);
        let reply = if self.held_multi && self.node.is_some() {
            self.held_multi = false;
            self.state.track("MULTI");
            let mut pipe = redis::pipe();
            pipe.cmd("MULTI").add_command(cmd);
            self.send(pipe, 2)
                .await
                .map(|mut replies| replies.pop().unwrap_or(Value::Nil))
        } else {
            self.send_one(cmd).await
        };
        match &reply {
            Ok(_) => self.state.track(name),
            // EXEC answers EXECABORT when a queued command was rejected; the
            // transaction is over either way.
            Err(err) if name == "EXEC" && !is_connection_error(err) => self.state.track(name),
            Err(err) => self.failed(err),
        }
        reply
    }

    /// Answers, as Redis would, the transaction commands of a cluster
    /// connection that names no key yet: MULTI is held, and EXEC or DISCARD
    /// of a held MULTI end a transaction that queued nothing. `None` for
    /// every other command.
    fn hold(&mut self, name: &str) -> Option<Value> {
        match (name, self.held_multi) {
            ("MULTI", false) => {
                self.held_multi = true;
                Some(Value::Okay)
            }
            ("EXEC", true) => {
                self.held_multi = false;
                Some(Value::Array(Vec::new()))
            }
            ("DISCARD", true) => {
                self.held_multi = false;
                Some(Value::Okay)
            }
            _ => None,
        }
    }

    pub async fn pipeline(&mut self, commands: &[Command]) -> Result<Vec<Value>, RedisError> {
        if self.pool.target.is_cluster() && self.node.is_none() {
            self.node = commands
                .iter()
                .find_map(|command| first_key(&command.name.to_ascii_uppercase(), &command.args))
                .map(route_of);
        }
        let mut pipe = redis::pipe();
        let mut names: Vec<String> = Vec::with_capacity(commands.len() + 1);
        let send_held = self.held_multi && self.node.is_some();
        if send_held {
            self.held_multi = false;
            pipe.cmd("MULTI");
            names.push("MULTI".into());
        }
        for command in commands {
            pipe.cmd(&command.name).arg(&command.args);
            names.push(command.name.to_ascii_uppercase());
        }
        let mut replies = self.send(pipe, names.len()).await;
        for name in &names {
            self.state.track(name);
        }
        if let Err(err) = &replies {
            self.failed(err);
        }
        if send_held && let Ok(replies) = &mut replies {
            replies.remove(0);
        }
        replies
    }

    /// A connection error leaves this connection to be closed, and the
    /// idle ones too: they reach the same server, which went away.
    fn failed(&mut self, err: &RedisError) {
        if is_connection_error(err) {
            self.state.broken = true;
            self.pool.idle.lock().clear();
        }
    }

    /// One command on the connection's node.
    async fn send_one(&mut self, cmd: redis::Cmd) -> Result<Value, RedisError> {
        let conn = self
            .conn
            .as_mut()
            .expect("a borrowed connection is present until release");
        // Until the reply is in, the connection's state is unknown: a call
        // dropped here leaves it to be closed, not pooled.
        let was_broken = std::mem::replace(&mut self.state.broken, true);
        let reply = conn.query_at(cmd, self.node.as_ref()).await;
        self.state.broken = was_broken;
        reply
    }

    /// A pipeline of `count` commands on the connection's node, in order.
    async fn send(
        &mut self,
        pipe: redis::Pipeline,
        count: usize,
    ) -> Result<Vec<Value>, RedisError> {
        let conn = self
            .conn
            .as_mut()
            .expect("a borrowed connection is present until release");
        let was_broken = std::mem::replace(&mut self.state.broken, true);
        let replies = conn.pipeline_at(pipe, count, self.node.as_ref()).await;
        self.state.broken = was_broken;
        replies
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
            && conn
                .query_at(redis::cmd(reset), self.node.as_ref())
                .await
                .is_err()
        {
            return;
        }
        self.pool.idle.lock().push(conn);
    }
}

/// Redis refused the components' credentials: the user is gone. On a
/// cluster, a redirection the client gave up following is the same: it
/// could not log in on the node the redirection names (a node that was
/// down when the server started, or came back empty).
fn is_unknown_user(err: &RedisError) -> bool {
    err.kind() == ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("WRONGPASS" | "NOAUTH" | "MOVED" | "ASK"))
}

pub fn is_connection_error(err: &RedisError) -> bool {
    !matches!(err.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
}
