//! A run's `--fault`s: parsed together, checked against each other (one
//! client timeout; faults on one link one after the other) and against
//! what the run has (`--serve`, the roles apart).

use anyhow::bail;

use super::processes::ProcessFault;
use super::spec::Fault;

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
    pub fn parse(specs: &[impl AsRef<str>]) -> anyhow::Result<FaultPlan> {
        let faults = specs
            .iter()
            .map(|spec| Fault::parse(spec.as_ref()))
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
            .any(|fault| matches!(fault, Fault::Process(ProcessFault::RedisRestart { .. })))
    }

    /// Whether the served lab needs a NATS server of the run's own.
    pub fn needs_own_nats(&self) -> bool {
        self.faults
            .iter()
            .any(|fault| matches!(fault, Fault::Process(ProcessFault::NatsRestart { .. })))
    }

    /// Whether the lab must run on a Redis with replicas (the Sentinels'
    /// primary, or a cluster's masters with a replica each).
    pub fn needs_redis_topology(&self) -> bool {
        self.faults
            .iter()
            .any(|fault| matches!(fault, Fault::RedisFailover(_)))
    }

    /// Whether the consumers must run in processes of their own.
    pub fn needs_roles_apart(&self) -> bool {
        self.faults
            .iter()
            .any(|fault| matches!(fault, Fault::Process(ProcessFault::KillConsumers { .. })))
    }

    /// Fails when a fault needs what the run does not have.
    pub fn check(&self, setup: Setup) -> anyhow::Result<()> {
        for fault in &self.faults {
            // The Galera and failover faults act on the cluster of `cargo
            // xtask galera up` and the Redis of `cargo xtask sentinel up` or
            // `cluster up --replicas 1`, whoever serves the lab on it.
            let on_a_topology = matches!(fault, Fault::Galera(_) | Fault::RedisFailover(_));
            if fault.window().is_some() && !setup.serve && !on_a_topology {
                bail!(
                    "--fault {fault} needs --serve: the runner can only cut, slow or kill the server and links it started itself"
                );
            }
            if matches!(fault, Fault::Process(ProcessFault::KillConsumers { .. }))
                && !setup.roles_apart
            {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(specs: &[&str]) -> anyhow::Result<FaultPlan> {
        FaultPlan::parse(specs)
    }

    fn error(specs: &[&str]) -> String {
        format!("{:#}", plan(specs).unwrap_err())
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
        let all = plan(&[
            "db-latency=5@1s+1s",
            "kill-consumers@1s",
            "client-timeout=1500",
        ])
        .unwrap();
        assert_eq!(all.client_timeout_ms(), Some(1500));
        assert!(all.needs_links() && all.needs_roles_apart());
        assert_eq!(
            all.describe()[1],
            "`kill-consumers@1000ms`: the consumer processes are killed (SIGKILL) at 1 s and restarted at once"
        );
        let restart = plan(&["redis-restart@1s"]).unwrap();
        assert!(restart.needs_own_redis() && !restart.needs_own_nats());
        let nats = plan(&["nats-restart@1s", "nats-cut@2s+1s"]).unwrap();
        assert!(nats.needs_own_nats() && nats.needs_links());
        assert!(nats.check(Setup::default()).is_err());
        assert!(restart.check(Setup::default()).is_err());
    }
}
