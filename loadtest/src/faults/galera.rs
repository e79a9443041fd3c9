//! The Galera cluster's faults (`--engines galera`): `galera-kill@START`,
//! SIGKILL of one node's `mariadbd`, started again at once to rejoin the
//! cluster; `galera-pause@START+DURATION`, SIGSTOP of one node and SIGCONT
//! after DURATION, as Jepsen's pauses. The node is the last one
//! (127.0.0.1:3309): the first, whose host sets the runs up and reports,
//! and whose rows the verification reads, stays up.

use std::fmt;
use std::time::Duration;

use super::cancel::{Cancel, ended_early};
use super::parts::{KillOrPause, Parts};
use crate::galera::Node;

/// The node the faults act on.
const FAULTED: Node = Node::LAST;

/// One fault of the cluster.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GaleraFault {
    Kill { start: Duration },
    Pause { start: Duration, duration: Duration },
}

impl GaleraFault {
    /// The fault `parts` names, `None` when its kind is neither.
    pub(super) fn parse(parts: &Parts<'_>) -> Option<anyhow::Result<GaleraFault>> {
        let fault = parts.kill_or_pause("galera-kill", "galera-pause")?;
        Some(fault.map(|fault| match fault {
            KillOrPause::Kill { start } => GaleraFault::Kill { start },
            KillOrPause::Pause { start, duration } => GaleraFault::Pause { start, duration },
        }))
    }

    pub fn window(self) -> (Duration, Duration) {
        match self {
            GaleraFault::Kill { start } => (start, start),
            GaleraFault::Pause { start, duration } => (start, start + duration),
        }
    }

    pub fn describe(self) -> String {
        match self {
            GaleraFault::Kill { start } => format!(
                "the Galera node {} is killed (SIGKILL) at {} s and started again at once, rejoining the cluster",
                FAULTED.address(),
                start.as_secs_f64()
            ),
            GaleraFault::Pause { start, duration } => format!(
                "the Galera node {} is paused (SIGSTOP) at {} s for {} s, then continued (SIGCONT)",
                FAULTED.address(),
                start.as_secs_f64(),
                duration.as_secs_f64()
            ),
        }
    }

    /// Fires the fault and, for a pause, ends it at its end (or at once
    /// when the run stops first); what happened.
    pub(super) fn fire(self, cancel: &Cancel, end: std::time::Instant) -> anyhow::Result<String> {
        match self {
            GaleraFault::Kill { .. } => {
                let rejoined = FAULTED.kill_and_rejoin()?;
                Ok(format!(
                    "SIGKILL; started again, Synced in a cluster of 3 after {:.1} s",
                    rejoined.as_secs_f64()
                ))
            }
            GaleraFault::Pause { .. } => {
                FAULTED.signal("STOP")?;
                let early = cancel.sleep_until(end);
                FAULTED.signal("CONT")?;
                Ok(format!("SIGSTOP, then SIGCONT{}", ended_early(early)))
            }
        }
    }
}

/// The spec it parses from, in the canonical form of `spec.rs`.
impl fmt::Display for GaleraFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |duration: Duration| duration.as_millis();
        match *self {
            GaleraFault::Kill { start } => write!(f, "galera-kill@{}ms", ms(start)),
            GaleraFault::Pause { start, duration } => {
                write!(f, "galera-pause@{}ms+{}ms", ms(start), ms(duration))
            }
        }
    }
}
