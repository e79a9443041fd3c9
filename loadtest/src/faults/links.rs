//! The faults on a link between the served lab and a service, through its
//! noxious proxy: `redis-cut`, `db-cut`, `amqp-cut`, `nats-cut`
//! (`@START+DURATION`: the proxy stops, open connections closed, new ones
//! refused) and `redis-latency`, `db-latency`, `amqp-latency`,
//! `nats-latency` (`=MS@START+DURATION`: MS more on every answer).

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::Context;
use couponlab_links::Link;

use super::cancel::{Cancel, ended_early};
use super::parts::{Parts, seconds, spec};
use super::subjects::Subjects;

/// One fault of a link.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LinkFault {
    /// The link's proxy stops for `duration` from `start`.
    Cut {
        link: Link,
        start: Duration,
        duration: Duration,
    },
    /// `ms` more on each answer over the link for `duration` from `start`.
    Latency {
        link: Link,
        ms: u64,
        start: Duration,
        duration: Duration,
    },
}

impl LinkFault {
    /// The fault `parts` names, `None` when its kind is no link's.
    pub(super) fn parse(parts: &Parts<'_>) -> Option<anyhow::Result<LinkFault>> {
        let (link, fault) = parts.kind.split_once('-')?;
        let link = match link {
            "redis" => Link::Redis,
            "db" => Link::Database,
            "amqp" => Link::Amqp,
            "nats" => Link::Nats,
            _ => return None,
        };
        Some(match fault {
            "cut" => parts.no_value().and_then(|()| {
                let (start, duration) = parts.window()?;
                Ok(LinkFault::Cut {
                    link,
                    start,
                    duration,
                })
            }),
            "latency" => parts.ms().and_then(|ms| {
                let (start, duration) = parts.window()?;
                Ok(LinkFault::Latency {
                    link,
                    ms,
                    start,
                    duration,
                })
            }),
            _ => return None,
        })
    }

    pub fn link(self) -> Link {
        match self {
            LinkFault::Cut { link, .. } | LinkFault::Latency { link, .. } => link,
        }
    }

    pub fn window(self) -> (Duration, Duration) {
        match self {
            LinkFault::Cut {
                start, duration, ..
            }
            | LinkFault::Latency {
                start, duration, ..
            } => (start, start + duration),
        }
    }

    pub fn describe(self) -> String {
        match self {
            LinkFault::Cut {
                link,
                start,
                duration,
            } => format!(
                "the {} link is cut at {} for {}: open connections closed, new ones refused",
                link.service(),
                seconds(start),
                seconds(duration)
            ),
            LinkFault::Latency {
                link,
                ms,
                start,
                duration,
            } => format!(
                "{ms} ms of latency on every answer from {} (downstream) at {} for {}",
                link.service(),
                seconds(start),
                seconds(duration)
            ),
        }
    }

    /// Cuts or slows the link, and at `end` (or at once when the run stops
    /// first) restores it; what happened.
    pub(super) fn fire(
        self,
        subjects: &Subjects,
        cancel: &Cancel,
        end: Instant,
    ) -> anyhow::Result<String> {
        let links = subjects.links.as_deref().context("no links")?;
        Ok(match self {
            LinkFault::Cut { link, .. } => {
                let open = links.cut(link)?;
                let early = cancel.sleep_until(end);
                links.restore(link)?;
                format!(
                    "proxy stopped ({open} open connection(s) closed, new ones refused), then listening again on {}{}",
                    links.address(link),
                    ended_early(early)
                )
            }
            LinkFault::Latency { link, ms, .. } => {
                links.add_latency(link, ms)?;
                let early = cancel.sleep_until(end);
                links.remove_latency(link)?;
                format!(
                    "latency toxic of {ms} ms on the downstream direction, then removed{}",
                    ended_early(early)
                )
            }
        })
    }
}

/// The spec it parses from, in the canonical form.
impl fmt::Display for LinkFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            LinkFault::Cut {
                link,
                start,
                duration,
            } => write!(f, "{}-cut@{}+{}", link.name(), spec(start), spec(duration)),
            LinkFault::Latency {
                link,
                ms,
                start,
                duration,
            } => write!(
                f,
                "{}-latency={ms}@{}+{}",
                link.name(),
                spec(start),
                spec(duration)
            ),
        }
    }
}
