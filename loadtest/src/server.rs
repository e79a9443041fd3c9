//! The lab a run serves itself (`--serve`, idle, soak, the API check, the
//! bench), started through the launcher: `couponlab serve` of this
//! checkout's release build (or another build) on a free port, with a
//! database (`couponlab_loadtest_<migrations>`) and a Redis database (10)
//! nobody else uses unless told others. It is emptied at start, once every
//! component serves or was refused, and stopped with SIGTERM when the run
//! ends. It may talk to Redis and MySQL through the fault-injection links
//! (`couponlab-links`), run its consumer roles in processes of their own,
//! and be killed and restarted in the middle of a run (its data kept).
//! The database name carries a hash of the migrations, so a checkout with
//! other migrations never meets a schema it cannot migrate.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use couponlab_links::Links;

use crate::api::Api;
use crate::launcher::{self, Bind, Launch, Launched, kill, terminate};
use crate::paths::{release_binary, root, strategy_dir};
use crate::process_log;

pub const REDIS_URL: &str = "redis://127.0.0.1:6379/10";

/// How long a started process may take to be ready: a server compiles
/// every component before it answers, the Python and JavaScript ones taking
/// seconds each on a busy machine.
const START_LIMIT: Duration = Duration::from_secs(300);

/// The consumer roles `couponlab consume` runs alone (README "Processes").
const CONSUMERS: [&str; 3] = ["pubsub", "stream", "write-behind"];

/// What a consumer logs once it consumes.
const CONSUMING: &str = "couponlab is consuming";

/// How `--serve`'s server starts.
#[derive(Debug, Clone, Copy, Default)]
pub struct Serve<'a> {
    /// Talk to Redis and MySQL through these links (their proxies).
    pub links: Option<&'a Links>,
    /// The roles apart: `serve --consumers false` plus one `consume`
    /// process per consumer role.
    pub roles_apart: bool,
    /// Its database, when not the runner's ([`database_url`]).
    pub database_url: Option<&'a str>,
    /// Its Redis, when not the machine's ([`REDIS_URL`]).
    pub redis_url: Option<&'a str>,
    /// Settings of its own (`COUPONLAB_*`), besides its links.
    pub env: &'a [(&'static str, &'a str)],
    /// Another build of the server to run (an older version, measured side
    /// by side with this one), instead of this checkout's release binary.
    pub binary: Option<&'a Path>,
}

pub struct Server {
    process: Launched,
    /// The consumer processes, when the roles run apart: role and process.
    consumers: Vec<(&'static str, Child)>,
    roles_apart: bool,
}

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
    /// Starts the server as `serve` says, on a free port, and empties the
    /// lab's data.
    pub fn start_with(serve: Serve<'_>) -> anyhow::Result<Server> {
        let database_url = match serve.database_url {
            Some(url) => url.to_string(),
            None => database_url()?,
        };
        let redis_url = serve.redis_url.unwrap_or(REDIS_URL);
        let (database_url, redis_url) = match serve.links {
            // The server derives its components' users' URLs from these,
            // host and port included: they go through the links too.
            Some(links) => (links.through(&database_url)?, links.through(redis_url)?),
            None => (database_url, redis_url.to_string()),
        };
        let mut env = vec![
            ("DATABASE_URL", database_url),
            ("REDIS_URL", redis_url),
            (
                "COUPONLAB_STRATEGY_DIR",
                strategy_dir().to_string_lossy().into_owned(),
            ),
        ];
        env.extend(
            serve
                .env
                .iter()
                .map(|&(key, value)| (key, value.to_string())),
        );
        let launch = Launch {
            binary: serve
                .binary
                .map_or_else(|| release_binary("couponlab"), Path::to_path_buf),
            args: if serve.roles_apart {
                vec!["serve", "--consumers", "false"]
            } else {
                vec!["serve"]
            },
            env,
            bind: Bind::Env("COUPONLAB_BIND"),
        };
        let mut server = Server {
            process: Launched::start(launch)?,
            consumers: Vec::new(),
            roles_apart: serve.roles_apart,
        };
        server.wait_answering()?;
        server.wait_proved()?;
        Api::new(&server.base_url())?.delete_data()?;
        if serve.roles_apart {
            for role in CONSUMERS {
                let consumer = spawn_consumer(server.process.launch(), role)?;
                server.consumers.push((role, consumer));
            }
        }
        println!(
            "serving on {} (a database of its own, Redis {}{}{}; log: {})",
            server.base_url(),
            serve.redis_url.unwrap_or(REDIS_URL),
            if serve.links.is_some() {
                ", through fault-injection proxies"
            } else {
                ""
            },
            if serve.roles_apart {
                "; consumers in processes of their own"
            } else {
                ""
            },
            launcher::log_path().display()
        );
        Ok(server)
    }

    /// CPU time the serving process has used, in seconds.
    pub fn cpu_seconds(&self) -> anyhow::Result<f64> {
        crate::proc_stats::cpu_seconds(self.process.pid())
            .context("cannot read the server's CPU time from /proc")
    }

    /// The serving process.
    pub fn process(&self) -> &Launched {
        &self.process
    }

    pub fn base_url(&self) -> String {
        self.process.base_url()
    }

    /// Whether the consumers run in processes of their own.
    pub fn roles_apart(&self) -> bool {
        self.roles_apart
    }

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

    /// Waits until the serving process answers.
    fn wait_answering(&mut self) -> anyhow::Result<()> {
        let api = Api::new(&self.base_url())?;
        let started = Instant::now();
        while api.get("/lab/strategies").is_err() {
            if let Some(status) = self.process.exited()? {
                bail!("the server exited at start with {status}");
            }
            if started.elapsed() > START_LIMIT {
                bail!("the server did not answer within {START_LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }
}

/// How long the canaries of a server's first start may take (about two
/// seconds a component; a passed one is remembered by the database).
const PROVING_LIMIT: Duration = Duration::from_secs(300);

impl Server {
    /// Waits until every component of the directory serves or was refused:
    /// a component new to the database proves its claims first (its
    /// canary). Refusals are printed, not fatal: the run of a refused
    /// method fails by itself.
    fn wait_proved(&mut self) -> anyhow::Result<()> {
        let api = Api::new(&self.base_url())?;
        let started = Instant::now();
        let mut said = false;
        loop {
            let loaded = api.get("/lab/strategies")?;
            let awaiting = loaded["awaiting"].as_array().map_or(0, Vec::len);
            if awaiting == 0 {
                for rejected in loaded["rejected"].as_array().into_iter().flatten() {
                    println!(
                        "note: the server refused {}: {}",
                        rejected["file"], rejected["reason"]
                    );
                }
                if said {
                    println!(
                        "every component is proved ({:.1} s)",
                        started.elapsed().as_secs_f64()
                    );
                }
                return Ok(());
            }
            if !said {
                println!(
                    "the server is proving {awaiting} components new to its database (their canaries)…"
                );
                said = true;
            }
            if let Some(status) = self.process.exited()? {
                bail!("the server exited while proving its components, with {status}");
            }
            if started.elapsed() > PROVING_LIMIT {
                bail!("{awaiting} components were still unproved after {PROVING_LIMIT:?}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The consumers stop first; the serving process, launched, when dropped.
impl Drop for Server {
    fn drop(&mut self) {
        for (_, consumer) in &mut self.consumers {
            terminate(consumer);
        }
    }
}

/// `couponlab consume <role>` of the server `serve` launched, with its
/// environment, once it says it consumes.
fn spawn_consumer(serve: &Launch, role: &str) -> anyhow::Result<Child> {
    let mut child = Command::new(&serve.binary)
        .args(["consume", role])
        .envs(serve.env.iter().map(|(key, value)| (key, value)))
        // Warnings as the server's, and the line that says it consumes.
        .env("RUST_LOG", "warn,couponlab=info")
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("cannot start couponlab consume {role}"))?;
    let stdout = child.stdout.take().context("no stdout")?;
    let consuming = process_log::watch(stdout, CONSUMING, false);
    let started = Instant::now();
    loop {
        match consuming.recv_timeout(Duration::from_millis(50)) {
            Ok(()) => return Ok(child),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let status = child.wait()?;
                bail!("couponlab consume {role} exited at start with {status}");
            }
            Err(mpsc::RecvTimeoutError::Timeout) if started.elapsed() > START_LIMIT => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("couponlab consume {role} did not start consuming within {START_LIMIT:?}");
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
}

/// The scratch database's URL, named after the migrations it holds.
pub fn database_url() -> anyhow::Result<String> {
    let mut files: Vec<_> = std::fs::read_dir(root().join("migrations"))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "sql"))
        .collect();
    files.sort();
    // FNV-1a: stable across builds, which std's hasher does not promise.
    let mut hash: u32 = 0x811c_9dc5;
    for file in files {
        for byte in std::fs::read(&file)? {
            hash = (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193);
        }
    }
    Ok(format!(
        "mysql://root@127.0.0.1:3306/couponlab_loadtest_{hash:08x}"
    ))
}

/// Need the release binary and the components, so they run by hand:
/// `cargo test --release -p couponlab-loadtest -- --ignored server::`
/// (with COUPONLAB_STRATEGY_DIR set to the components, if not in
/// strategies/dist). They use the `--serve` database and Redis db 10,
/// emptied at start.
#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

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
