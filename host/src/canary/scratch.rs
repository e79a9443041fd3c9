//! The scratch coupon a canary runs on: a coupon row marked `scratch` (no
//! listing, result or figure shows it), its members, an id no coupon has
//! and one no member has; and their removal, by this canary at its end or,
//! after a crash mid-canary, by the next canary of any host.

use std::time::Duration;

use anyhow::Context;
use redis::AsyncCommands;
use sqlx::{MySqlPool, Row};

use crate::announcements;
use crate::lab::Lab;

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
    pub async fn create(db: &MySqlPool, total: u64, members: usize) -> anyhow::Result<Scratch> {
        let insert_coupon =
            "INSERT INTO coupons (name, total_count, scratch) VALUES ('couponlab canary', ?, TRUE)";
        let coupon = sqlx::query(insert_coupon)
            .bind(total)
            .execute(db)
            .await?
            .last_insert_id();
        let unknown_coupon = sqlx::query(insert_coupon)
            .bind(total)
            .execute(db)
            .await?
            .last_insert_id();
        sqlx::query("DELETE FROM coupons WHERE id = ?")
            .bind(unknown_coupon)
            .execute(db)
            .await?;

        let name = format!("{MEMBER_NAME} {coupon}");
        let rows = vec!["(?)"; members + 1].join(", ");
        let statement = format!("INSERT INTO members (name) VALUES {rows}");
        let mut insert_members = sqlx::query(&statement);
        for _ in 0..=members {
            insert_members = insert_members.bind(&name);
        }
        insert_members.execute(db).await?;
        let mut ids: Vec<u64> =
            sqlx::query_scalar::<_, i64>("SELECT id FROM members WHERE name = ? ORDER BY id")
                .bind(&name)
                .fetch_all(db)
                .await?
                .into_iter()
                .map(|id| id as u64)
                .collect();
        let unknown_member = ids.pop().context("the canary's members were not written")?;
        sqlx::query("DELETE FROM members WHERE id = ?")
            .bind(unknown_member)
            .execute(db)
            .await?;
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
    pub async fn intact(&self, db: &MySqlPool) -> sqlx::Result<bool> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT id FROM coupons WHERE id = ? AND scratch")
                .bind(self.coupon)
                .fetch_optional(db)
                .await?;
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
    let rows = sqlx::query(
        "SELECT id FROM coupons WHERE scratch AND created_at < NOW(3) - INTERVAL ? SECOND",
    )
    .bind(ABANDONED_AFTER.as_secs())
    .fetch_all(lab.db())
    .await?;
    for row in rows {
        let coupon: i64 = row.try_get("id")?;
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
        sqlx::query("DELETE FROM coupon_issues WHERE coupon_id = ?")
            .bind(coupon)
            .execute(db)
            .await?;
        sqlx::query("DELETE FROM members WHERE name = ?")
            .bind(format!("{MEMBER_NAME} {coupon}"))
            .execute(db)
            .await?;
        sqlx::query("DELETE FROM coupons WHERE id = ? AND scratch")
            .bind(coupon)
            .execute(db)
            .await?;
    }
    Ok(())
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
