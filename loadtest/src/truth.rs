//! What the database and Redis hold, read directly (not through the lab's
//! API, whose figures are what is being checked), and the versions of both
//! for the report.

use std::collections::BTreeMap;

use anyhow::Context;
use couponlab_contract::{keys, shards};
use sqlx::Row as _;
use sqlx::mysql::MySqlPool;

use crate::verification::Truth;

/// Connections to the server's database and Redis.
pub struct Sources {
    runtime: tokio::runtime::Runtime,
    db: MySqlPool,
    redis: RedisSource,
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
        let db = runtime
            .block_on(
                sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(1)
                    .connect(database_url),
            )
            .with_context(|| format!("cannot reach the database at {database_url}"))?;
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
        let (total, rows) = self.runtime.block_on(async {
            let total: i32 = sqlx::query_scalar("SELECT total_count FROM coupons WHERE id = ?")
                .bind(coupon_id)
                .fetch_one(&self.db)
                .await?;
            let rows = sqlx::query(
                "SELECT member_id, COUNT(*) AS n FROM coupon_issues \
                 WHERE coupon_id = ? GROUP BY member_id",
            )
            .bind(coupon_id)
            .fetch_all(&self.db)
            .await?;
            let rows = rows
                .iter()
                .map(|row| -> Result<(u64, u64), sqlx::Error> {
                    let member: i64 = row.try_get("member_id")?;
                    let n: i64 = row.try_get("n")?;
                    Ok((member as u64, n as u64))
                })
                .collect::<Result<BTreeMap<u64, u64>, _>>()?;
            Ok::<_, sqlx::Error>((total, rows))
        })?;
        let total = total.max(0) as u64;
        Ok(Truth {
            total,
            rows,
            sellable_in_redis: self.sellable_in_redis(coupon_id, total)?,
        })
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

    /// `SELECT VERSION()` and Redis's `redis_version`.
    pub fn versions(&self) -> anyhow::Result<(String, String)> {
        let database: String = self
            .runtime
            .block_on(sqlx::query_scalar("SELECT VERSION()").fetch_one(&self.db))?;
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
