//! How a host tells the stream roles which coupons' streams to read: a
//! request of a stream or write-behind method announces its coupon,
//! `ZADD couponlab:streams:{kind} <now ms> <coupon>`, before its call runs
//! (so the announcement precedes any entry the call adds), at most once
//! per [`ANNOUNCE_EVERY`] per coupon and process. When the call has ended
//! the host announces again, in the background, if a second has passed or
//! the first announcement failed (tried every second until Redis takes
//! it): an entry a slow call added late is read all the same. An
//! announcement keeps a stream read for the request timeout and
//! [`ANNOUNCED_MARGIN`], longer than a call runs before it adds its entry
//! (the stream roles among the consumers read them).
//!
//! The key is the host's, outside `coupon:*`: no component can forge it.
//! Hosts compare their clocks through the scores: clocks apart by more than
//! [`ANNOUNCED_MARGIN`] would make a slow call's late entry wait for the
//! announcement after the call.

use std::sync::Arc;
use std::time::{Duration, Instant};

use couponlab_contract::{ISSUE_STREAM, Stream, WRITE_BEHIND_STREAM};
use redis::{AsyncCommands, ErrorKind, RedisError, RedisResult};

use crate::lab::Lab;
use crate::redis_target::RedisConn;
use crate::runtime::{Strategy, World};

/// The pattern of every announcement key, for DELETE /lab/data.
pub const ANNOUNCEMENTS: &str = "couponlab:streams:*";
/// How often a host announces a coupon it keeps serving.
const ANNOUNCE_EVERY: Duration = Duration::from_secs(1);
/// How long a request waits for its announcement: a Redis that does not
/// answer fails the call itself, not a wait before it.
const ANNOUNCE_TIMEOUT: Duration = Duration::from_millis(250);
/// How much longer than the request timeout an announcement keeps a stream
/// read: the grace a call is given past its deadline, and clocks of hosts
/// a little apart.
const ANNOUNCED_MARGIN: Duration = Duration::from_secs(2);

pub fn announcements_key(kind: Stream) -> String {
    format!("couponlab:streams:{}", kind.prefix.trim_end_matches(':'))
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// How long an announcement keeps a stream read: longer than a call runs.
pub fn announced_for(lab: &Lab) -> Duration {
    lab.config.request_timeout() + ANNOUNCED_MARGIN
}

/// The stream a method's accepted requests add to, if any.
pub fn stream_of(world: &World) -> Option<Stream> {
    match world {
        World::StreamIssuer(_) => Some(ISSUE_STREAM),
        World::WriteBehindIssuer(_) => Some(WRITE_BEHIND_STREAM),
        _ => None,
    }
}

/// `ZADD`s `coupon` to the announcements of `kind`, waiting
/// [`ANNOUNCE_TIMEOUT`] at most.
async fn add(lab: &Lab, kind: Stream, coupon: u64) -> RedisResult<()> {
    let mut redis = lab.redis().clone();
    let adding = redis.zadd::<_, _, _, ()>(announcements_key(kind), coupon, now_ms());
    match tokio::time::timeout(ANNOUNCE_TIMEOUT, adding).await {
        Ok(added) => added,
        Err(_) => Err(RedisError::from((ErrorKind::Io, "no answer in time"))),
    }
}

/// Announces `coupon`'s stream before a request of `strategy` runs, when
/// the method has one and this process did not announce it lately. A
/// failure is logged, and [`announce_after`] tries again.
pub async fn announce(lab: &Lab, strategy: &Arc<Strategy>, coupon: u64) {
    let Some(kind) = stream_of(&strategy.world) else {
        return;
    };
    if !lab.announced.due((kind.prefix, coupon), ANNOUNCE_EVERY) {
        return;
    }
    if let Err(err) = add(lab, kind, coupon).await {
        lab.announced.forget(&(kind.prefix, coupon));
        tracing::warn!(coupon, streams = kind.prefix, error = %err, "could not announce a coupon's stream; trying again after the call");
    }
}

/// Announces `coupon`'s stream again once a request of `strategy` has
/// ended, when a second has passed since the last announcement or it
/// failed: in the background, every second until Redis takes it, for as
/// long as an announcement lasts. So an entry a slow call added late, or
/// one added after a failed announcement, is read all the same.
pub fn announce_after(lab: &Lab, strategy: &Arc<Strategy>, coupon: u64) {
    let Some(kind) = stream_of(&strategy.world) else {
        return;
    };
    if !lab.announced.due((kind.prefix, coupon), ANNOUNCE_EVERY) {
        return;
    }
    let lab = lab.clone();
    tokio::spawn(async move {
        let give_up = Instant::now() + announced_for(&lab);
        loop {
            match add(&lab, kind, coupon).await {
                Ok(()) => return,
                Err(err) if Instant::now() >= give_up => {
                    lab.announced.forget(&(kind.prefix, coupon));
                    tracing::error!(coupon, streams = kind.prefix, error = %err, "could not announce a coupon's stream; its entries are read once a role reconnects");
                    return;
                }
                Err(_) => tokio::time::sleep(ANNOUNCE_EVERY).await,
            }
        }
    });
}

/// The coupons announced for `kind` in the last `within`: those whose
/// streams took entries lately.
pub async fn announced_within(
    redis: &mut RedisConn,
    kind: Stream,
    within: Duration,
) -> RedisResult<Vec<u64>> {
    let since = now_ms() - within.as_millis() as i64;
    redis
        .zrangebyscore(announcements_key(kind), since, "+inf")
        .await
}

/// Removes `coupon` from the announcements of every kind: a canary's
/// scratch coupon, gone.
pub async fn forget(redis: &mut RedisConn, coupon: u64) -> RedisResult<()> {
    for kind in [ISSUE_STREAM, WRITE_BEHIND_STREAM] {
        redis
            .zrem::<_, _, ()>(announcements_key(kind), coupon)
            .await?;
    }
    Ok(())
}
