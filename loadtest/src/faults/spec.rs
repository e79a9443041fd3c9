//! One `--fault` value: parsed, written back in a canonical form (which
//! parses to the same fault), and described for the report.

use std::fmt;
use std::time::Duration;

use super::galera::GaleraFault;
use anyhow::{Context, bail};
use couponlab_links::Link;

/// The accepted forms, for error messages.
const FORMS: &str = "redis-cut@START+DURATION, db-cut@START+DURATION, amqp-cut@START+DURATION, \
nats-cut@START+DURATION, redis-latency=MS@START+DURATION, db-latency=MS@START+DURATION, kill-server@START, kill-consumers@START, redis-restart@START, nats-restart@START, galera-kill@START, galera-pause@START+DURATION, client-timeout=MS (START and DURATION like 300ms, 0.3s, 2s, 1m)";

/// One fault of a run.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
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
    /// Clients give up on a request after `ms`.
    ClientTimeout { ms: u64 },
    /// A node of the Galera cluster killed or paused.
    Galera(GaleraFault),
}

impl Fault {
    /// Parses one `--fault` value.
    pub fn parse(spec: &str) -> anyhow::Result<Fault> {
        Self::parse_inner(spec.trim())
            .with_context(|| format!("--fault {spec:?}: accepted forms are {FORMS}"))
    }

    fn parse_inner(spec: &str) -> anyhow::Result<Fault> {
        let (head, when) = match spec.split_once('@') {
            Some((head, when)) => (head, Some(when)),
            None => (spec, None),
        };
        let (kind, value) = match head.split_once('=') {
            Some((kind, value)) => (kind, Some(value)),
            None => (head, None),
        };
        let link = match kind {
            "redis-cut" | "redis-latency" => Some(Link::Redis),
            "db-cut" | "db-latency" => Some(Link::Database),
            "amqp-cut" | "amqp-latency" => Some(Link::Amqp),
            "nats-cut" | "nats-latency" => Some(Link::Nats),
            _ => None,
        };
        let ms = || -> anyhow::Result<u64> {
            let value = value.with_context(|| format!("{kind} needs a value: {kind}=MS"))?;
            let ms = milliseconds(value)?;
            if ms == 0 {
                bail!("{kind}={value}: MS must be more than 0");
            }
            Ok(ms)
        };
        let no_value = || match value {
            Some(value) => bail!("{kind} takes no value, got ={value}"),
            None => Ok(()),
        };
        let window = || -> anyhow::Result<(Duration, Duration)> {
            let when =
                when.with_context(|| format!("{kind} needs a time: {kind}@START+DURATION"))?;
            let (start, duration) = when.split_once('+').with_context(|| {
                format!("{kind}@{when} needs a duration: {kind}@START+DURATION")
            })?;
            let (start, duration) = (duration_of(start)?, duration_of(duration)?);
            if duration.is_zero() {
                bail!("{kind}@{when}: the duration must be more than 0");
            }
            Ok((start, duration))
        };
        let instant = || -> anyhow::Result<Duration> {
            let when = when.with_context(|| format!("{kind} needs a time: {kind}@START"))?;
            if when.contains('+') {
                bail!("{kind}@{when}: {kind} happens at one moment and takes no duration");
            }
            duration_of(when)
        };
        Ok(match (kind, link) {
            ("redis-cut" | "db-cut" | "amqp-cut" | "nats-cut", Some(link)) => {
                no_value()?;
                let (start, duration) = window()?;
                Fault::Cut {
                    link,
                    start,
                    duration,
                }
            }
            ("redis-latency" | "db-latency" | "amqp-latency" | "nats-latency", Some(link)) => {
                let ms = ms()?;
                let (start, duration) = window()?;
                Fault::Latency {
                    link,
                    ms,
                    start,
                    duration,
                }
            }
            ("kill-server", _) => {
                no_value()?;
                Fault::KillServer { start: instant()? }
            }
            ("kill-consumers", _) => {
                no_value()?;
                Fault::KillConsumers { start: instant()? }
            }
            ("redis-restart", _) => {
                no_value()?;
                Fault::RedisRestart { start: instant()? }
            }
            ("nats-restart", _) => {
                no_value()?;
                Fault::NatsRestart { start: instant()? }
            }
            ("client-timeout", _) => {
                if let Some(when) = when {
                    bail!("client-timeout holds for the whole load, it takes no time: got @{when}");
                }
                Fault::ClientTimeout { ms: ms()? }
            }
            _ => Fault::Galera(GaleraFault::parse(kind, value, instant, window)?),
        })
    }

    /// When the fault starts, and ends, into the load (`None`: it is no
    /// timed fault).
    pub fn window(&self) -> Option<(Duration, Duration)> {
        match *self {
            Fault::Cut {
                start, duration, ..
            }
            | Fault::Latency {
                start, duration, ..
            } => Some((start, start + duration)),
            Fault::KillServer { start }
            | Fault::KillConsumers { start }
            | Fault::RedisRestart { start }
            | Fault::NatsRestart { start } => Some((start, start)),
            Fault::ClientTimeout { .. } => None,
            Fault::Galera(fault) => Some(fault.window()),
        }
    }

    /// The link the fault acts on.
    pub fn link(&self) -> Option<Link> {
        match *self {
            Fault::Cut { link, .. } | Fault::Latency { link, .. } => Some(link),
            _ => None,
        }
    }

    /// A sentence for the report.
    pub fn describe(&self) -> String {
        match self {
            Fault::Cut {
                link,
                start,
                duration,
            } => format!(
                "the {} link is cut at {} for {}: open connections closed, new ones refused",
                link.service(),
                seconds(*start),
                seconds(*duration)
            ),
            Fault::Latency {
                link,
                ms,
                start,
                duration,
            } => format!(
                "{ms} ms of latency on every answer from {} (downstream) at {} for {}",
                link.service(),
                seconds(*start),
                seconds(*duration)
            ),
            Fault::KillServer { start } => format!(
                "the server is killed (SIGKILL) at {} and restarted at once",
                seconds(*start)
            ),
            Fault::KillConsumers { start } => format!(
                "the consumer processes are killed (SIGKILL) at {} and restarted at once",
                seconds(*start)
            ),
            Fault::RedisRestart { start } => format!(
                "Redis (the run's own) is shut down without saving at {} and started again at once, empty",
                seconds(*start)
            ),
            Fault::NatsRestart { start } => format!(
                "NATS (the run's own) is killed (SIGKILL) at {} and started again at once on the same JetStream store",
                seconds(*start)
            ),
            Fault::ClientTimeout { ms } => {
                format!("clients give up on a request after {ms} ms")
            }
            Fault::Galera(fault) => fault.describe(),
        }
    }
}

/// The spec a fault parses from, in a canonical form.
impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Cut {
                link,
                start,
                duration,
            } => write!(
                f,
                "{}-cut@{}+{}",
                link.name(),
                spec(*start),
                spec(*duration)
            ),
            Fault::Latency {
                link,
                ms,
                start,
                duration,
            } => write!(
                f,
                "{}-latency={ms}@{}+{}",
                link.name(),
                spec(*start),
                spec(*duration)
            ),
            Fault::KillServer { start } => write!(f, "kill-server@{}", spec(*start)),
            Fault::KillConsumers { start } => write!(f, "kill-consumers@{}", spec(*start)),
            Fault::RedisRestart { start } => write!(f, "redis-restart@{}", spec(*start)),
            Fault::NatsRestart { start } => write!(f, "nats-restart@{}", spec(*start)),
            Fault::ClientTimeout { ms } => write!(f, "client-timeout={ms}"),
            Fault::Galera(fault) => write!(f, "{fault}"),
        }
    }
}

/// `300ms`, `0.3s`, `2s`, `1m`, `1.5m`.
fn duration_of(text: &str) -> anyhow::Result<Duration> {
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let wrong = || format!("{text:?} is no duration: write it like 300ms, 0.3s, 2s or 1m");
    let number: f64 = number.parse().with_context(wrong)?;
    let seconds = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "m" => number * 60.0,
        _ => bail!(wrong()),
    };
    Duration::try_from_secs_f64(seconds).with_context(wrong)
}

/// MS: `200` or a duration (`0.2s`), in whole milliseconds.
fn milliseconds(text: &str) -> anyhow::Result<u64> {
    if let Ok(ms) = text.parse::<u64>() {
        return Ok(ms);
    }
    let duration = duration_of(text)
        .with_context(|| format!("{text:?} is no number of milliseconds (200, or 0.2s)"))?;
    if !duration.as_nanos().is_multiple_of(1_000_000) {
        bail!("{text:?} is not a whole number of milliseconds");
    }
    Ok(duration.as_millis() as u64)
}

/// A duration as a spec writes it: `300ms`, or `0.0005s` below a millisecond.
fn spec(duration: Duration) -> String {
    if duration.as_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{}s", duration.as_secs_f64())
    }
}

/// A duration for a sentence: `1.5 s`.
fn seconds(duration: Duration) -> String {
    format!("{} s", duration.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn every_form_parses_with_decimals_and_units() {
        let parsed: Vec<Fault> = [
            "redis-cut@300ms+0.5s",
            "db-cut@1m+1.5s",
            "redis-latency=200@2s+1s",
            "db-latency=0.25s@0.3s+100ms",
            "kill-server@2.5s",
            "kill-consumers@4s",
            "redis-restart@3s",
            "nats-restart@1.5s",
            "client-timeout=1500",
        ]
        .map(|spec| Fault::parse(spec).unwrap())
        .into();
        assert_eq!(
            parsed,
            [
                Fault::Cut {
                    link: Link::Redis,
                    start: ms(300),
                    duration: ms(500)
                },
                Fault::Cut {
                    link: Link::Database,
                    start: ms(60_000),
                    duration: ms(1500)
                },
                Fault::Latency {
                    link: Link::Redis,
                    ms: 200,
                    start: ms(2000),
                    duration: ms(1000)
                },
                Fault::Latency {
                    link: Link::Database,
                    ms: 250,
                    start: ms(300),
                    duration: ms(100)
                },
                Fault::KillServer { start: ms(2500) },
                Fault::KillConsumers { start: ms(4000) },
                Fault::RedisRestart { start: ms(3000) },
                Fault::NatsRestart { start: ms(1500) },
                Fault::ClientTimeout { ms: 1500 },
            ]
        );
        // The canonical form parses to the same fault.
        for fault in &parsed {
            assert_eq!(&Fault::parse(&fault.to_string()).unwrap(), fault);
        }
        assert_eq!(parsed[0].to_string(), "redis-cut@300ms+500ms");
        assert_eq!(
            parsed[2].describe(),
            "200 ms of latency on every answer from Redis (downstream) at 2 s for 1 s"
        );
    }

    #[test]
    fn a_bad_spec_is_named_with_the_accepted_forms() {
        for (spec, reason) in [
            ("redis-cut@2s", "needs a duration"),
            ("redis-cut", "needs a time"),
            ("redis-cut=5@1s+1s", "takes no value"),
            ("db-latency@1s+1s", "needs a value"),
            ("db-latency=0@1s+1s", "more than 0"),
            ("db-latency=1.5@1s+1s", "no number of milliseconds"),
            ("db-latency=0.0015s@1s+1s", "not a whole number"),
            ("db-cut@1s+0s", "more than 0"),
            ("db-cut@2x+1s", "\"2x\" is no duration"),
            ("db-cut@-1s+1s", "is no duration"),
            ("db-cut@1s+s", "\"s\" is no duration"),
            ("kill-server@1s+2s", "takes no duration"),
            ("nats-restart=1@1s", "takes no value"),
            ("kill-server", "needs a time"),
            ("client-timeout=100@1s", "takes no time"),
            ("client-timeout", "needs a value"),
            ("redis-drop@1s+1s", "unknown fault \"redis-drop\""),
        ] {
            let message = format!("{:#}", Fault::parse(spec).unwrap_err());
            assert!(
                message.contains(&format!("--fault {spec:?}")),
                "{spec}: {message}"
            );
            assert!(message.contains(reason), "{spec}: {message}");
            assert!(message.contains("redis-cut@START+DURATION"), "{message}");
            assert!(message.contains("client-timeout=MS"), "{message}");
        }
    }
}
