//! Which coupons' streams the stream roles read: the active ones, not every
//! coupon's. A lab that has run a thousand experiments holds thousands of
//! coupons; reading, claiming and looking for each of their streams every
//! round kept Redis busy at rest in proportion to them.
//!
//! - Every [`LOOK_EVERY`] a role reads the coupons announced lately
//!   ([`super::announce`], one ZRANGEBYSCORE). It creates the group of a
//!   new coupon's stream once the stream exists, starting at its first
//!   entry.
//! - A stream stays read while it is announced and, after that, until it is
//!   settled: its group holds no pending entry and has been delivered the
//!   stream's last entry. Then it is left alone until announced again.
//! - When a role (re)connects, or a read found a stream without its group
//!   (`DELETE /lab/data` deleted it, and a new entry made it again), it
//!   looks once at every coupon in the database (one EXISTS each): streams
//!   left by a process that died, or filled before any consumer ran, are
//!   read too. A database that does not answer then delays that look, not
//!   the reading of the announced streams.
//! - With `COUPONLAB_STREAM_TRIM`, the role that claims (the claimer, the
//!   loader) trims from each stream it reads, every [`SETTLED_CHECK_EVERY`],
//!   the entries its group has acknowledged: those before the oldest pending
//!   one, or up to the last delivered when none is pending.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use couponlab_contract::Stream;
use redis::streams::{StreamInfoGroupsReply, StreamPendingReply, StreamRangeReply};
use redis::{AsyncCommands, RedisResult, Value};

use crate::announcements::{announced_for, announcements_key, now_ms};
use crate::db;
use crate::lab::Lab;
use crate::redis_target::RedisConn;

/// How often a role looks for announcements: a new coupon's first entries
/// wait up to this long for their consumers.
pub(super) const LOOK_EVERY: Duration = Duration::from_millis(200);
/// How often a stream no longer announced is asked whether it is settled.
const SETTLED_CHECK_EVERY: Duration = Duration::from_secs(1);

/// One coupon's stream of one kind.
#[derive(Debug, Clone)]
pub(super) struct CouponStream {
    pub key: String,
    pub kind: Stream,
    pub coupon: u64,
}

impl CouponStream {
    pub fn of(kind: Stream, coupon: u64) -> Self {
        Self {
            key: kind.key(coupon),
            kind,
            coupon,
        }
    }

    pub fn group(&self) -> &'static str {
        self.kind.group
    }
}

/// The active coupons' streams of one kind a role reads.
pub(super) struct CouponStreams {
    pub(super) kind: Stream,
    /// Coupons whose stream has the group, with when each was last
    /// announced (or found unsettled).
    ready: BTreeMap<u64, Instant>,
    looked: Option<Instant>,
    /// Whether every coupon in the database was looked at since connecting
    /// (or since a stream was found without its group).
    looked_at_all: bool,
    /// How long an announcement keeps a stream read.
    announced_for: Duration,
    /// Whether this role trims acknowledged entries, and when it last did.
    trims: bool,
    trimmed: Option<Instant>,
}

impl CouponStreams {
    /// The streams of `kind` in `lab`; `trims` when this role trims them.
    pub fn new(lab: &Lab, kind: Stream, trims: bool) -> Self {
        Self {
            kind,
            ready: BTreeMap::new(),
            looked: None,
            looked_at_all: false,
            announced_for: announced_for(lab),
            trims,
            trimmed: None,
        }
    }

    /// The streams to read, after looking for announcements when it is
    /// time.
    pub async fn current(
        &mut self,
        lab: &Lab,
        conn: &mut RedisConn,
    ) -> RedisResult<Vec<CouponStream>> {
        if self.looked.is_none_or(|at| at.elapsed() >= LOOK_EVERY) {
            self.looked = Some(Instant::now());
            self.look(lab, conn).await?;
        }
        Ok(self
            .ready
            .keys()
            .map(|&coupon| CouponStream::of(self.kind, coupon))
            .collect())
    }

    async fn look(&mut self, lab: &Lab, conn: &mut RedisConn) -> RedisResult<()> {
        let now = Instant::now();
        if !self.looked_at_all {
            // A database that does not answer delays this look, not the
            // reading of the streams announced.
            match db::coupon_ids(lab.db()).await {
                Ok(coupons) => {
                    self.make_ready(conn, coupons, now).await?;
                    self.looked_at_all = true;
                }
                Err(err) => {
                    tracing::warn!(streams = self.kind.prefix, error = %err, "cannot list the coupons; looking again")
                }
            }
        }
        let since = now_ms() - self.announced_for.as_millis() as i64;
        let announced: BTreeSet<u64> = conn
            .zrangebyscore(announcements_key(self.kind), since, "+inf")
            .await?;
        for coupon in &announced {
            if let Some(seen) = self.ready.get_mut(coupon) {
                *seen = now;
            }
        }
        let unseen = announced
            .into_iter()
            .filter(|coupon| !self.ready.contains_key(coupon))
            .collect();
        self.make_ready(conn, unseen, now).await?;
        self.leave_settled(conn, now).await?;
        if self.trims
            && self
                .trimmed
                .is_none_or(|at| now.duration_since(at) >= SETTLED_CHECK_EVERY)
        {
            self.trimmed = Some(now);
            for &coupon in self.ready.keys() {
                trim_acknowledged(conn, &CouponStream::of(self.kind, coupon)).await?;
            }
        }
        Ok(())
    }

    /// Creates the group of each of `coupons`' streams that exists, and
    /// reads them from now on.
    async fn make_ready(
        &mut self,
        conn: &mut RedisConn,
        coupons: Vec<u64>,
        now: Instant,
    ) -> RedisResult<()> {
        let exists = coupons
            .iter()
            .map(|&coupon| {
                let mut cmd = redis::cmd("EXISTS");
                cmd.arg(self.kind.key(coupon));
                cmd
            })
            .collect();
        let exists = conn.each(exists).await?;
        for (coupon, exists) in coupons.into_iter().zip(exists) {
            if exists != Value::Int(1) {
                continue;
            }
            let created: RedisResult<()> = conn
                .xgroup_create(self.kind.key(coupon), self.kind.group, "0")
                .await;
            match created {
                Err(err) if err.code() != Some("BUSYGROUP") => return Err(err),
                _ => self.ready.insert(coupon, now),
            };
        }
        Ok(())
    }

    /// Stops reading the streams announced no more that are settled; asks
    /// each of the others again after [`SETTLED_CHECK_EVERY`].
    async fn leave_settled(&mut self, conn: &mut RedisConn, now: Instant) -> RedisResult<()> {
        let quiet: Vec<u64> = self
            .ready
            .iter()
            .filter(|(_, seen)| now.duration_since(**seen) >= self.announced_for)
            .map(|(&coupon, _)| coupon)
            .collect();
        // As if announced so long ago that it is quiet again in a moment.
        let ask_again = now
            .checked_sub(self.announced_for.saturating_sub(SETTLED_CHECK_EVERY))
            .unwrap_or(now);
        for coupon in quiet {
            if settled(conn, &CouponStream::of(self.kind, coupon)).await? {
                self.ready.remove(&coupon);
            } else {
                self.ready.insert(coupon, ask_again);
            }
        }
        Ok(())
    }

    /// A stream lost its group (`DELETE /lab/data` deleted it, and an entry
    /// made it again): every coupon is looked at again, and the groups of
    /// the streams that exist made again.
    pub(super) fn forget(&mut self) {
        self.ready.clear();
        self.looked = None;
        self.looked_at_all = false;
    }
}

/// Whether the group of `stream` holds no pending entry and was delivered
/// the stream's last entry (a stream deleted since is settled too). A
/// stream found without its group (deleted, and made again by a new entry)
/// gets it again, from its first entry, and is not settled.
async fn settled(conn: &mut RedisConn, stream: &CouponStream) -> RedisResult<bool> {
    let groups: RedisResult<StreamInfoGroupsReply> = conn.xinfo_groups(&stream.key).await;
    let groups = match groups {
        // ERR no such key: deleted since.
        Err(err) if err.code() == Some("ERR") => return Ok(true),
        other => other?,
    };
    let Some(group) = groups.groups.iter().find(|g| g.name == stream.group()) else {
        let created: RedisResult<()> = conn.xgroup_create(&stream.key, stream.group(), "0").await;
        return match created {
            Err(err) if err.code() != Some("BUSYGROUP") => Err(err),
            _ => Ok(false),
        };
    };
    if group.pending > 0 {
        return Ok(false);
    }
    let last: StreamRangeReply = conn.xrevrange_count(&stream.key, "+", "-", 1).await?;
    Ok(last
        .ids
        .first()
        .is_none_or(|entry| entry_id(&entry.id) <= entry_id(&group.last_delivered_id)))
}

/// Deletes the entries of `stream` its group has acknowledged: those before
/// its oldest pending entry, or when none is pending every entry up to the
/// last delivered one.
async fn trim_acknowledged(conn: &mut RedisConn, stream: &CouponStream) -> RedisResult<()> {
    let groups: StreamInfoGroupsReply = match conn.xinfo_groups(&stream.key).await {
        Err(err) if err.code() == Some("ERR") => return Ok(()),
        other => other?,
    };
    let Some(group) = groups.groups.iter().find(|g| g.name == stream.group()) else {
        return Ok(());
    };
    let below = if group.pending > 0 {
        match conn.xpending(&stream.key, stream.group()).await? {
            StreamPendingReply::Data(pending) => pending.start_id,
            _ => return Ok(()),
        }
    } else {
        let (ms, seq) = entry_id(&group.last_delivered_id);
        format!("{ms}-{}", seq + 1)
    };
    let _: u64 = redis::cmd("XTRIM")
        .arg(&stream.key)
        .arg("MINID")
        .arg(below)
        .query_async(conn)
        .await?;
    Ok(())
}

/// A stream entry id (`ms-seq`) as a pair that sorts as the ids do.
fn entry_id(id: &str) -> (u64, u64) {
    let (ms, seq) = id.split_once('-').unwrap_or((id, "0"));
    (ms.parse().unwrap_or(0), seq.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::entry_id;

    #[test]
    fn entry_ids_sort_by_time_then_sequence() {
        assert!(entry_id("1700000000000-9") < entry_id("1700000000001-0"));
        assert!(entry_id("5-2") < entry_id("5-10"));
        assert_eq!(entry_id("0-0"), (0, 0));
    }
}
