//! Where the lab's Redis is — one server, a primary behind Redis Sentinels
//! ([`sentinel`]), or a Redis Cluster reached through seed nodes — and a
//! connection the rest of the host uses the same way in every case. On a cluster, redis-rs's cluster client sends each command to
//! the node that owns its key (and follows MOVED when slots move), so no
//! caller routes anything; the few things that differ — scanning every node,
//! a dedicated connection pinned to one node, subscribing — are here.

pub mod errors;
mod routing;
pub mod sentinel;
pub mod url;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use couponlab_contract::REQUESTS_CHANNEL;
use redis::aio::{
    ConnectionLike, ConnectionManager, ConnectionManagerConfig, MultiplexedConnection,
};
use redis::cluster::{ClusterClient, ClusterConfig};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, RedisResult, Value};

use routing::at_address;
pub use routing::{first_key, route_of};
use sentinel::{SentinelConn, SentinelTarget};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A Redis to connect to: a server, a primary the Sentinels name, or a
/// cluster's seed nodes.
#[derive(Clone)]
pub enum RedisTarget {
    Server(redis::Client),
    Sentinel(Arc<SentinelTarget>),
    Cluster {
        client: Box<ClusterClient>,
        /// The first seed: where the Pub/Sub subscriber listens (a cluster
        /// hands every PUBLISH to every node).
        first: redis::Client,
    },
}

impl RedisTarget {
    /// `urls` is one URL, or with `cluster` a comma-separated list of seed
    /// nodes (a cluster has only database 0).
    /// A URL the lab cannot use is refused naming REDIS_URL, what is wrong
    /// with it and what it takes ([`url::check`]).
    pub fn open(urls: &str, cluster: bool) -> anyhow::Result<Self> {
        url::check(urls, cluster).map_err(anyhow::Error::msg)?;
        if sentinel::is_sentinel(urls) {
            let target = SentinelTarget::open(urls).map_err(anyhow::Error::msg)?;
            return Ok(Self::Sentinel(Arc::new(target)));
        }
        if !cluster {
            let client = redis::Client::open(urls.trim()).context(url::ACCEPTED)?;
            return Ok(Self::Server(client));
        }
        let seeds = seeds(urls);
        let first = redis::Client::open(seeds[0]).context(url::ACCEPTED)?;
        let client = ClusterClient::builder(seeds.iter().copied())
            .connection_timeout(CONNECT_TIMEOUT)
            .retries(2)
            .build()
            .context(url::ACCEPTED)?;
        Ok(Self::Cluster {
            client: Box::new(client),
            first,
        })
    }

    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster { .. })
    }

    /// Behind Sentinels, a count that moves each time a connection of the
    /// lab is given another primary (a failover followed); `None` on a
    /// server or a cluster.
    pub fn primary_changes(&self) -> Option<tokio::sync::watch::Receiver<u64>> {
        match self {
            Self::Sentinel(target) => Some(target.primary_changes()),
            Self::Server(_) | Self::Cluster { .. } => None,
        }
    }

    /// A connection shared by many callers at once, connected lazily: a
    /// server starts (and answers what needs no Redis) while Redis is down;
    /// it reconnects after a failure.
    pub fn shared(&self, response_timeout: Duration) -> anyhow::Result<RedisConn> {
        match self {
            Self::Server(client) => {
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(response_timeout))
                    .set_number_of_retries(1)
                    .set_max_delay(Duration::from_millis(500));
                let manager = ConnectionManager::new_lazy_with_config(client.clone(), config)
                    .context("cannot set up a Redis connection")?;
                Ok(RedisConn::Managed(manager))
            }
            Self::Sentinel(target) => Ok(RedisConn::Sentinel(Box::new(SentinelConn::new(
                target.clone(),
                own_config(response_timeout),
            )))),
            Self::Cluster { client, .. } => Ok(RedisConn::Cluster(
                client.get_pending_async_connection_with_config(cluster_config(response_timeout)),
            )),
        }
    }

    /// A connection of its own (its own sockets), for blocking reads and
    /// connection state.
    pub async fn connect(&self, response_timeout: Duration) -> RedisResult<RedisConn> {
        match self {
            Self::Server(client) => client
                .get_multiplexed_async_connection_with_config(&own_config(response_timeout))
                .await
                .map(RedisConn::Own),
            Self::Sentinel(target) => target
                .primary()
                .await?
                .get_multiplexed_async_connection_with_config(&own_config(response_timeout))
                .await
                .map(RedisConn::Own),
            Self::Cluster { client, .. } => client
                .get_async_connection_with_config(cluster_config(response_timeout))
                .await
                .map(RedisConn::Cluster),
        }
    }

    /// The lab's channel of issue requests (stage 5). Pub/Sub ignores a
    /// server's logical databases, so a lab on database 9 hearing the plain
    /// channel would hear a lab on database 0 too, and confirm requests its
    /// database never saw: a lab off database 0 names the channel after its
    /// database. Components publish to the plain name; the host puts it in
    /// the lab's (a cluster has only database 0).
    pub fn requests_channel(&self) -> String {
        let database = match self {
            Self::Server(client) => client.get_connection_info().redis_settings().db(),
            Self::Sentinel(target) => target.db(),
            Self::Cluster { .. } => 0,
        };
        match database {
            0 => REQUESTS_CHANNEL.to_string(),
            database => format!("{REQUESTS_CHANNEL}:db{database}"),
        }
    }

    /// The server a Pub/Sub subscriber connects to: behind Sentinels, the
    /// primary they name now.
    pub async fn subscriber(&self) -> RedisResult<redis::Client> {
        match self {
            Self::Server(client) | Self::Cluster { first: client, .. } => Ok(client.clone()),
            Self::Sentinel(target) => target.primary().await,
        }
    }
}

fn own_config(response_timeout: Duration) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(response_timeout))
}

/// The seed URLs of a comma-separated list.
pub fn seeds(urls: &str) -> Vec<&str> {
    urls.split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .collect()
}

fn cluster_config(response_timeout: Duration) -> ClusterConfig {
    ClusterConfig::new()
        .set_connection_timeout(CONNECT_TIMEOUT)
        .set_response_timeout(response_timeout)
}

/// A connection to the lab's Redis: every command of the host goes through
/// one.
#[derive(Clone)]
pub enum RedisConn {
    /// A server, through a connection that reconnects by itself.
    Managed(ConnectionManager),
    /// A server, through a connection of its own.
    Own(MultiplexedConnection),
    /// The primary the Sentinels name, followed across failovers. Boxed:
    /// the other variants are a handle or two, and every Redis call's
    /// future holds a connection, so the largest variant's size is copied
    /// with each of them.
    Sentinel(Box<SentinelConn>),
    /// A cluster: each command to the node owning its key.
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Managed(conn) => conn.req_packed_command(cmd),
            Self::Own(conn) => conn.req_packed_command(cmd),
            Self::Sentinel(conn) => conn.req_packed_command(cmd),
            Self::Cluster(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Managed(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Own(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Sentinel(conn) => conn.req_packed_commands(pipeline, offset, count),
            Self::Cluster(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Managed(conn) => conn.get_db(),
            Self::Own(conn) => conn.get_db(),
            Self::Sentinel(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
        }
    }
}

impl RedisConn {
    pub fn is_cluster(&self) -> bool {
        matches!(self, Self::Cluster(_))
    }

    /// `cmd` on every master of a cluster, each one's answer; on a server,
    /// its one answer.
    pub async fn on_each_master(&mut self, cmd: Cmd) -> RedisResult<Vec<RedisResult<Value>>> {
        let Self::Cluster(conn) = self else {
            return Ok(vec![cmd.query_async(self).await]);
        };
        let mut answers = Vec::new();
        for (host, port) in masters(conn).await? {
            answers.push(
                conn.route_command(cmd.clone(), at_address(host, port))
                    .await,
            );
        }
        Ok(answers)
    }

    /// `cmd` on each replica the Sentinels list as online, each one's
    /// answer; none on a server or a cluster. For what a node keeps to
    /// itself (its ACL users), so that a replica promoted later has it.
    pub async fn on_each_replica(&self, cmd: Cmd) -> RedisResult<Vec<RedisResult<Value>>> {
        let Self::Sentinel(conn) = self else {
            return Ok(Vec::new());
        };
        let mut answers = Vec::new();
        for replica in conn.replicas().await? {
            let config = own_config(CONNECT_TIMEOUT);
            answers.push(
                match replica
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                {
                    Ok(mut node) => cmd.query_async(&mut node).await,
                    Err(err) => Err(err),
                },
            );
        }
        Ok(answers)
    }

    /// The keys matching `pattern` on every node (SCAN, 500 keys a page,
    /// node by node on a cluster: a SCAN cursor is one node's).
    pub async fn keys_matching(&mut self, pattern: &str) -> RedisResult<Vec<String>> {
        let nodes = match self {
            Self::Cluster(conn) => masters(conn).await?.into_iter().map(Some).collect(),
            _ => vec![None],
        };
        let mut keys = Vec::new();
        for node in nodes {
            let mut cursor = 0u64;
            loop {
                let mut scan = redis::cmd("SCAN");
                scan.arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(500);
                let reply = match (&mut *self, &node) {
                    (Self::Cluster(conn), Some((host, port))) => {
                        conn.route_command(scan, at_address(host.clone(), *port))
                            .await?
                    }
                    (conn, _) => scan.query_async(conn).await?,
                };
                let (next, page): (u64, Vec<String>) = redis::from_redis_value(reply)?;
                keys.extend(page);
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(keys)
    }

    /// Commands whose keys may lie in different slots: one pipeline on a
    /// server; one after the other on a cluster (a pipeline there goes to
    /// one node).
    pub async fn each(&mut self, commands: Vec<Cmd>) -> RedisResult<Vec<Value>> {
        if let Self::Cluster(conn) = self {
            let mut replies = Vec::with_capacity(commands.len());
            for cmd in commands {
                replies.push(cmd.query_async(conn).await?);
            }
            return Ok(replies);
        }
        if commands.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for cmd in commands {
            pipe.add_command(cmd);
        }
        pipe.query_async(self).await
    }

    /// Runs `cmd` where `route` says (the cluster node owning a slot); on a
    /// server, there.
    pub async fn query_at(&mut self, cmd: Cmd, route: Option<&Route>) -> RedisResult<Value> {
        match (self, route) {
            (Self::Cluster(conn), Some(route)) => {
                let node = SingleNodeRoutingInfo::SpecificNode(*route);
                conn.route_command(cmd, RoutingInfo::SingleNode(node)).await
            }
            (conn, _) => cmd.query_async(conn).await,
        }
    }

    /// `pipe` where `route` says, in order on one node's connection.
    pub async fn pipeline_at(
        &mut self,
        pipe: Pipeline,
        count: usize,
        route: Option<&Route>,
    ) -> RedisResult<Vec<Value>> {
        match (self, route) {
            (Self::Cluster(conn), Some(route)) => {
                let node = SingleNodeRoutingInfo::SpecificNode(*route);
                conn.route_pipeline(pipe, 0, count, node).await
            }
            (conn, _) => pipe.query_async(conn).await,
        }
    }
}

/// The cluster's masters, as `CLUSTER NODES` lists them.
async fn masters(conn: &mut ClusterConnection) -> RedisResult<Vec<(String, u16)>> {
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(conn).await?;
    Ok(nodes
        .lines()
        .filter_map(|line| {
            let mut parts = line.split_whitespace();
            let address = parts.nth(1)?;
            let flags = parts.next()?;
            if !flags.split(',').any(|flag| flag == "master") || flags.contains("fail") {
                return None;
            }
            // `host:port@bus-port[,hostname]`
            let (host, rest) = address.rsplit_once('@')?.0.rsplit_once(':')?;
            Some((host.to_string(), rest.parse().ok()?))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coupons_keys_share_its_slot() {
        use couponlab_contract::{ISSUE_STREAM, keys};
        let slot = route_of;
        assert_eq!(slot(&keys::issued(42)), slot(&keys::total(42)));
        assert_eq!(slot(&keys::issued(42)), slot(&ISSUE_STREAM.key(42)));
        assert_eq!(slot(&keys::issued(42)), slot(&keys::gate_remaining(42)));
        assert_ne!(slot(&keys::issued(42)), slot(&keys::issued(43)));
    }
}
