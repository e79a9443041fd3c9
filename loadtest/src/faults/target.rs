//! What a timed fault does when it fires, to the link, server, Redis or NATS it
//! acts on, and how it is undone when it ends (or at once, when the run
//! stops first).

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;
use couponlab_links::Link;

use super::injector::{Cancel, Fired, Subjects};
use super::spec::Fault;

/// One timed fault and what it acts on.
pub(super) struct Target {
    pub(super) fault: Fault,
    /// When the load started: what the times reported count from.
    pub(super) started: Instant,
    /// When the fault fires, and when it ends.
    pub(super) start: Instant,
    pub(super) end: Instant,
    pub(super) subjects: Subjects,
    pub(super) cancel: Arc<Cancel>,
}

impl Target {
    /// Waits for the fault's start, fires it and, at its end, undoes it;
    /// what it did (`None`: the run stopped before it fired).
    pub(super) fn run(self) -> anyhow::Result<Option<Fired>> {
        if self.cancel.sleep_until(self.start) {
            return Ok(None);
        }
        let fired_at = self.since_start();
        let note = match self.fault {
            Fault::Cut { link, .. } => {
                let links = self.subjects.links.as_deref().context("no links")?;
                let open = links.cut(link)?;
                let early = self.cancel.sleep_until(self.end);
                links.restore(link)?;
                format!(
                    "proxy stopped ({open} open connection(s) closed, new ones refused), then listening again on {}{}",
                    links.address(link),
                    if early {
                        "; ended early: the run stopped"
                    } else {
                        ""
                    }
                )
            }
            Fault::Latency { link, ms, .. } => {
                let links = self.subjects.links.as_deref().context("no links")?;
                links.add_latency(link, ms)?;
                let early = self.cancel.sleep_until(self.end);
                links.remove_latency(link)?;
                format!(
                    "latency toxic of {ms} ms on the downstream direction, then removed{}",
                    if early {
                        "; ended early: the run stopped"
                    } else {
                        ""
                    }
                )
            }
            Fault::KillServer { .. } | Fault::KillConsumers { .. } => {
                let server = self.subjects.server.as_deref().context("no server")?;
                let mut server = server
                    .lock()
                    .map_err(|_| anyhow::anyhow!("server poisoned"))?;
                let restarted = if matches!(self.fault, Fault::KillServer { .. }) {
                    // A killed process's connections die with it, and Redis
                    // and MySQL see them end (MySQL rolls back what they
                    // held); a proxy in between keeps the far side open,
                    // locks and all, so the links drop every connection.
                    server.kill_and_restart(|| match self.subjects.links.as_deref() {
                        Some(links) => Link::ALL.into_iter().try_for_each(|link| {
                            links.cut(link)?;
                            links.restore(link)
                        }),
                        None => Ok(()),
                    })?
                } else {
                    server.kill_consumers_and_restart()?
                };
                match (&self.fault, &self.subjects.links) {
                    (Fault::KillServer { .. }, Some(_)) => format!(
                        "{restarted}; the links dropped the dead process's connections before the restart"
                    ),
                    _ => restarted.to_string(),
                }
            }
            Fault::RedisRestart { .. } => {
                let redis = self.subjects.redis.as_deref();
                let redis = redis.context("no Redis of the run's own")?;
                let mut redis = redis
                    .lock()
                    .map_err(|_| anyhow::anyhow!("redis poisoned"))?;
                let down = redis.restart()?;
                format!(
                    "SHUTDOWN NOSAVE, started again empty on {}; answering after {:.0} ms",
                    redis.address(),
                    down.as_secs_f64() * 1000.0
                )
            }
            Fault::NatsRestart { .. } => {
                let nats = self.subjects.nats.as_deref();
                let nats = nats.context("no NATS server of the run's own")?;
                let mut nats = nats.lock().map_err(|_| anyhow::anyhow!("nats poisoned"))?;
                let down = nats.restart()?;
                format!(
                    "SIGKILL, started again on {} with the same JetStream store; healthy after {:.0} ms",
                    nats.address(),
                    down.as_secs_f64() * 1000.0
                )
            }
            Fault::Galera(fault) => fault.fire(&self.cancel, self.end)?,
            Fault::ClientTimeout { .. } => return Ok(None),
        };
        Ok(Some(Fired {
            fault: self.fault.to_string(),
            fired_at_ms: fired_at,
            ended_at_ms: self.since_start(),
            note,
        }))
    }

    fn since_start(&self) -> f64 {
        self.started.elapsed().as_secs_f64() * 1000.0
    }
}
