//! A served lab killed in the middle of a run and started again: the
//! serving process on its port with its data, or the consumer processes.

use std::time::{Duration, Instant};

use anyhow::bail;

use super::{START_LIMIT, Server, spawn_consumer};
use crate::launcher::kill;

/// What a kill and restart did.
#[derive(Debug, Clone)]
pub struct Restarted {
    /// The processes killed and their successors: role, old pid, new pid.
    pub processes: Vec<(&'static str, u32, u32)>,
    /// From the kill until every new process was ready (the server
    /// answering, a consumer consuming).
    pub ready_after: Duration,
}

impl std::fmt::Display for Restarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let processes: Vec<String> = self
            .processes
            .iter()
            .map(|(role, old, new)| format!("{role} pid {old} → {new}"))
            .collect();
        write!(
            f,
            "SIGKILL, restarted ({}), ready after {:.0} ms",
            processes.join(", "),
            self.ready_after.as_secs_f64() * 1000.0
        )
    }
}

impl Server {
    /// SIGKILL of the serving process, then `after_kill`, then a new one on
    /// the same port with the same data (nothing is emptied), once it
    /// answers.
    pub fn kill_and_restart(
        &mut self,
        after_kill: impl FnOnce() -> anyhow::Result<()>,
    ) -> anyhow::Result<Restarted> {
        let killed_at = Instant::now();
        let old = self.process.kill();
        after_kill()?;
        // A server that cannot start (its database link cut, say) exits:
        // it is started again until it answers, START_LIMIT at most.
        loop {
            self.process.start_again()?;
            match self.wait_answering() {
                Ok(()) => break,
                Err(_) if killed_at.elapsed() < START_LIMIT && self.process.exited()?.is_some() => {
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(err) => return Err(err),
            }
        }
        Ok(Restarted {
            processes: vec![("serve", old, self.process.pid())],
            ready_after: killed_at.elapsed(),
        })
    }

    /// SIGKILL of every consumer process, then new ones, once each
    /// consumes. Only when the roles run apart.
    pub fn kill_consumers_and_restart(&mut self) -> anyhow::Result<Restarted> {
        if !self.roles_apart {
            bail!("the consumers run inside the server: there is no consumer process to kill");
        }
        let killed_at = Instant::now();
        let mut processes = Vec::new();
        for (role, child) in &mut self.consumers {
            let old = kill(child);
            *child = spawn_consumer(self.process.launch(), role)?;
            processes.push((*role, old, child.id()));
        }
        Ok(Restarted {
            processes,
            ready_after: killed_at.elapsed(),
        })
    }
}

/// Need the release binary and the components, so they run by hand:
/// `cargo test --release -p couponlab-loadtest -- --ignored server::restart`
/// (with COUPONLAB_STRATEGY_DIR set to the components, if not in
/// strategies/dist). They use the `--serve` database and Redis db 10,
/// emptied at start.
#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::Api;
    use crate::server::{CONSUMERS, Serve};

    #[test]
    #[ignore = "needs the release couponlab binary and the components"]
    fn a_killed_server_comes_back_on_its_port_with_its_data() {
        let mut server = Server::start_with(Serve::default()).unwrap();
        let api = Api::new(&server.base_url()).unwrap();
        let coupon = api
            .post(
                "/lab/coupons",
                &json!({ "name": "restart", "totalCount": 3 }),
            )
            .unwrap();
        let before = server.process.pid();
        let restarted = server.kill_and_restart(|| Ok(())).unwrap();
        assert_eq!(
            restarted.processes,
            [("serve", before, server.process.pid())]
        );
        assert_ne!(before, server.process.pid());
        // Answering on the same address, the coupon still there.
        let result = api
            .get(&format!("/lab/coupons/{}/result", coupon["id"]))
            .unwrap();
        assert_eq!(result["totalCount"], 3, "{result}");
        println!("{restarted}");
    }

    #[test]
    #[ignore = "needs the release couponlab binary and the components"]
    fn consumers_apart_are_killed_and_restarted() {
        let mut server = Server::start_with(Serve {
            roles_apart: true,
            ..Serve::default()
        })
        .unwrap();
        let before: Vec<u32> = server.consumers.iter().map(|(_, c)| c.id()).collect();
        assert_eq!(before.len(), 3);
        let restarted = server.kill_consumers_and_restart().unwrap();
        let roles: Vec<&str> = restarted.processes.iter().map(|p| p.0).collect();
        assert_eq!(roles, CONSUMERS);
        for ((_, old, new), before) in restarted.processes.iter().zip(&before) {
            assert_eq!(old, before);
            assert_ne!(old, new);
        }
        for (role, consumer) in &mut server.consumers {
            assert!(consumer.try_wait().unwrap().is_none(), "{role} exited");
        }
        assert!(server.roles_apart());
        println!("{restarted}");
    }
}
