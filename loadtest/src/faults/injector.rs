//! The timed faults of a plan, run while the load runs: each on a thread
//! of its own from the moment the load starts, every one ended (early, at
//! once, when the run stops first) before the run is reported.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Context, bail};
use couponlab_links::Links;
use serde_json::{Value, json};

use super::plan::FaultPlan;
use super::spec::Fault;
use super::target::Target;
use crate::own_nats::OwnNats;
use crate::own_redis::OwnRedis;
use crate::server::Server;

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

/// What the faults act on, as far as the run has it.
#[derive(Clone, Default)]
pub struct Subjects {
    /// The proxies the served lab talks through.
    pub links: Option<Arc<Links>>,
    /// `--serve`'s server, for the faults that kill it.
    pub server: Option<Arc<Mutex<Server>>>,
    /// The Redis of the run's own, for `redis-restart`.
    pub redis: Option<Arc<Mutex<OwnRedis>>>,
    /// The NATS server of the run's own, for `nats-restart`.
    pub nats: Option<Arc<Mutex<OwnNats>>>,
}

/// Runs the timed faults of a plan while the load runs.
pub struct Injector {
    cancel: Arc<Cancel>,
    threads: Vec<(String, JoinHandle<anyhow::Result<Option<Fired>>>)>,
}

/// Set when the run stops early: faults not fired yet are skipped, and
/// those under way end at once.
#[derive(Default)]
pub(super) struct Cancel {
    cancelled: Mutex<bool>,
    wake: Condvar,
}

impl Cancel {
    /// Sleeps until `deadline`; true when cancelled first.
    pub(super) fn sleep_until(&self, deadline: Instant) -> bool {
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
    /// after the load starts). The links must be there when the plan cuts
    /// or slows a link, the server when it kills a process, the run's own
    /// Redis or NATS when it restarts one.
    pub fn start(plan: &FaultPlan, subjects: Subjects) -> anyhow::Result<Injector> {
        let Subjects {
            links,
            server,
            redis,
            nats,
        } = &subjects;
        if plan.needs_own_redis() && redis.is_none() {
            bail!("the faults restart Redis, but the run has no Redis of its own (--serve)");
        }
        if plan.needs_own_nats() && nats.is_none() {
            bail!("the faults restart NATS, but the run has no NATS server of its own (--serve)");
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
                subjects: subjects.clone(),
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

#[cfg(test)]
mod tests {
    use std::io::{ErrorKind, Read, Write};
    use std::net::TcpStream;
    use std::time::Duration;

    use couponlab_links::{Link, REDIS_UPSTREAM};

    use super::*;

    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn the_injector_refuses_faults_it_has_nothing_to_act_on() {
        for spec in [
            "db-cut@1s+1s",
            "redis-restart@1s",
            "nats-restart@1s",
            "kill-server@1s",
        ] {
            let plan = FaultPlan::parse(&[spec]).unwrap();
            assert!(
                Injector::start(&plan, Subjects::default()).is_err(),
                "{spec}"
            );
        }
    }

    fn linked(links: &Arc<Links>) -> Subjects {
        Subjects {
            links: Some(links.clone()),
            ..Subjects::default()
        }
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
        let faults = FaultPlan::parse(&[
            "redis-cut@100ms+300ms",
            "db-latency=50@0.2s+0.2s",
            "client-timeout=100",
        ])
        .unwrap();
        let started = Instant::now();
        let injector = Injector::start(&faults, linked(&links)).unwrap();
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
        let faults = FaultPlan::parse(&["redis-cut@0ms+1m", "db-cut@1m+1s"]).unwrap();
        let injector = Injector::start(&faults, linked(&links)).unwrap();
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
