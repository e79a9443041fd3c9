//! One `--fault` value: parsed by the family its kind belongs to, written
//! back in a canonical form (which parses to the same fault), and described
//! for the report.

use std::fmt;
use std::time::Duration;

use anyhow::Context;
use couponlab_links::Link;

use super::galera::GaleraFault;
use super::links::LinkFault;
use super::parts::Parts;
use super::processes::ProcessFault;
use super::redis_failover::RedisFailoverFault;

/// The accepted forms, for error messages.
const FORMS: &str = "redis-cut@START+DURATION, db-cut@START+DURATION, amqp-cut@START+DURATION, \
nats-cut@START+DURATION, redis-latency=MS@START+DURATION, db-latency=MS@START+DURATION, kill-server@START, kill-consumers@START, redis-restart@START, nats-restart@START, redis-failover@START, redis-pause@START+DURATION, galera-kill@START, galera-pause@START+DURATION, client-timeout=MS (START and DURATION like 300ms, 0.3s, 2s, 1m)";

/// One fault of a run, by family.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// A link cut or slowed.
    Link(LinkFault),
    /// A process the runner started killed and started again.
    Process(ProcessFault),
    /// Clients give up on a request after `ms`.
    ClientTimeout { ms: u64 },
    /// A node of the Galera cluster killed or paused.
    Galera(GaleraFault),
    /// The Redis primary killed or paused, a replica promoted.
    RedisFailover(RedisFailoverFault),
}

impl Fault {
    /// Parses one `--fault` value.
    pub fn parse(spec: &str) -> anyhow::Result<Fault> {
        Self::parse_inner(spec.trim())
            .with_context(|| format!("--fault {spec:?}: accepted forms are {FORMS}"))
    }

    fn parse_inner(spec: &str) -> anyhow::Result<Fault> {
        let parts = Parts::of(spec);
        if parts.kind == "client-timeout" {
            parts.no_time()?;
            return Ok(Fault::ClientTimeout { ms: parts.ms()? });
        }
        let fault = None
            .or_else(|| LinkFault::parse(&parts).map(|f| f.map(Fault::Link)))
            .or_else(|| ProcessFault::parse(&parts).map(|f| f.map(Fault::Process)))
            .or_else(|| GaleraFault::parse(&parts).map(|f| f.map(Fault::Galera)))
            .or_else(|| RedisFailoverFault::parse(&parts).map(|f| f.map(Fault::RedisFailover)));
        fault.unwrap_or_else(|| Err(anyhow::anyhow!("unknown fault {:?}", parts.kind)))
    }

    /// When the fault starts, and ends, into the load (`None`: it is no
    /// timed fault).
    pub fn window(&self) -> Option<(Duration, Duration)> {
        match *self {
            Fault::Link(fault) => Some(fault.window()),
            Fault::Process(fault) => Some((fault.start(), fault.start())),
            Fault::ClientTimeout { .. } => None,
            Fault::Galera(fault) => Some(fault.window()),
            Fault::RedisFailover(fault) => Some(fault.window()),
        }
    }

    /// The link the fault acts on.
    pub fn link(&self) -> Option<Link> {
        match *self {
            Fault::Link(fault) => Some(fault.link()),
            _ => None,
        }
    }

    /// A sentence for the report.
    pub fn describe(&self) -> String {
        match *self {
            Fault::Link(fault) => fault.describe(),
            Fault::Process(fault) => fault.describe(),
            Fault::ClientTimeout { ms } => {
                format!("clients give up on a request after {ms} ms")
            }
            Fault::Galera(fault) => fault.describe(),
            Fault::RedisFailover(fault) => fault.describe(),
        }
    }
}

/// The spec a fault parses from, in a canonical form.
impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Link(fault) => write!(f, "{fault}"),
            Fault::Process(fault) => write!(f, "{fault}"),
            Fault::ClientTimeout { ms } => write!(f, "client-timeout={ms}"),
            Fault::Galera(fault) => write!(f, "{fault}"),
            Fault::RedisFailover(fault) => write!(f, "{fault}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::galera::GaleraFault;
    use super::super::redis_failover::RedisFailoverFault;
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
                Fault::Link(LinkFault::Cut {
                    link: Link::Redis,
                    start: ms(300),
                    duration: ms(500)
                }),
                Fault::Link(LinkFault::Cut {
                    link: Link::Database,
                    start: ms(60_000),
                    duration: ms(1500)
                }),
                Fault::Link(LinkFault::Latency {
                    link: Link::Redis,
                    ms: 200,
                    start: ms(2000),
                    duration: ms(1000)
                }),
                Fault::Link(LinkFault::Latency {
                    link: Link::Database,
                    ms: 250,
                    start: ms(300),
                    duration: ms(100)
                }),
                Fault::Process(ProcessFault::KillServer { start: ms(2500) }),
                Fault::Process(ProcessFault::KillConsumers { start: ms(4000) }),
                Fault::Process(ProcessFault::RedisRestart { start: ms(3000) }),
                Fault::Process(ProcessFault::NatsRestart { start: ms(1500) }),
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

    #[test]
    fn the_galera_faults_parse_and_write_back() {
        let kill = Fault::parse("galera-kill@2.5s").unwrap();
        assert_eq!(
            kill,
            Fault::Galera(GaleraFault::Kill {
                start: Duration::from_millis(2500)
            })
        );
        let pause = Fault::parse("galera-pause@1s+3s").unwrap();
        assert_eq!(
            pause.window(),
            Some((Duration::from_secs(1), Duration::from_secs(4)))
        );
        for fault in [kill, pause] {
            assert_eq!(Fault::parse(&fault.to_string()).unwrap(), fault);
        }
        for (spec, reason) in [
            ("galera-kill@1s+1s", "takes no duration"),
            ("galera-pause@1s", "needs a duration"),
            ("galera-kill=3@1s", "takes no value"),
        ] {
            let message = format!("{:#}", Fault::parse(spec).unwrap_err());
            assert!(message.contains(reason), "{spec}: {message}");
        }
    }

    #[test]
    fn the_failover_faults_parse_and_write_back() {
        let failover = Fault::parse("redis-failover@2s").unwrap();
        assert_eq!(
            failover,
            Fault::RedisFailover(RedisFailoverFault::Failover {
                start: Duration::from_secs(2)
            })
        );
        let pause = Fault::parse("redis-pause@1s+4s").unwrap();
        assert_eq!(
            pause.window(),
            Some((Duration::from_secs(1), Duration::from_secs(5)))
        );
        for fault in [failover, pause] {
            assert_eq!(Fault::parse(&fault.to_string()).unwrap(), fault);
        }
        for (spec, reason) in [
            ("redis-failover@1s+1s", "takes no duration"),
            ("redis-pause@1s", "needs a duration"),
            ("redis-failover=1@1s", "takes no value"),
        ] {
            let message = format!("{:#}", Fault::parse(spec).unwrap_err());
            assert!(message.contains(reason), "{spec}: {message}");
        }
    }
}
