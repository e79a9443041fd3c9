//! A Redis primary behind Redis Sentinels: `REDIS_URL=redis+sentinel://
//! [USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...]/MASTER[/DB]` names the
//! Sentinels and the master's name; the credentials and database are the
//! data nodes'. The primary is asked of the Sentinels (redis-rs's
//! `sentinel`, which checks with `ROLE` that the node it names is one) when
//! a connection opens, and again once a connection fails: a failover
//! promotes a replica at another address, and a connection to the old
//! primary either breaks (it died, or Sentinel's `CLIENT KILL` when it was
//! demoted) or answers `READONLY` (it came back as a replica). A target
//! given another primary than before counts it ([`SentinelTarget::primary_changes`]):
//! what Redis held only on the old one may be gone, and the host asks the
//! components that keep their truth there to rebuild it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, IntoConnectionInfo, Pipeline, RedisConnectionInfo,
    RedisError, RedisFuture, RedisResult, ServerErrorKind, Value,
};
use tokio::sync::watch;

/// The schemes of a URL naming Sentinels.
const SCHEMES: [&str; 2] = ["redis+sentinel", "valkey+sentinel"];
/// A Sentinel's port when the URL gives none.
const SENTINEL_PORT: u16 = 26379;
/// How long asking the Sentinels for the primary and checking it may take:
/// a primary that stopped answering (SIGSTOP) would hold the check forever.
const LOOKUP_LIMIT: Duration = Duration::from_secs(2);

/// Whether `url` names Sentinels.
pub fn is_sentinel(url: &str) -> bool {
    url.trim()
        .split_once("://")
        .is_some_and(|(scheme, _)| SCHEMES.contains(&scheme))
}

/// A `redis+sentinel://` URL, taken apart.
#[derive(Debug, PartialEq)]
pub struct SentinelUrl {
    /// `USER:PASSWORD` as written (percent-encoded), for the data nodes.
    userinfo: Option<String>,
    pub sentinels: Vec<(String, u16)>,
    pub master: String,
    pub db: i64,
}

impl SentinelUrl {
    /// Parses `url`, answering what is wrong with it.
    pub fn parse(url: &str) -> Result<Self, String> {
        let (_, rest) = url.trim().split_once("://").ok_or("it has no scheme")?;
        let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo.to_string()), hosts),
            None => (None, authority),
        };
        let sentinels = hosts
            .split(',')
            .map(str::trim)
            .filter(|host| !host.is_empty())
            .map(|host| match host.rsplit_once(':') {
                Some((name, port)) => port
                    .parse()
                    .map(|port| (name.to_string(), port))
                    .map_err(|_| format!("the Sentinel {host} has no valid port")),
                None => Ok((host.to_string(), SENTINEL_PORT)),
            })
            .collect::<Result<Vec<_>, _>>()?;
        if sentinels.is_empty() {
            return Err("it names no Sentinel".to_string());
        }
        let (master, db) = path.split_once('/').unwrap_or((path, ""));
        if master.is_empty() {
            return Err("it names no master (the name the Sentinels monitor it by)".to_string());
        }
        let db = match db.trim_end_matches('/') {
            "" => 0,
            db => db
                .parse()
                .map_err(|_| format!("its database {db:?} is not a number"))?,
        };
        Ok(Self {
            userinfo,
            sentinels,
            master: master.to_string(),
            db,
        })
    }

    /// The same URL with `user` and `password` for the data nodes.
    pub fn with_user(&self, user: &str, password: &str) -> String {
        let sentinels: Vec<String> = self
            .sentinels
            .iter()
            .map(|(host, port)| format!("{host}:{port}"))
            .collect();
        format!(
            "redis+sentinel://{user}:{password}@{}/{}/{}",
            sentinels.join(","),
            self.master,
            self.db
        )
    }

    /// The data nodes' user, password and database, as redis-rs decodes
    /// them from a URL.
    fn node_settings(&self) -> RedisResult<RedisConnectionInfo> {
        let credentials = self
            .userinfo
            .as_ref()
            .map(|userinfo| format!("{userinfo}@"))
            .unwrap_or_default();
        let info = format!("redis://{credentials}127.0.0.1/{}", self.db).into_connection_info()?;
        Ok(info.redis_settings().clone())
    }
}

/// The Sentinels and what the lab asks them.
pub struct SentinelTarget {
    sentinel: tokio::sync::Mutex<Sentinel>,
    master: String,
    node: SentinelNodeConnectionInfo,
    db: i64,
    /// The address of the primary this target was last given.
    named: std::sync::Mutex<Option<String>>,
    /// Counts the times a target of these Sentinels and master was given
    /// another primary than before (a failover it followed).
    changes: watch::Sender<u64>,
}

/// The primary changes of every target of the same Sentinels and master in
/// this process: the host's own connections and the components' are
/// different targets (different users), and whichever follows a failover
/// first or last, each move counts.
fn changes_of(parsed: &SentinelUrl) -> watch::Sender<u64> {
    static SHARED: LazyLock<std::sync::Mutex<HashMap<String, watch::Sender<u64>>>> =
        LazyLock::new(Default::default);
    let key = format!("{:?}/{}", parsed.sentinels, parsed.master);
    let mut shared = SHARED
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    shared
        .entry(key)
        .or_insert_with(|| watch::channel(0).0)
        .clone()
}

impl SentinelTarget {
    pub fn open(url: &str) -> Result<Self, String> {
        let parsed = SentinelUrl::parse(url)?;
        let sentinels: Vec<String> = parsed
            .sentinels
            .iter()
            .map(|(host, port)| format!("redis://{host}:{port}"))
            .collect();
        let sentinel = Sentinel::build(sentinels).map_err(|err| err.to_string())?;
        let settings = parsed.node_settings().map_err(|err| err.to_string())?;
        let node = SentinelNodeConnectionInfo::default().set_redis_connection_info(settings);
        Ok(Self {
            sentinel: tokio::sync::Mutex::new(sentinel),
            changes: changes_of(&parsed),
            master: parsed.master,
            node,
            db: parsed.db,
            named: std::sync::Mutex::new(None),
        })
    }

    /// A count that moves each time a target of these Sentinels is given
    /// another primary than it had: what to wait on to learn of a failover.
    pub fn primary_changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Remembers the primary `client` reaches, counting a change when it is
    /// not the one this target had.
    fn note(&self, client: &redis::Client) {
        let address = client.get_connection_info().addr().to_string();
        let mut named = self
            .named
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let before = named.replace(address.clone());
        if before.as_ref().is_some_and(|before| *before != address) {
            tracing::warn!(
                master = %self.master,
                from = before.as_deref().unwrap_or_default(),
                to = %address,
                "the Sentinels name another primary"
            );
            self.changes.send_modify(|count| *count += 1);
        }
    }

    pub fn db(&self) -> i64 {
        self.db
    }

    /// The primary the Sentinels name now, checked to be one.
    pub async fn primary(&self) -> RedisResult<redis::Client> {
        let mut sentinel = self.sentinel.lock().await;
        let lookup = sentinel.async_master_for(&self.master, Some(&self.node));
        let primary = tokio::time::timeout(LOOKUP_LIMIT, lookup)
            .await
            .unwrap_or_else(|_| Err(lookup_timed_out()))?;
        self.note(&primary);
        Ok(primary)
    }

    /// The replicas the Sentinels list as online, each checked to be one.
    pub async fn replicas(&self) -> RedisResult<Vec<redis::Client>> {
        let mut sentinel = self.sentinel.lock().await;
        let lookup = sentinel.async_get_replica_clients(&self.master, Some(&self.node));
        tokio::time::timeout(LOOKUP_LIMIT, lookup)
            .await
            .unwrap_or_else(|_| Err(lookup_timed_out()))
    }
}

fn lookup_timed_out() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "the Sentinels did not name a primary that answers in time",
    ))
}

/// A connection shared by many callers to whichever node is the primary:
/// opened on first use, and after a failure on the primary the Sentinels
/// name then. The command that met the failure fails (its answer may be
/// lost: it is not sent again).
#[derive(Clone)]
pub struct SentinelConn {
    target: Arc<SentinelTarget>,
    config: AsyncConnectionConfig,
    current: Arc<tokio::sync::Mutex<Option<(u64, MultiplexedConnection)>>>,
    opened: Arc<AtomicU64>,
}

impl SentinelConn {
    pub fn new(target: Arc<SentinelTarget>, config: AsyncConnectionConfig) -> Self {
        Self {
            target,
            config,
            current: Arc::default(),
            opened: Arc::default(),
        }
    }

    /// The replicas the Sentinels list as online.
    pub async fn replicas(&self) -> RedisResult<Vec<redis::Client>> {
        self.target.replicas().await
    }

    /// The connection to the primary, opened when there is none; callers
    /// meanwhile wait for the one opening.
    async fn connection(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        let mut current = self.current.lock().await;
        if let Some(open) = &*current {
            return Ok(open.clone());
        }
        let conn = self
            .target
            .primary()
            .await?
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        let id = self.opened.fetch_add(1, Ordering::Relaxed);
        *current = Some((id, conn.clone()));
        Ok((id, conn))
    }

    /// Drops connection `id` when `result` says it no longer reaches the
    /// primary, so that the next command asks the Sentinels.
    async fn follow<T>(&self, id: u64, result: &RedisResult<T>) {
        let Err(err) = result else { return };
        if !reaches_no_primary(err) {
            return;
        }
        let mut current = self.current.lock().await;
        if current.as_ref().is_some_and(|(open, _)| *open == id) {
            *current = None;
        }
    }
}

/// The connection broke, or the node it reaches is no longer the primary.
fn reaches_no_primary(err: &RedisError) -> bool {
    err.is_io_error()
        || err.is_connection_dropped()
        || err.is_connection_refusal()
        || err.is_timeout()
        || matches!(
            err.kind(),
            ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
        )
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let (id, mut conn) = self.connection().await?;
            let result = conn.req_packed_command(cmd).await;
            self.follow(id, &result).await;
            result
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let (id, mut conn) = self.connection().await?;
            let result = conn.req_packed_commands(pipeline, offset, count).await;
            self.follow(id, &result).await;
            result
        })
    }

    fn get_db(&self) -> i64 {
        self.target.db
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_names_its_sentinels_master_and_database() {
        let url = SentinelUrl::parse(
            "redis+sentinel://admin:s%40cret@127.0.0.1:26480,localhost/couponlab/3",
        )
        .unwrap();
        assert_eq!(
            url.sentinels,
            vec![
                ("127.0.0.1".to_string(), 26480),
                ("localhost".to_string(), SENTINEL_PORT)
            ]
        );
        assert_eq!((url.master.as_str(), url.db), ("couponlab", 3));
        let settings = url.node_settings().unwrap();
        assert_eq!(settings.password(), Some("s@cret"), "decoded");
        assert_eq!(settings.db(), 3);
        assert_eq!(
            url.with_user("u", "p"),
            "redis+sentinel://u:p@127.0.0.1:26480,localhost:26379/couponlab/3"
        );
        assert_eq!(SentinelUrl::parse("redis+sentinel://a:1/m").unwrap().db, 0);
        for (bad, told) in [
            ("redis+sentinel:///m/0", "no Sentinel"),
            ("redis+sentinel://a:1", "no master"),
            ("redis+sentinel://a:x/m", "no valid port"),
            ("redis+sentinel://a:1/m/zero", "not a number"),
        ] {
            let err = SentinelUrl::parse(bad).unwrap_err();
            assert!(err.contains(told), "{bad}: {err}");
        }
    }
}
