//! What the database and Redis hold, read directly (not through the lab's
//! API, whose figures are what is being checked), and the versions of both
//! for the report.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;
use couponlab_contract::{keys, shards};
use sqlx::mysql::MySqlPool;
use sqlx::postgres::PgPool;

use crate::histograms::Confirmed;
use crate::verification::Truth;

/// Connections to the server's database and Redis.
pub struct Sources {
    runtime: tokio::runtime::Runtime,
    db: Database,
    redis: RedisSource,
}

/// The served lab's database, either engine, on one connection.
pub enum Database {
    MySql(MySqlPool),
    Postgres(PgPool),
}

impl Database {
    /// Connects to `database_url` (`mysql://…` or `postgres://…`) on
    /// `runtime`, blocking until it answers.
    pub fn connect(runtime: &tokio::runtime::Runtime, database_url: &str) -> anyhow::Result<Self> {
        runtime
            .block_on(async {
                Ok::<_, sqlx::Error>(if database_url.starts_with("postgres") {
                    Database::Postgres(
                        sqlx::postgres::PgPoolOptions::new()
                            .max_connections(1)
                            .connect(database_url)
                            .await?,
                    )
                } else {
                    Database::MySql(
                        sqlx::mysql::MySqlPoolOptions::new()
                            .max_connections(1)
                            .connect(database_url)
                            .await?,
                    )
                })
            })
            .with_context(|| format!("cannot reach the database at {database_url}"))
    }
}

/// One Redis server, or a Redis Cluster (each key read on its node) with
/// its first seed for the version.
enum RedisSource {
    Server(redis::Client),
    Cluster(Box<redis::cluster::ClusterClient>, redis::Client),
}

impl RedisSource {
    fn connection(&self) -> anyhow::Result<Box<dyn redis::ConnectionLike>> {
        Ok(match self {
            Self::Server(client) => Box::new(client.get_connection()?),
            Self::Cluster(cluster, _) => Box::new(cluster.get_connection()?),
        })
    }
}

impl Sources {
    /// `redis_url` is a comma-separated list of seed nodes when `cluster`.
    pub fn connect(database_url: &str, redis_url: &str, cluster: bool) -> anyhow::Result<Sources> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let db = Database::connect(&runtime, database_url)?;
        let not_redis = || format!("not a Redis URL: {redis_url}");
        let seeds: Vec<&str> = redis_url.split(',').map(str::trim).collect();
        let first = redis::Client::open(seeds[0]).with_context(not_redis)?;
        let redis = if cluster {
            let cluster = redis::cluster::ClusterClient::new(seeds).with_context(not_redis)?;
            RedisSource::Cluster(Box::new(cluster), first)
        } else {
            RedisSource::Server(first)
        };
        Ok(Sources { runtime, db, redis })
    }

    /// The coupon's total, its rows by member, and what Redis would still sell.
    pub fn truth(&self, coupon_id: u64) -> anyhow::Result<Truth> {
        let id = coupon_id as i64;
        let total_of = "SELECT total_count FROM coupons WHERE id = ";
        let rows_of = "SELECT member_id, COUNT(*) FROM coupon_issues WHERE coupon_id = ";
        let by_member = " GROUP BY member_id";
        let (total, rows): (i64, Vec<(i64, i64)>) = self.runtime.block_on(async {
            Ok::<_, sqlx::Error>(match &self.db {
                Database::MySql(db) => (
                    sqlx::query_scalar(&format!("{total_of}?"))
                        .bind(id)
                        .fetch_one(db)
                        .await?,
                    sqlx::query_as(&format!("{rows_of}?{by_member}"))
                        .bind(id)
                        .fetch_all(db)
                        .await?,
                ),
                Database::Postgres(db) => (
                    sqlx::query_scalar(&format!("{total_of}$1"))
                        .bind(id)
                        .fetch_one(db)
                        .await?,
                    sqlx::query_as(&format!("{rows_of}$1{by_member}"))
                        .bind(id)
                        .fetch_all(db)
                        .await?,
                ),
            })
        })?;
        let rows: BTreeMap<u64, u64> = rows
            .into_iter()
            .map(|(member, n)| (member as u64, n as u64))
            .collect();
        let total = total.max(0) as u64;
        let sellable_in_redis = self.sellable_in_redis(coupon_id, total)?;
        let reserved_in_redis = match self.reserved_in_redis(coupon_id)? {
            Some(reserved) => Some(reserved),
            None => self.gate_buyers(coupon_id, rows.keys())?,
        };
        Ok(Truth {
            total,
            rows,
            reserved_in_redis,
            sellable_in_redis,
        })
    }

    /// Behind the drop gate, the members with a row whose count the gate
    /// holds (`coupon:gate:{couponId}:buyer:{memberId}`, the component's
    /// key, `strategies/redis-lua-gate/src/store.rs`); `None` when the
    /// coupon has no gate.
    fn gate_buyers<'a>(
        &self,
        coupon_id: u64,
        members: impl Iterator<Item = &'a u64>,
    ) -> anyhow::Result<Option<BTreeSet<u64>>> {
        let mut redis = self.redis.connection()?;
        let gated: bool = redis::cmd("EXISTS")
            .arg(keys::gate_remaining(coupon_id))
            .query(&mut *redis)?;
        if !gated {
            return Ok(None);
        }
        let members: Vec<u64> = members.copied().collect();
        let mut held = BTreeSet::new();
        for page in members.chunks(500) {
            let mut mget = redis::cmd("MGET");
            for member in page {
                mget.arg(format!("{}buyer:{member}", keys::gate(coupon_id)));
            }
            let counts: Vec<Option<u64>> = mget.query(&mut *redis)?;
            held.extend(
                page.iter()
                    .zip(counts)
                    .filter(|(_, count)| count.is_some_and(|n| n > 0))
                    .map(|(member, _)| *member),
            );
        }
        Ok(Some(held))
    }

    /// The members in the coupon's reservation set and its shards' sets,
    /// where a method reserves there: the coupon's total is kept in Redis
    /// (the Lua methods warm it on their first request, and again after a
    /// failover lost it) or its shards have a stock. An empty set then
    /// counts: a failover can lose every reservation. `None` behind the
    /// drop gate, whose buyers' counts are read by [`Self::gate_buyers`].
    fn reserved_in_redis(&self, coupon_id: u64) -> anyhow::Result<Option<BTreeSet<u64>>> {
        let mut redis = self.redis.connection()?;
        let gated: bool = redis::cmd("EXISTS")
            .arg(keys::gate_remaining(coupon_id))
            .query(&mut *redis)?;
        let total_kept: bool = redis::cmd("EXISTS")
            .arg(keys::total(coupon_id))
            .query(&mut *redis)?;
        let sharded: bool = redis::cmd("EXISTS")
            .arg(keys::shard_stock(coupon_id, 0))
            .query(&mut *redis)?;
        if gated || !(total_kept || sharded) {
            return Ok(None);
        }
        let sets = std::iter::once(keys::issued(coupon_id))
            .chain((0..shards::COUNT).map(|shard| keys::shard_issued(coupon_id, shard)));
        let mut reserved = BTreeSet::new();
        for set in sets {
            let members: Vec<u64> = redis::cmd("SMEMBERS").arg(set).query(&mut *redis)?;
            reserved.extend(members);
        }
        Ok(Some(reserved))
    }

    /// How many more coupons Redis would sell: the drop gate's stock counter,
    /// else what the shards of a sharded stock have left between them, else
    /// what the reservation set has room for;
    /// `None` when the coupon has none of them (a database method served it).
    fn sellable_in_redis(&self, coupon_id: u64, total: u64) -> anyhow::Result<Option<u64>> {
        let mut redis = self.redis.connection()?;
        let remaining: Option<i64> = redis::cmd("GET")
            .arg(keys::gate_remaining(coupon_id))
            .query(&mut *redis)?;
        if let Some(remaining) = remaining {
            return Ok(Some(remaining.max(0) as u64));
        }
        if let Some(left) = Self::left_on_shards(&mut *redis, coupon_id)? {
            return Ok(Some(left));
        }
        let reserved: u64 = redis::cmd("SCARD")
            .arg(keys::issued(coupon_id))
            .query(&mut *redis)?;
        Ok((reserved > 0).then(|| total.saturating_sub(reserved)))
    }

    /// What a sharded stock's shards would still sell, each its stock less
    /// its reservations (a shard sells only to its own members, so one
    /// shard's room is never another's); `None` when no shard has a stock.
    fn left_on_shards(
        redis: &mut dyn redis::ConnectionLike,
        coupon_id: u64,
    ) -> anyhow::Result<Option<u64>> {
        let mut left = None;
        for shard in 0..shards::COUNT {
            let stock: Option<u64> = redis::cmd("GET")
                .arg(keys::shard_stock(coupon_id, shard))
                .query(redis)?;
            let reserved: u64 = redis::cmd("SCARD")
                .arg(keys::shard_issued(coupon_id, shard))
                .query(redis)?;
            if let Some(stock) = stock {
                *left.get_or_insert(0) += stock.saturating_sub(reserved);
            }
        }
        Ok(left)
    }

    /// The 202s of `coupon_id` the lab confirmed as issued: when each was
    /// accepted and when its issue was recorded, ms since the Unix epoch,
    /// as the host keeps them in Redis; in the order they were confirmed.
    pub fn confirmations(&self, coupon_id: u64) -> anyhow::Result<Vec<Confirmed>> {
        let mut redis = self.redis.connection()?;
        let accepted: BTreeMap<u64, i64> = redis::cmd("HGETALL")
            .arg(keys::accepted(coupon_id))
            .query(&mut *redis)?;
        let confirmed: BTreeMap<u64, String> = redis::cmd("HGETALL")
            .arg(keys::confirmed(coupon_id))
            .query(&mut *redis)?;
        let mut issued: Vec<Confirmed> = confirmed
            .iter()
            .filter_map(|(member, value)| {
                let at = value.strip_prefix("ISSUED ")?.parse().ok()?;
                Some(Confirmed {
                    accepted_at_ms: *accepted.get(member)?,
                    confirmed_at_ms: at,
                })
            })
            .collect();
        issued.sort_by_key(|c| c.confirmed_at_ms);
        Ok(issued)
    }

    /// The database server's version and Redis's `redis_version`.
    pub fn versions(&self) -> anyhow::Result<(String, String)> {
        let database: String = self.runtime.block_on(async {
            match &self.db {
                Database::MySql(db) => sqlx::query_scalar("SELECT VERSION()").fetch_one(db).await,
                Database::Postgres(db) => {
                    let version = "SELECT 'PostgreSQL ' || current_setting('server_version')";
                    sqlx::query_scalar(version).fetch_one(db).await
                }
            }
        })?;
        let (RedisSource::Server(first) | RedisSource::Cluster(_, first)) = &self.redis;
        let mut redis = first.get_connection()?;
        let info: String = redis::cmd("INFO").arg("server").query(&mut redis)?;
        let redis_version = info
            .lines()
            .find_map(|line| line.strip_prefix("redis_version:"))
            .unwrap_or("unknown")
            .trim()
            .to_string();
        Ok((database, redis_version))
    }
}
