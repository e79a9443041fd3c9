//! A Redis of the run's own, for `--fault redis-restart@S`: a restart
//! empties the whole server, which the Redis every other user of the
//! machine shares must never be. Debian's `redis-server` on a free port
//! (xtask installs it and `redis-cli` for the tasks that start one),
//! keeping nothing on disk (as the lab runs Redis); killed when dropped.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How long a started Redis may take to answer.
const START_LIMIT: Duration = Duration::from_secs(20);

pub struct OwnRedis {
    port: u16,
    child: Option<Child>,
}

impl OwnRedis {
    /// Starts it and waits until it answers.
    pub fn start() -> anyhow::Result<OwnRedis> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut redis = OwnRedis { port, child: None };
        redis.spawn()?;
        Ok(redis)
    }

    /// `host:port`, which the links forward to.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The URL of database `db`.
    pub fn url(&self, db: u8) -> String {
        format!("redis://{}/{db}", self.address())
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .context("cannot start redis-server")?;
        self.child = Some(child);
        let started = Instant::now();
        while self.cli(&["ping"])?.trim() != "PONG" {
            if started.elapsed() > START_LIMIT {
                bail!("redis-server on port {} never answered", self.port);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    fn cli(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .context("cannot run redis-cli")?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// `SHUTDOWN NOSAVE`, then a new server on the same port, empty: users,
    /// scripts, keys and streams gone. How long Redis did not answer.
    pub fn restart(&mut self) -> anyhow::Result<Duration> {
        let stopped = Instant::now();
        self.cli(&["shutdown", "nosave"])?;
        if let Some(mut child) = self.child.take() {
            child.wait().context("redis-server did not stop")?;
        }
        self.spawn()?;
        Ok(stopped.elapsed())
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }
}
