//! One lab per Redis database. Two labs whose MySQL databases differ but
//! whose Redis database is the same read each other's streams, reservations
//! and announcements, and their canaries refuse good components for what
//! the other lab did. So every host claims its Redis database for its lab
//! — `couponlab:lab`, set to the lab's identity for [`HELD_FOR`], renewed
//! every [`RENEW_EVERY`] — and a server whose Redis database another lab
//! holds refuses to start, saying which. Hosts of one lab share the claim.
//!
//! The lab's identity is the id kept in its database (`lab_identity`,
//! [`crate::db::Server::lab_id`]): the same for every host of the lab,
//! whichever address or node of the database each one reaches, and another
//! for every other lab. The claim names the database too, as its server
//! reports itself, for the message of a lab refused. A lab that stops lets
//! its claim lapse; a lab started while Redis is down claims it once Redis
//! answers.

use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::{CancellationToken, DropGuard};

use crate::db_target::{Pool, redacted};
use crate::redis_target::RedisConn;
use crate::redis_target::errors::is_connection_error;

/// The claim's key: the host's, outside `coupon:*`, so `DELETE /lab/data`
/// leaves it and no component can forge it.
pub const CLAIM_KEY: &str = "couponlab:lab";
/// How long a claim lasts without its lab renewing it.
const HELD_FOR: Duration = Duration::from_secs(15);
/// How often a host renews its lab's claim.
const RENEW_EVERY: Duration = Duration::from_secs(5);

/// Sets the claim unless another lab holds it; answers that lab. A claim is
/// the lab's id, a space, and where its database is: hosts of one lab on
/// several nodes of a cluster name other places, and share the claim.
const CLAIM: &str = r"
local holder = redis.call('GET', KEYS[1])
if holder and holder:match('^%S+') ~= ARGV[1]:match('^%S+') then return holder end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
";

/// The lab's claim: its id, and `host:port/database` as the database
/// server names itself.
pub async fn identity(db: &Pool, lab_id: &str) -> anyhow::Result<String> {
    let place: String = match db {
        Pool::MySql(db) => {
            sqlx::query_scalar("SELECT CONCAT(@@hostname, ':', @@port, '/', DATABASE())")
                .fetch_one(db)
                .await
        }
        // PostgreSQL does not tell its host name: the address it answered on.
        Pool::Postgres(db) => {
            sqlx::query_scalar(
                "SELECT coalesce(host(inet_server_addr()), 'local') || ':' || \
                 current_setting('port') || '/' || current_database()",
            )
            .fetch_one(db)
            .await
        }
    }
    .context("cannot read the database's own name for the lab's claim")?;
    Ok(format!("{lab_id} {place}"))
}

/// Claims the Redis database for the lab `identity`; answers the other lab
/// that holds it, if one does.
async fn claim(redis: &RedisConn, identity: &str) -> redis::RedisResult<Option<String>> {
    redis::cmd("EVAL")
        .arg(CLAIM)
        .arg(1)
        .arg(CLAIM_KEY)
        .arg(identity)
        .arg(HELD_FOR.as_millis() as u64)
        .query_async(&mut redis.clone())
        .await
}

/// Claims the Redis database at start: an error when another lab holds it.
/// A Redis that does not answer is claimed later, by [`keep`].
pub async fn claim_at_start(
    redis: &RedisConn,
    identity: &str,
    redis_url: &str,
) -> anyhow::Result<()> {
    match claim(redis, identity).await {
        Ok(None) => Ok(()),
        Ok(Some(other)) => anyhow::bail!(
            "the Redis database of {} is in use by another lab ({}), \
             and two labs on one Redis database read each other's streams and reservations: give \
             this lab a Redis database of its own (the number at the end of REDIS_URL), or stop \
             the other lab ({CLAIM_KEY} lapses {} s after its last host stops)",
            redacted(redis_url),
            described(&other),
            HELD_FOR.as_secs()
        ),
        Err(err) if is_connection_error(&err) => {
            tracing::warn!(error = %err, "Redis is unreachable; this lab claims its Redis database once it answers");
            Ok(())
        }
        Err(err) => Err(err).context("cannot claim the Redis database for this lab"),
    }
}

/// A claim in words: `lab 1f2e… on the database host:3306/couponlab`.
fn described(claim: &str) -> String {
    match claim.split_once(' ') {
        Some((id, place)) => format!("lab {id}, on the database {place}"),
        None => format!("lab {claim}"),
    }
}

/// Renews the claim until the guard it answers is dropped, with the lab
/// that holds it.
#[must_use = "the claim lapses when the guard is dropped"]
pub fn keep(redis: RedisConn, identity: String) -> DropGuard {
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(RENEW_EVERY);
        loop {
            tokio::select! {
                () = stopped.cancelled() => return,
                _ = every.tick() => {}
            }
            match claim(&redis, &identity).await {
                Ok(None) => {}
                Ok(Some(other)) => tracing::error!(
                    other_lab = %other,
                    "another lab holds this lab's Redis database: the two read each other's data; stop one"
                ),
                Err(err) => {
                    tracing::debug!(error = %err, "cannot renew the lab's claim of its Redis database")
                }
            }
        }
    });
    stop.drop_guard()
}
