//! `DELETE /lab/data`: empty the lab tables, delete Redis `coupon:*` keys,
//! and make every host forget its record of requests.
//!
//! Coupons are deleted, not truncated: their ids keep growing, so no new
//! coupon takes the id of an old one whose Redis state a host may still
//! hold, or of a canary's scratch coupon on another host mid-canary.

use axum::Router;
use axum::extract::State;
use axum::routing::delete;
use redis::AsyncCommands;
use serde::Serialize;
use sqlx::Executor;
use utoipa::ToSchema;

use super::envelope::{Answer, ApiError};
use super::schema::{ServerFailed, Success};
use crate::announcements;
use crate::db_target::Pool;
use crate::lab::Lab;
use crate::recorder::shared;
use crate::redis_target::RedisConn;

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/data", delete(reset))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Reset {
    emptied_tables: Vec<&'static str>,
    /// `coupon:*` keys deleted.
    deleted_redis_keys: u64,
}

const TABLES: [&str; 3] = ["coupon_issues", "coupons", "members"];

/// How long the reset waits for the tables' locks on PostgreSQL: longer
/// than the bulk insert of the most members `POST /lab/members` takes.
const RESET_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

/// How each table is emptied.
fn emptying(table: &str) -> String {
    match table {
        "coupons" => format!("DELETE FROM {table}"),
        _ => format!("TRUNCATE TABLE {table}"),
    }
}

/// Truncate members, coupons and issues; delete Redis `coupon:*` keys.
#[utoipa::path(
    delete,
    path = "/lab/data",
    operation_id = "deleteData",
    tag = "data",
    responses(
        (status = 200, description = "Everything was deleted", body = Success<Reset>),
        (status = 503, description = "The database or Redis is unavailable", body = ApiError),
        ServerFailed,
    )
)]
async fn reset(State(lab): State<Lab>) -> Result<Answer<Reset>, ApiError> {
    match lab.db() {
        Pool::MySql(db) => {
            // TRUNCATE refuses a table a foreign key points at unless the
            // check is off, and the setting is per session: one connection
            // does all of it.
            let mut conn = db.acquire().await?;
            conn.execute("SET FOREIGN_KEY_CHECKS = 0").await?;
            let mut truncated = Ok(());
            for table in TABLES {
                if let Err(err) = conn.execute(emptying(table).as_str()).await {
                    truncated = Err(err);
                    break;
                }
            }
            let restored = conn.execute("SET FOREIGN_KEY_CHECKS = 1").await;
            truncated?;
            restored?;
        }
        // PostgreSQL truncates the tables a foreign key joins together.
        // TRUNCATE waits for every lock on them, and a bulk insert of
        // members holds one for seconds: this reset waits for it, not for
        // the pool's lock timeout, which bounds a call's wait for a row.
        Pool::Postgres(db) => {
            let empty = format!(
                "SET LOCAL lock_timeout = '{}s'; \
                 TRUNCATE TABLE coupon_issues, members RESTART IDENTITY; DELETE FROM coupons",
                RESET_LOCK_WAIT.as_secs()
            );
            // One simple query: its statements are one transaction, the
            // setting's.
            let mut conn = db.acquire().await?;
            conn.execute(empty.as_str()).await?;
        }
    }

    let mut redis = lab.redis().clone();
    let deleted = unlink_matching(&mut redis, "coupon:*").await?;
    // Every host's record of requests: this one's now, the others' at their
    // next look at the generation; then their snapshots.
    shared::start_new_generation(&lab.recorder, lab.redis()).await?;
    unlink_matching(&mut redis, shared::SNAPSHOTS).await?;
    unlink_matching(&mut redis, announcements::ANNOUNCEMENTS).await?;
    // The announcements were deleted: the next request of a coupon
    // announces it afresh.
    lab.announced.clear();
    lab.traces.clear();
    Ok(Answer::ok(Reset {
        emptied_tables: TABLES.to_vec(),
        deleted_redis_keys: deleted,
    }))
}

/// Deletes the keys matching `pattern`; returns how many.
/// On a cluster, on every node; redis-rs splits each UNLINK by slot.
async fn unlink_matching(redis: &mut RedisConn, pattern: &str) -> redis::RedisResult<u64> {
    let keys = redis.keys_matching(pattern).await?;
    let mut deleted = 0;
    for chunk in keys.chunks(500) {
        deleted += redis.unlink::<_, u64>(chunk).await?;
    }
    Ok(deleted)
}
