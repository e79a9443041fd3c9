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

mod restart;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use couponlab_links::Links;

use crate::api::Api;
use crate::launcher::{self, Bind, Launch, Launched, terminate};
use crate::paths::{release_binary, root, strategy_dir};
use crate::process_log;

pub const REDIS_URL: &str = "redis://127.0.0.1:6379/10";
/// The machine's Redis, without a database.
pub const REDIS_SERVER: &str = "redis://127.0.0.1:6379";
/// The machine's RabbitMQ and NATS, as the server's defaults name them.
const RABBITMQ_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const NATS_URL: &str = "nats://127.0.0.1:4222";

/// How long a started process may take to be ready: a server compiles
/// every component before it answers, the Python and JavaScript ones taking
/// seconds each on a busy machine.
const START_LIMIT: Duration = Duration::from_secs(300);

/// The consumer roles `couponlab consume` runs alone (README "Processes").
const CONSUMERS: [&str; 4] = ["pubsub", "stream", "write-behind", "brokers"];

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
    /// Its NATS, when not the machine's ([`NATS_URL`]).
    pub nats_url: Option<&'a str>,
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

impl Server {
    /// Starts the server as `serve` says, on a free port, and empties the
    /// lab's data.
    pub fn start_with(serve: Serve<'_>) -> anyhow::Result<Server> {
        let database_url = match serve.database_url {
            Some(url) => url.to_string(),
            None => database_url()?,
        };
        let redis_url = serve.redis_url.unwrap_or(REDIS_URL);
        empty_unless_held(redis_url)?;
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
        // The brokers go through their links too: `amqp-cut`, `nats-cut`.
        // A NATS of the run's own replaces the machine's; otherwise the
        // server's own setting stands.
        let nats_url = serve.nats_url.unwrap_or(NATS_URL);
        match serve.links {
            Some(links) => {
                env.push(("RABBITMQ_URL", links.through(RABBITMQ_URL)?));
                env.push(("NATS_URL", links.through(nats_url)?));
            }
            None if serve.nats_url.is_some() => env.push(("NATS_URL", nats_url.to_string())),
            None => {}
        }
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
                let files: Vec<&str> = loaded["awaiting"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(serde_json::Value::as_str)
                    .collect();
                bail!(
                    "{awaiting} components were still unproved after {PROVING_LIMIT:?}: {}\n\
                     the server's last lines about them ({}):\n{}",
                    files.join(", "),
                    launcher::log_path().display(),
                    last_lines_naming(&files)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The key a live lab holds its Redis database by, renewed every few
/// seconds and lapsing 15 s after its last host stopped
/// (`host/src/redis_claim.rs`).
const LAB_CLAIM_KEY: &str = "couponlab:lab";

/// Empties the Redis database of a lab the runner serves unless a live lab
/// holds it (another host of this one, or another lab that the server will
/// refuse to share it with). Others use the database between runs (the
/// lab's tests take each of 1–14 in turn, 10 and 11 among them): what they
/// leave there — a stream with a
/// poisoned entry, a gate's counter — would be read by this lab's
/// consumers and canaries as its own.
fn empty_unless_held(redis_url: &str) -> anyhow::Result<()> {
    let mut redis = redis::Client::open(redis_url)?
        .get_connection()
        .with_context(|| format!("Redis at {redis_url} does not answer"))?;
    let held: bool = redis::cmd("EXISTS").arg(LAB_CLAIM_KEY).query(&mut redis)?;
    if !held {
        redis::cmd("FLUSHDB").exec(&mut redis)?;
    }
    Ok(())
}

/// The server log's last lines that name one of `files` (a canary without
/// a verdict says why, and is tried again every two seconds).
fn last_lines_naming(files: &[&str]) -> String {
    const SHOWN: usize = 6;
    let log = std::fs::read_to_string(launcher::log_path()).unwrap_or_default();
    let naming: Vec<&str> = log
        .lines()
        .filter(|line| files.iter().any(|file| line.contains(file)))
        .collect();
    naming[naming.len().saturating_sub(SHOWN)..].join("\n")
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

/// The scratch database's URL on the machine's MariaDB, named after the
/// migrations it holds.
pub fn database_url() -> anyhow::Result<String> {
    Ok(format!("mysql://root@127.0.0.1:3306/{}", database_name()?))
}

/// The scratch database on the machine's PostgreSQL, named apart from
/// MariaDB's: a lab's broker queue and stream are named after its
/// database, and two labs served side by side must not share them.
pub fn postgres_database_url() -> anyhow::Result<String> {
    Ok(format!(
        "postgres://postgres@127.0.0.1:5432/{}_pg",
        database_name()?
    ))
}

/// The scratch database's name, after the migrations of every engine: a
/// new migration gives a new database, which the served lab migrates.
fn database_name() -> anyhow::Result<String> {
    let mut files = Vec::new();
    for engine in ["mysql", "postgres"] {
        let dir = root().join("migrations").join(engine);
        files.extend(
            std::fs::read_dir(dir)?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|path| path.extension().is_some_and(|ext| ext == "sql")),
        );
    }
    files.sort();
    // FNV-1a: stable across builds, which std's hasher does not promise.
    let mut hash: u32 = 0x811c_9dc5;
    for file in files {
        for byte in std::fs::read(&file)? {
            hash = (hash ^ u32::from(byte)).wrapping_mul(0x0100_0193);
        }
    }
    Ok(format!("couponlab_loadtest_{hash:08x}"))
}
