//! `--fault SPEC`: faults injected while the load runs.
//!
//! ```text
//! redis-cut@START+DURATION          the Redis link drops and refuses connections, then comes back
//! db-cut@START+DURATION             the same for the MySQL link
//! redis-latency=MS@START+DURATION   MS more on every Redis answer for a while
//! db-latency=MS@START+DURATION      the same for MySQL
//! kill-server@START                 SIGKILL of the served process, restarted right after
//! kill-consumers@START              the same for the consumer processes (roles apart)
//! redis-restart@START               SHUTDOWN NOSAVE of the run's own Redis, started again empty
//! client-timeout=MS                 clients give up on a request after MS
//! ```
//!
//! START and DURATION are durations into the load: `300ms`, `0.3s`, `2s`,
//! `1m`. MS is milliseconds, plain (`200`) or as a duration (`0.2s`). The
//! links are the proxies of `proxy.rs`; every fault but `client-timeout`
//! needs `--serve`, since the runner can only cut, slow or kill what it
//! started; `redis-restart` gives the served lab a Redis of the run's own
//! (`own_redis.rs`), never the machine's shared one. Faults on one link may
//! not overlap in time.
//!
//! [`Injector::start`], called the moment the load starts, runs each timed
//! fault on a thread of its own; [`Injector::finish`] waits until every
//! fault has ended (link restored, process restarted and answering) and
//! says when each really fired and ended.

use std::fmt;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::own_redis::OwnRedis;
use crate::server::Server;
use couponlab_links::{Link, Links};

/// The accepted forms, for error messages.
const FORMS: &str = "redis-cut@START+DURATION, db-cut@START+DURATION, \
redis-latency=MS@START+DURATION, db-latency=MS@START+DURATION, kill-server@START, \
kill-consumers@START, redis-restart@START, client-timeout=MS (START and DURATION like 300ms, 0.3s, 2s, 1m)";

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
    /// Clients give up on a request after `ms`.
    ClientTimeout { ms: u64 },
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
            ("redis-cut" | "db-cut", Some(link)) => {
                no_value()?;
                let (start, duration) = window()?;
                Fault::Cut {
                    link,
                    start,
                    duration,
                }
            }
            ("redis-latency" | "db-latency", Some(link)) => {
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
            ("client-timeout", _) => {
                if let Some(when) = when {
                    bail!("client-timeout holds for the whole load, it takes no time: got @{when}");
                }
                Fault::ClientTimeout { ms: ms()? }
            }
            _ => bail!("unknown fault {kind:?}"),
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
            | Fault::RedisRestart { start } => Some((start, start)),
            Fault::ClientTimeout { .. } => None,
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
            Fault::ClientTimeout { ms } => {
                format!("clients give up on a request after {ms} ms")
            }
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
            Fault::ClientTimeout { ms } => write!(f, "client-timeout={ms}"),
        }
    }
}

/// Every `--fault` of a run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultPlan {
    faults: Vec<Fault>,
}

/// What a run has that faults may need.
#[derive(Debug, Clone, Copy, Default)]
pub struct Setup {
    /// `--serve`: the runner started the server itself.
    pub serve: bool,
    /// The consumers run in processes of their own.
    pub roles_apart: bool,
}

impl FaultPlan {
    /// Parses every `--fault` value; fails on the first bad one, naming it
    /// and the accepted forms, and on faults that cannot go together.
    pub fn parse(specs: &[String]) -> anyhow::Result<FaultPlan> {
        let faults = specs
            .iter()
            .map(|spec| Fault::parse(spec))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let timeouts = faults
            .iter()
            .filter(|fault| matches!(fault, Fault::ClientTimeout { .. }))
            .count();
        if timeouts > 1 {
            bail!("--fault client-timeout=MS is given {timeouts} times; give it once");
        }
        for (i, a) in faults.iter().enumerate() {
            for b in &faults[i + 1..] {
                let (Some(link), Some(other)) = (a.link(), b.link()) else {
                    continue;
                };
                let (Some((a_start, a_end)), Some((b_start, b_end))) = (a.window(), b.window())
                else {
                    continue;
                };
                if link == other && a_start < b_end && b_start < a_end {
                    bail!(
                        "--fault {a} and --fault {b} overlap on the {} link; faults on one link must follow each other",
                        link.name()
                    );
                }
            }
        }
        Ok(FaultPlan { faults })
    }

    pub fn faults(&self) -> &[Fault] {
        &self.faults
    }

    /// `client-timeout=MS`, for k6's request timeout.
    pub fn client_timeout_ms(&self) -> Option<u64> {
        self.faults.iter().find_map(|fault| match fault {
            Fault::ClientTimeout { ms } => Some(*ms),
            _ => None,
        })
    }

    /// Whether the server must talk to Redis and MySQL through [`Links`].
    pub fn needs_links(&self) -> bool {
        self.faults.iter().any(|fault| fault.link().is_some())
    }

    /// Whether the served lab needs a Redis of the run's own.
    pub fn needs_own_redis(&self) -> bool {
        self.faults
            .iter()
            .any(|fault| matches!(fault, Fault::RedisRestart { .. }))
    }

    /// Whether the consumers must run in processes of their own.
    pub fn needs_roles_apart(&self) -> bool {
        self.faults
            .iter()
            .any(|fault| matches!(fault, Fault::KillConsumers { .. }))
    }

    /// Fails when a fault needs what the run does not have.
    pub fn check(&self, setup: Setup) -> anyhow::Result<()> {
        for fault in &self.faults {
            if fault.window().is_some() && !setup.serve {
                bail!(
                    "--fault {fault} needs --serve: the runner can only cut, slow or kill the server and links it started itself"
                );
            }
            if matches!(fault, Fault::KillConsumers { .. }) && !setup.roles_apart {
                bail!(
                    "--fault {fault} needs the consumers in processes of their own: add --roles-apart (serve --consumers false, consume pubsub|stream|write-behind)"
                );
            }
        }
        Ok(())
    }

    /// One sentence per fault, in the order given.
    pub fn describe(&self) -> Vec<String> {
        self.faults
            .iter()
            .map(|fault| format!("`{fault}`: {}", fault.describe()))
            .collect()
    }
}

/// What a fault did, in milliseconds from the load's start.
#[derive(Debug, Clone, PartialEq)]
pub struct Fired {
    /// The fault's spec (canonical form).
    pub fault: String,
    pub fired_at_ms: f64,
    pub ended_at_ms: f64,
    /// What happened, e.g. "restarted, answering after 850 ms".
    pub note: String,
}

impl Fired {
    pub fn to_json(&self) -> Value {
        json!({
            "fault": self.fault,
            "firedAtMs": self.fired_at_ms,
            "endedAtMs": self.ended_at_ms,
            "note": self.note,
        })
    }
}

/// Runs the timed faults of a plan while the load runs.
pub struct Injector {
    cancel: Arc<Cancel>,
    threads: Vec<(String, JoinHandle<anyhow::Result<Option<Fired>>>)>,
}

/// Set when the run stops early: faults not fired yet are skipped, and
/// those under way end at once.
#[derive(Default)]
struct Cancel {
    cancelled: Mutex<bool>,
    wake: Condvar,
}

impl Cancel {
    /// Sleeps until `deadline`; true when cancelled first.
    fn sleep_until(&self, deadline: Instant) -> bool {
        let mut cancelled = self.cancelled.lock().expect("cancel poisoned");
        loop {
            if *cancelled {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            cancelled = self
                .wake
                .wait_timeout(cancelled, deadline - now)
                .expect("cancel poisoned")
                .0;
        }
    }

    fn cancel(&self) {
        *self.cancelled.lock().expect("cancel poisoned") = true;
        self.wake.notify_all();
    }
}

impl Injector {
    /// Starts the plan's timed faults, counted from now (call it right
    /// after the load starts). `links` must be given when the plan cuts or
    /// slows a link, `server` when it kills a process.
    pub fn start(
        plan: &FaultPlan,
        links: Option<Arc<Links>>,
        server: Option<Arc<Mutex<Server>>>,
        redis: Option<Arc<Mutex<OwnRedis>>>,
    ) -> anyhow::Result<Injector> {
        if plan.needs_own_redis() && redis.is_none() {
            bail!("the faults restart Redis, but the run has no Redis of its own (--serve)");
        }
        if plan.needs_links() && links.is_none() {
            bail!("the faults cut or slow links, but the server does not run through links");
        }
        let kills = plan.faults().iter().any(|fault| {
            matches!(
                fault,
                Fault::KillServer { .. } | Fault::KillConsumers { .. }
            )
        });
        if kills && server.is_none() {
            bail!("the faults kill processes, but the runner has no server of its own (--serve)");
        }
        if plan.needs_roles_apart() {
            let apart = server
                .as_deref()
                .is_some_and(|server| server.lock().is_ok_and(|server| server.roles_apart()));
            if !apart {
                bail!(
                    "the faults kill the consumer processes, but the consumers run inside the server"
                );
            }
        }
        let started = Instant::now();
        let cancel = Arc::new(Cancel::default());
        let mut threads = Vec::new();
        for fault in plan.faults() {
            let Some((start, end)) = fault.window() else {
                continue;
            };
            let target = Target {
                fault: fault.clone(),
                started,
                start: started + start,
                end: started + end,
                links: links.clone(),
                server: server.clone(),
                redis: redis.clone(),
                cancel: cancel.clone(),
            };
            let thread = std::thread::Builder::new()
                .name(format!("fault {fault}"))
                .spawn(move || target.run())
                .context("cannot start a fault's thread")?;
            threads.push((fault.to_string(), thread));
        }
        Ok(Injector { cancel, threads })
    }

    /// Waits until every fault has fired and ended; what fired, in the
    /// order it fired. Fails when a fault could not be injected or undone.
    pub fn finish(mut self) -> anyhow::Result<Vec<Fired>> {
        let mut fired = Vec::new();
        let mut failures = Vec::new();
        for (fault, thread) in std::mem::take(&mut self.threads) {
            match thread.join() {
                Ok(Ok(Some(done))) => fired.push(done),
                Ok(Ok(None)) => {}
                Ok(Err(err)) => failures.push(format!("{fault}: {err:#}")),
                Err(_) => failures.push(format!("{fault}: its thread panicked")),
            }
        }
        if !failures.is_empty() {
            bail!("faults failed: {}", failures.join("; "));
        }
        fired.sort_by(|a, b| a.fired_at_ms.total_cmp(&b.fired_at_ms));
        Ok(fired)
    }
}

impl Drop for Injector {
    /// A run that stops early: what is under way ends now, links restored
    /// and processes restarted, before the links and the server go.
    fn drop(&mut self) {
        self.cancel.cancel();
        for (_, thread) in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// One timed fault and what it acts on.
struct Target {
    fault: Fault,
    started: Instant,
    start: Instant,
    end: Instant,
    links: Option<Arc<Links>>,
    server: Option<Arc<Mutex<Server>>>,
    redis: Option<Arc<Mutex<OwnRedis>>>,
    cancel: Arc<Cancel>,
}

impl Target {
    fn run(self) -> anyhow::Result<Option<Fired>> {
        if self.cancel.sleep_until(self.start) {
            return Ok(None);
        }
        let fired_at = self.since_start();
        let note = match self.fault {
            Fault::Cut { link, .. } => {
                let links = self.links.as_deref().context("no links")?;
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
                let links = self.links.as_deref().context("no links")?;
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
                let server = self.server.as_deref().context("no server")?;
                let mut server = server
                    .lock()
                    .map_err(|_| anyhow::anyhow!("server poisoned"))?;
                let restarted = if matches!(self.fault, Fault::KillServer { .. }) {
                    // A killed process's connections die with it, and Redis
                    // and MySQL see them end (MySQL rolls back what they
                    // held); a proxy in between keeps the far side open,
                    // locks and all, so the links drop every connection.
                    server.kill_and_restart(|| match self.links.as_deref() {
                        Some(links) => {
                            [Link::Redis, Link::Database]
                                .into_iter()
                                .try_for_each(|link| {
                                    links.cut(link)?;
                                    links.restore(link)
                                })
                        }
                        None => Ok(()),
                    })?
                } else {
                    server.kill_consumers_and_restart()?
                };
                match (&self.fault, &self.links) {
                    (Fault::KillServer { .. }, Some(_)) => format!(
                        "{restarted}; the links dropped the dead process's connections before the restart"
                    ),
                    _ => restarted.to_string(),
                }
            }
            Fault::RedisRestart { .. } => {
                let redis = self.redis.as_deref().context("no Redis of the run's own")?;
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
    use std::io::{ErrorKind, Read, Write};
    use std::net::TcpStream;

    use couponlab_links::REDIS_UPSTREAM;

    use super::*;

    fn plan(specs: &[&str]) -> anyhow::Result<FaultPlan> {
        FaultPlan::parse(&specs.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn error(specs: &[&str]) -> String {
        format!("{:#}", plan(specs).unwrap_err())
    }

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn every_form_parses_with_decimals_and_units() {
        let parsed = plan(&[
            "redis-cut@300ms+0.5s",
            "db-cut@1m+1.5s",
            "redis-latency=200@2s+1s",
            "db-latency=0.25s@0.3s+100ms",
            "kill-server@2.5s",
            "kill-consumers@4s",
            "redis-restart@3s",
            "client-timeout=1500",
        ])
        .unwrap();
        assert_eq!(
            parsed.faults(),
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
                Fault::ClientTimeout { ms: 1500 },
            ]
        );
        assert_eq!(parsed.client_timeout_ms(), Some(1500));
        assert!(parsed.needs_links() && parsed.needs_roles_apart());
        // The canonical form parses to the same fault.
        for fault in parsed.faults() {
            assert_eq!(&Fault::parse(&fault.to_string()).unwrap(), fault);
        }
        assert_eq!(parsed.faults()[0].to_string(), "redis-cut@300ms+500ms");
        assert_eq!(
            parsed.describe()[2],
            "`redis-latency=200@2000ms+1000ms`: 200 ms of latency on every answer from Redis (downstream) at 2 s for 1 s"
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
            ("kill-server", "needs a time"),
            ("client-timeout=100@1s", "takes no time"),
            ("client-timeout", "needs a value"),
            ("redis-drop@1s+1s", "unknown fault \"redis-drop\""),
        ] {
            let message = error(&[spec]);
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
    fn faults_on_one_link_may_not_overlap() {
        let message = error(&["redis-cut@1s+2s", "redis-latency=50@2.5s+1s"]);
        assert!(message.contains("overlap on the redis link"), "{message}");
        // One after the other, or on different links: fine.
        plan(&["redis-cut@1s+2s", "redis-latency=50@3s+1s"]).unwrap();
        plan(&["redis-cut@1s+2s", "db-cut@1s+2s", "kill-server@2s"]).unwrap();
        let message = error(&["client-timeout=100", "client-timeout=200"]);
        assert!(message.contains("give it once"), "{message}");
    }

    #[test]
    fn what_a_fault_needs_is_checked() {
        let kill = plan(&["kill-server@1s"]).unwrap();
        let message = kill.check(Setup::default()).unwrap_err().to_string();
        assert!(
            message.contains("kill-server@1000ms needs --serve"),
            "{message}"
        );
        kill.check(Setup {
            serve: true,
            roles_apart: false,
        })
        .unwrap();
        let cut = plan(&["db-cut@1s+1s"]).unwrap();
        assert!(cut.check(Setup::default()).is_err());
        let consumers = plan(&["kill-consumers@1s"]).unwrap();
        let message = consumers
            .check(Setup {
                serve: true,
                roles_apart: false,
            })
            .unwrap_err()
            .to_string();
        assert!(message.contains("processes of their own"), "{message}");
        // A client timeout asks nothing of the server.
        let timeout = plan(&["client-timeout=300"]).unwrap();
        timeout.check(Setup::default()).unwrap();
        assert!(!timeout.needs_links());
        assert!(plan(&[]).unwrap().faults().is_empty());
        let restart = plan(&["redis-restart@1s"]).unwrap();
        assert!(restart.needs_own_redis());
        assert!(restart.check(Setup::default()).is_err());
        // The injector refuses faults it has nothing to act on.
        assert!(Injector::start(&cut, None, None, None).is_err());
        assert!(Injector::start(&restart, None, None, None).is_err());
        assert!(Injector::start(&kill, None, None, None).is_err());
    }

    /// A Redis PING through the link: whether it answered.
    fn pings(links: &Links) -> bool {
        let Ok(mut stream) = TcpStream::connect(links.address(Link::Redis)) else {
            return false;
        };
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut answer = [0u8; 7];
        stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_ok()
            && stream.read_exact(&mut answer).is_ok()
            && &answer == b"+PONG\r\n"
    }

    #[test]
    fn the_injector_cuts_and_slows_links_on_time_and_says_when() {
        let links = Arc::new(Links::start_to(REDIS_UPSTREAM).unwrap());
        let faults = plan(&[
            "redis-cut@100ms+300ms",
            "db-latency=50@0.2s+0.2s",
            "client-timeout=100",
        ])
        .unwrap();
        let started = Instant::now();
        let injector = Injector::start(&faults, Some(links.clone()), None, None).unwrap();
        assert!(pings(&links));
        while started.elapsed() < ms(250) {
            std::thread::sleep(ms(10));
        }
        assert!(links.is_cut(Link::Redis));
        let refused = TcpStream::connect(links.address(Link::Redis)).unwrap_err();
        assert_eq!(refused.kind(), ErrorKind::ConnectionRefused);
        let fired = injector.finish().unwrap();
        assert!(started.elapsed() >= ms(400));
        assert!(!links.is_cut(Link::Redis) && pings(&links));

        assert_eq!(fired.len(), 2, "{fired:?}");
        let (cut, latency) = (&fired[0], &fired[1]);
        assert_eq!(cut.fault, "redis-cut@100ms+300ms");
        assert!(
            cut.fired_at_ms >= 100.0 && cut.ended_at_ms >= 400.0,
            "{cut:?}"
        );
        assert!(cut.note.contains("proxy stopped"), "{cut:?}");
        assert_eq!(latency.fault, "db-latency=50@200ms+200ms");
        assert!(latency.fired_at_ms >= 200.0 && latency.ended_at_ms >= 400.0);
        assert_eq!(cut.to_json()["firedAtMs"], json!(cut.fired_at_ms));
    }

    #[test]
    fn a_run_that_stops_early_ends_its_faults_at_once() {
        let links = Arc::new(Links::start_to(REDIS_UPSTREAM).unwrap());
        let faults = plan(&["redis-cut@0ms+1m", "db-cut@1m+1s"]).unwrap();
        let injector = Injector::start(&faults, Some(links.clone()), None, None).unwrap();
        while !links.is_cut(Link::Redis) {
            std::thread::sleep(ms(5));
        }
        let dropped = Instant::now();
        drop(injector);
        assert!(dropped.elapsed() < ms(10_000));
        assert!(!links.is_cut(Link::Redis) && !links.is_cut(Link::Database));
        assert!(pings(&links));
    }
}
