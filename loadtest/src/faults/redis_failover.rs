//! The faults of a Redis with replicas (`cargo xtask sentinel up`, or
//! `cargo xtask cluster up --replicas 1` for a lab on the cluster):
//! `redis-failover@START`, SIGKILL of the primary (the cluster's master of
//! slot 0), a replica promoted, the old node started again to rejoin as its
//! replica; `redis-pause@START+DURATION`, SIGSTOP of the primary and SIGCONT
//! after DURATION — longer than a failover (about 2 s behind the
//! Sentinels, 6 s on the cluster), for two primaries for a moment, as in
//! Jepsen's partitions. Redis replicates asynchronously: what the primary
//! had not sent its replicas when it stopped is gone from the new one.

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::cancel::{Cancel, ended_early};
use super::parts::{KillOrPause, Parts, seconds, spec};
use super::redis_topology;
use super::subjects::Subjects;

/// One failover of the lab's Redis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RedisFailoverFault {
    Failover { start: Duration },
    Pause { start: Duration, duration: Duration },
}

impl RedisFailoverFault {
    /// The fault `parts` names, `None` when its kind is neither.
    pub(super) fn parse(parts: &Parts<'_>) -> Option<anyhow::Result<RedisFailoverFault>> {
        let fault = parts.kill_or_pause("redis-failover", "redis-pause")?;
        Some(fault.map(|fault| match fault {
            KillOrPause::Kill { start } => RedisFailoverFault::Failover { start },
            KillOrPause::Pause { start, duration } => RedisFailoverFault::Pause { start, duration },
        }))
    }

    pub fn window(self) -> (Duration, Duration) {
        match self {
            RedisFailoverFault::Failover { start } => (start, start),
            RedisFailoverFault::Pause { start, duration } => (start, start + duration),
        }
    }

    pub fn describe(self) -> String {
        match self {
            RedisFailoverFault::Failover { start } => format!(
                "the Redis primary is killed (SIGKILL) at {}, a replica promoted, and the old primary started again as its replica",
                seconds(start)
            ),
            RedisFailoverFault::Pause { start, duration } => format!(
                "the Redis primary is paused (SIGSTOP) at {} for {}, then continued (SIGCONT): a replica is promoted meanwhile, and the old primary rejoins as its replica",
                seconds(start),
                seconds(duration)
            ),
        }
    }

    /// Fires the fault on the lab's topology and waits until the old
    /// primary replicates from the new one; what happened, with the times
    /// from the fault to the promotion.
    pub(super) fn fire(
        self,
        subjects: &Subjects,
        cancel: &Cancel,
        end: Instant,
    ) -> anyhow::Result<String> {
        let topology = subjects
            .redis_topology
            .context("the lab runs on no Redis with replicas")?;
        let old = topology.primary()?;
        let pid = redis_topology::pid(old)?;
        match self {
            RedisFailoverFault::Failover { .. } => {
                redis_topology::signal(pid, "KILL")?;
                let killed = Instant::now();
                // Gone, or a zombie (whose command line is empty), before
                // its port is taken again.
                while std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|line| !line.is_empty())
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let (new, promoted) = topology.until_promoted(old)?;
                topology.rejoin(old, new)?;
                Ok(format!(
                    "SIGKILL of 127.0.0.1:{old}; 127.0.0.1:{new} promoted after {:.2} s; \
                     127.0.0.1:{old} started again, a replica in sync after {:.2} s",
                    (promoted - killed).as_secs_f64(),
                    killed.elapsed().as_secs_f64()
                ))
            }
            RedisFailoverFault::Pause { .. } => {
                redis_topology::signal(pid, "STOP")?;
                let early = cancel.sleep_until(end);
                let during = topology.primary();
                redis_topology::signal(pid, "CONT")?;
                match during {
                    Ok(new) if new != old => {
                        redis_topology::until_replicating(old)?;
                        Ok(format!(
                            "SIGSTOP of 127.0.0.1:{old}; 127.0.0.1:{new} promoted meanwhile; SIGCONT, \
                             127.0.0.1:{old} a replica in sync again{}",
                            ended_early(early)
                        ))
                    }
                    _ => Ok(format!(
                        "SIGSTOP of 127.0.0.1:{old}, then SIGCONT: no replica was promoted meanwhile{}",
                        ended_early(early)
                    )),
                }
            }
        }
    }
}

/// The spec it parses from, in the canonical form.
impl fmt::Display for RedisFailoverFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RedisFailoverFault::Failover { start } => write!(f, "redis-failover@{}", spec(start)),
            RedisFailoverFault::Pause { start, duration } => {
                write!(f, "redis-pause@{}+{}", spec(start), spec(duration))
            }
        }
    }
}
