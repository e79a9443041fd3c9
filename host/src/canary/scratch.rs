//! The scratch coupon a canary runs on: a coupon row marked `scratch` (no
//! listing, result or figure shows it), its members, an id no coupon has
//! and one no member has; and their removal, by this canary at its end or,
//! after a crash mid-canary, by the next canary of any host.

use std::time::Duration;

use crate::announcements;
use crate::db::{execute_for, on_engine, signed};
use crate::db_target::Pool;
use crate::lab::Lab;
use anyhow::Context;
use redis::AsyncCommands;

/// The names of a canary's members start with this, then its coupon's id.
const MEMBER_NAME: &str = "couponlab canary of coupon";

/// A scratch coupon older than this belongs to a canary that died: no
/// canary runs this long.
const ABANDONED_AFTER: Duration = Duration::from_secs(600);

pub struct Scratch {
    pub coupon: u64,
    pub total: u64,
    pub members: Vec<u64>,
    /// An id no coupon has: one made and deleted (ids are not reused).
    pub unknown_coupon: u64,
    /// An id no member has, made the same way.
    pub unknown_member: u64,
}

impl Scratch {
    /// Makes a scratch coupon of `total` and `members` members.
    pub async fn create(db: &Pool, total: u64, members: usize) -> anyhow::Result<Scratch> {
        let coupon = insert_coupon(db, total).await?;
        let unknown_coupon = insert_coupon(db, total).await?;
        execute_for(db, "DELETE FROM coupons WHERE id = ?", unknown_coupon).await?;

        let name = format!("{MEMBER_NAME} {coupon}");
        let rows = vec!["(?)"; members + 1].join(", ");
        let statement = format!("INSERT INTO members (name) VALUES {rows}");
        on_engine!(db, &statement, |db, sql| {
            let mut insert_members = sqlx::query(sql);
            for _ in 0..=members {
                insert_members = insert_members.bind(&name);
            }
            insert_members.execute(db).await.map(drop)
        })?;
        let statement = "SELECT id FROM members WHERE name = ? ORDER BY id";
        let ids: Vec<i64> = on_engine!(db, statement, |db, sql| {
            sqlx::query_scalar(sql).bind(&name).fetch_all(db).await
        })?;
        let mut ids: Vec<u64> = ids.into_iter().map(|id| id as u64).collect();
        let unknown_member = ids.pop().context("the canary's members were not written")?;
        execute_for(db, "DELETE FROM members WHERE id = ?", unknown_member).await?;
        Ok(Scratch {
            coupon,
            total,
            members: ids,
            unknown_coupon,
            unknown_member,
        })
    }

    /// The coupons this canary's requests name.
    pub fn coupons(&self) -> [u64; 2] {
        [self.coupon, self.unknown_coupon]
    }

    /// Whether the scratch coupon is still there (`DELETE /lab/data` may
    /// have deleted it mid-canary).
    pub async fn intact(&self, db: &Pool) -> sqlx::Result<bool> {
        let statement = "SELECT id FROM coupons WHERE id = ? AND scratch";
        let found: Option<i64> = on_engine!(db, statement, |db, sql| {
            sqlx::query_scalar(sql)
                .bind(signed(self.coupon))
                .fetch_optional(db)
                .await
        })?;
        Ok(found.is_some())
    }

    /// Removes every trace of this canary: its rows, its members, its Redis
    /// keys and announcements.
    pub async fn remove(&self, lab: &Lab) -> anyhow::Result<()> {
        remove(lab, &self.coupons()).await
    }
}

/// Removes the scratch coupons that canaries which died left behind.
pub async fn sweep_abandoned(lab: &Lab) -> anyhow::Result<()> {
    let seconds = ABANDONED_AFTER.as_secs();
    let abandoned: Vec<i64> = on_engine!(
        lab.db(),
        mysql: &format!("SELECT id FROM coupons WHERE scratch AND created_at < NOW(3) - INTERVAL {seconds} SECOND"),
        postgres: &format!("SELECT id FROM coupons WHERE scratch AND created_at < LOCALTIMESTAMP - INTERVAL '{seconds} seconds'"),
        |db, sql| sqlx::query_scalar(sql).fetch_all(db).await
    )?;
    for coupon in abandoned {
        tracing::info!(
            coupon,
            "removing the scratch coupon of a canary that did not finish"
        );
        remove(lab, &[coupon as u64]).await?;
    }
    Ok(())
}

/// Removes the rows, members and Redis keys of the scratch `coupons`. Coupon
/// ids are never reused (`DELETE /lab/data` deletes coupons, it does not
/// truncate them), so nothing removed here can be a user's. The rows go
/// even when Redis does not answer: a component that never touches Redis
/// is proved without it, and what a Redis one left under a scratch id is
/// never read again (`DELETE /lab/data` takes it).
async fn remove(lab: &Lab, coupons: &[u64]) -> anyhow::Result<()> {
    for &coupon in coupons {
        if let Err(err) = remove_keys(lab, coupon).await {
            tracing::warn!(coupon, error = %err, "could not remove a scratch coupon's Redis keys");
        }
        let db = lab.db();
        execute_for(db, "DELETE FROM coupon_issues WHERE coupon_id = ?", coupon).await?;
        let statement = "DELETE FROM members WHERE name = ?";
        on_engine!(db, statement, |db, sql| {
            sqlx::query(sql)
                .bind(format!("{MEMBER_NAME} {coupon}"))
                .execute(db)
                .await
                .map(drop)
        })?;
        execute_for(db, "DELETE FROM coupons WHERE id = ? AND scratch", coupon).await?;
    }
    Ok(())
}

/// Inserts a scratch coupon of `total`: its id.
async fn insert_coupon(db: &Pool, total: u64) -> sqlx::Result<u64> {
    let insert =
        "INSERT INTO coupons (name, total_count, scratch) VALUES ('couponlab canary', ?, TRUE)";
    Ok(match db {
        Pool::MySql(db) => sqlx::query(insert)
            .bind(total)
            .execute(db)
            .await?
            .last_insert_id(),
        Pool::Postgres(db) => {
            let id: i64 =
                sqlx::query_scalar(&format!("{} RETURNING id", insert.replace('?', "$1")))
                    .bind(signed(total))
                    .fetch_one(db)
                    .await?;
            id as u64
        }
    })
}

/// Removes a scratch coupon's Redis keys and announcements.
async fn remove_keys(lab: &Lab, coupon: u64) -> redis::RedisResult<()> {
    let mut redis = lab.redis().clone();
    announcements::forget(&mut redis, coupon).await?;
    for pattern in [
        format!("coupon:*{{{coupon}}}*"),
        format!("coupon:*{{{coupon}-*"),
    ] {
        let keys = redis.keys_matching(&pattern).await?;
        for key in keys {
            // One by one: on a cluster a scratch coupon's shards lie apart.
            redis.unlink::<_, ()>(key).await?;
        }
    }
    Ok(())
}
