//! The connections components reach Redis through, all as the restricted
//! user.
//!
//! Single commands and scripts share one multiplexed connection: it
//! pipelines every request's commands over one socket, which is what makes a
//! one-command strategy cheap. WATCH and MULTI/EXEC run on a dedicated
//! connection ([`super::dedicated`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use couponlab_contract::REQUESTS_CHANNEL;
use parking_lot::Mutex;
use prometheus::IntCounterVec;
use redis::{ErrorKind, RedisError, Value};
use tokio::sync::Semaphore;

use super::channels::Channels;
use super::connection::{DedicatedPool, RedisConnection};
use super::scripts::{InFlight, ScriptEnd, SentOn, Shas, kill};
use super::setup::NodeSetup;
use crate::redis_target::errors::is_busy;
use crate::redis_target::{RedisConn, RedisTarget, route_of};

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

    /// Channel subscriptions one call may hold at once.
    #[arg(long, env = "COUPONLAB_SUBSCRIPTIONS_PER_CALL", default_value_t = 4)]
    pub subscriptions_per_call: u32,

    /// Lease renewals one call may keep running at once.
    #[arg(long, env = "COUPONLAB_RENEWALS_PER_CALL", default_value_t = 4)]
    pub renewals_per_call: u32,
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
    /// The subscriptions of every call, on one connection.
    pub(super) channels: Channels,
    /// The lab's own name of the issue-request channel, which a
    /// component's PUBLISH to the plain name goes to.
    pub(super) requests_channel: String,
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
            channels: Channels::new(target.clone()),
            requests_channel: target.requests_channel(),
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

    /// `args` of the command `name`, with a PUBLISH to the plain
    /// issue-request channel sent to the lab's own name of it.
    pub(super) fn in_lab_channel(&self, name: &str, mut args: Vec<String>) -> Vec<String> {
        if name == "PUBLISH"
            && args
                .first()
                .is_some_and(|channel| channel == REQUESTS_CHANNEL)
        {
            args[0].clone_from(&self.requests_channel);
        }
        args
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
            slot: key.filter(|_| self.target.is_cluster()).map(route_of),
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
            self.shared
                .compare_and_swap(&current, Arc::new(Shared { conn, id: id + 1 }));
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
                // Boxed: setting Redis up is kilobytes of future that every
                // command's future would otherwise carry, and wasmtime
                // moves a host call's future by value.
                Box::pin(self.set_up_again(seen)).await?;
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

/// Redis refused the components' credentials: the user is gone. On a
/// cluster, a redirection the client gave up following is the same: it
/// could not log in on the node the redirection names (a node that was
/// down when the server started, or came back empty).
fn is_unknown_user(err: &RedisError) -> bool {
    err.kind() == ErrorKind::AuthenticationFailed
        || matches!(err.code(), Some("WRONGPASS" | "NOAUTH" | "MOVED" | "ASK"))
}

/// The scripts the components run ([`super::scripts`]), on the lab's Redis.
impl GuestRedis {
    /// EVALSHA with the cached SHA-1 of `script`; SCRIPT LOAD once on NOSCRIPT.
    pub async fn eval(
        &self,
        script: &str,
        keys: &[String],
        args: &[String],
    ) -> Result<Value, RedisError> {
        let sha = self.shas.of(script);
        let evalsha = || {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&*sha).arg(keys.len()).arg(keys).arg(args);
            cmd
        };
        self.as_user(|| async {
            match evalsha().query_async(&mut self.shared()).await {
                Err(err) if err.code() == Some("NOSCRIPT") => {
                    let _: String = redis::cmd("SCRIPT")
                        .arg("LOAD")
                        .arg(script)
                        .query_async(&mut self.shared())
                        .await?;
                    evalsha().query_async(&mut self.shared()).await
                }
                other => other,
            }
        })
        .await
    }

    /// Whether Redis is running a script past its busy threshold now: it
    /// answers the server's own connection `BUSY` (on a cluster, a node
    /// does).
    pub async fn running_a_script(&self) -> bool {
        let ping: Result<Value, RedisError> = redis::cmd("PING")
            .query_async(&mut self.setup.admin.clone())
            .await;
        ping.is_err_and(|err| is_busy(&err))
    }

    /// Ends the script a call sent, whose reply did not come by the call's
    /// deadline ([`kill`]).
    pub async fn end_script(&self, key: Option<&str>) -> ScriptEnd {
        kill(&self.setup.admin, key).await
    }
}
