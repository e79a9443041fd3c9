//! The timed faults of a plan, run while the load runs: each on a thread
//! of its own from the moment the load starts, every one ended (early, at
//! once, when the run stops first) before the run is reported.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use anyhow::{Context, bail};

use super::cancel::Cancel;
use super::plan::FaultPlan;
use super::processes::ProcessFault;
use super::spec::Fault;
use super::subjects::{Fired, Subjects};
use super::target::Target;

/// Runs the timed faults of a plan while the load runs.
pub struct Injector {
    cancel: Arc<Cancel>,
    threads: Vec<(String, JoinHandle<anyhow::Result<Option<Fired>>>)>,
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
            redis_topology,
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
        if plan.needs_redis_topology() && redis_topology.is_none() {
            bail!(
                "the faults fail the Redis primary over, but the lab runs on no Redis with replicas"
            );
        }
        let kills = plan.faults().iter().any(|fault| {
            matches!(
                fault,
                Fault::Process(
                    ProcessFault::KillServer { .. } | ProcessFault::KillConsumers { .. }
                )
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

    use couponlab_links::{Link, Links, REDIS_UPSTREAM};
    use serde_json::json;

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
            "redis-failover@1s",
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
