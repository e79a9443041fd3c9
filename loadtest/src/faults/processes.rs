//! The faults that kill a process the runner started and start it again at
//! once: `kill-server`, `kill-consumers` (SIGKILL), `redis-restart`
//! (SHUTDOWN NOSAVE of the run's own Redis, started again empty),
//! `nats-restart` (SIGKILL of the run's own NATS, started again on its
//! store); each `@START`.

use std::fmt;
use std::time::Duration;

use anyhow::Context;
use couponlab_links::Link;

use super::parts::{Parts, seconds, spec};
use super::subjects::Subjects;

/// One process killed and started again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ProcessFault {
    /// SIGKILL of the server at `start`, restarted at once.
    KillServer { start: Duration },
    /// SIGKILL of every consumer process at `start`, restarted at once.
    KillConsumers { start: Duration },
    /// The run's own Redis shut down without saving at `start` and started
    /// again at once, empty.
    RedisRestart { start: Duration },
    /// The run's own NATS server killed (SIGKILL) at `start` and started
    /// again at once on the same JetStream store.
    NatsRestart { start: Duration },
}

impl ProcessFault {
    /// The fault `parts` names, `None` when its kind is none of these.
    pub(super) fn parse(parts: &Parts<'_>) -> Option<anyhow::Result<ProcessFault>> {
        let fault: fn(Duration) -> ProcessFault = match parts.kind {
            "kill-server" => |start| ProcessFault::KillServer { start },
            "kill-consumers" => |start| ProcessFault::KillConsumers { start },
            "redis-restart" => |start| ProcessFault::RedisRestart { start },
            "nats-restart" => |start| ProcessFault::NatsRestart { start },
            _ => return None,
        };
        Some(parts.no_value().and_then(|()| Ok(fault(parts.instant()?))))
    }

    pub fn start(self) -> Duration {
        match self {
            ProcessFault::KillServer { start }
            | ProcessFault::KillConsumers { start }
            | ProcessFault::RedisRestart { start }
            | ProcessFault::NatsRestart { start } => start,
        }
    }

    pub fn describe(self) -> String {
        let at = seconds(self.start());
        match self {
            ProcessFault::KillServer { .. } => {
                format!("the server is killed (SIGKILL) at {at} and restarted at once")
            }
            ProcessFault::KillConsumers { .. } => {
                format!("the consumer processes are killed (SIGKILL) at {at} and restarted at once")
            }
            ProcessFault::RedisRestart { .. } => format!(
                "Redis (the run's own) is shut down without saving at {at} and started again at once, empty"
            ),
            ProcessFault::NatsRestart { .. } => format!(
                "NATS (the run's own) is killed (SIGKILL) at {at} and started again at once on the same JetStream store"
            ),
        }
    }

    /// Kills the process and starts it again; what happened.
    pub(super) fn fire(self, subjects: &Subjects) -> anyhow::Result<String> {
        match self {
            ProcessFault::KillServer { .. } | ProcessFault::KillConsumers { .. } => {
                let server = subjects.server.as_deref().context("no server")?;
                let mut server = server
                    .lock()
                    .map_err(|_| anyhow::anyhow!("server poisoned"))?;
                if matches!(self, ProcessFault::KillConsumers { .. }) {
                    return Ok(server.kill_consumers_and_restart()?.to_string());
                }
                // A killed process's connections die with it, and Redis and
                // MySQL see them end (MySQL rolls back what they held); a
                // proxy in between keeps the far side open, locks and all,
                // so the links drop every connection.
                let links = subjects.links.as_deref();
                let restarted = server.kill_and_restart(|| match links {
                    Some(links) => Link::ALL.into_iter().try_for_each(|link| {
                        links.cut(link)?;
                        links.restore(link)
                    }),
                    None => Ok(()),
                })?;
                Ok(match links {
                    Some(_) => format!(
                        "{restarted}; the links dropped the dead process's connections before the restart"
                    ),
                    None => restarted.to_string(),
                })
            }
            ProcessFault::RedisRestart { .. } => {
                let redis = subjects.redis.as_deref();
                let redis = redis.context("no Redis of the run's own")?;
                let mut redis = redis
                    .lock()
                    .map_err(|_| anyhow::anyhow!("redis poisoned"))?;
                let down = redis.restart()?;
                Ok(format!(
                    "SHUTDOWN NOSAVE, started again empty on {}; answering after {:.0} ms",
                    redis.address(),
                    down.as_secs_f64() * 1000.0
                ))
            }
            ProcessFault::NatsRestart { .. } => {
                let nats = subjects.nats.as_deref();
                let nats = nats.context("no NATS server of the run's own")?;
                let mut nats = nats.lock().map_err(|_| anyhow::anyhow!("nats poisoned"))?;
                let down = nats.restart()?;
                Ok(format!(
                    "SIGKILL, started again on {} with the same JetStream store; healthy after {:.0} ms",
                    nats.address(),
                    down.as_secs_f64() * 1000.0
                ))
            }
        }
    }
}

/// The spec it parses from, in the canonical form.
impl fmt::Display for ProcessFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            ProcessFault::KillServer { .. } => "kill-server",
            ProcessFault::KillConsumers { .. } => "kill-consumers",
            ProcessFault::RedisRestart { .. } => "redis-restart",
            ProcessFault::NatsRestart { .. } => "nats-restart",
        };
        write!(f, "{kind}@{}", spec(self.start()))
    }
}
