//! What a timed fault does when it fires, to the link, server, Redis, NATS
//! or node it acts on, and how it is undone when it ends (or at once, when
//! the run stops first): each family's `fire`, on the fault's own thread.

use std::sync::Arc;
use std::time::Instant;

use super::cancel::Cancel;
use super::spec::Fault;
use super::subjects::{Fired, Subjects};

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
        let (subjects, cancel, end) = (&self.subjects, &*self.cancel, self.end);
        let note = match self.fault {
            Fault::Link(fault) => fault.fire(subjects, cancel, end)?,
            Fault::Process(fault) => fault.fire(subjects)?,
            Fault::Galera(fault) => fault.fire(cancel, end)?,
            Fault::RedisFailover(fault) => fault.fire(subjects, cancel, end)?,
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
