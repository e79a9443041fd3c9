//! A NATS server of the run's own, for `--fault nats-restart@S`: killed
//! (SIGKILL) and started again on the same port and the same JetStream
//! store, which the NATS every other user of the machine shares must never
//! be. Debian's `nats-server` (xtask installs it) on free ports, its store
//! under the system's temporary directory; killed and the store removed
//! when dropped.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

/// How long a started server may take to answer its health check, which
/// waits for JetStream to have recovered its streams from the store.
const START_LIMIT: Duration = Duration::from_secs(30);

pub struct OwnNats {
    port: u16,
    /// The monitoring port, for `/healthz`.
    monitor_port: u16,
    store: PathBuf,
    child: Option<Child>,
    health: reqwest::blocking::Client,
}

impl OwnNats {
    /// Starts it and waits until JetStream is ready.
    pub fn start() -> anyhow::Result<OwnNats> {
        let free_port = || -> anyhow::Result<u16> {
            Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
        };
        let port = free_port()?;
        let mut nats = OwnNats {
            port,
            monitor_port: free_port()?,
            store: std::env::temp_dir().join(format!("couponlab-loadtest-nats-{port}")),
            child: None,
            health: reqwest::blocking::Client::builder()
                .timeout(Duration::from_secs(2))
                .build()?,
        };
        nats.spawn()?;
        Ok(nats)
    }

    /// `host:port`, which the links forward to.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn url(&self) -> String {
        format!("nats://{}", self.address())
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let child = Command::new("nats-server")
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .args(["-m", &self.monitor_port.to_string(), "-js", "-sd"])
            .arg(&self.store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start nats-server")?;
        self.child = Some(child);
        let health = format!("http://127.0.0.1:{}/healthz", self.monitor_port);
        let started = Instant::now();
        while !self
            .health
            .get(&health)
            .send()
            .is_ok_and(|answer| answer.status().is_success())
        {
            if started.elapsed() > START_LIMIT {
                bail!("nats-server on port {} was not healthy in time", self.port);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    }

    /// SIGKILL, then a new server on the same port and store: what
    /// JetStream had written to its store comes back. How long NATS did
    /// not answer.
    pub fn restart(&mut self) -> anyhow::Result<Duration> {
        let stopped = Instant::now();
        if let Some(mut child) = self.child.take() {
            child.kill().context("cannot kill nats-server")?;
            child.wait().context("nats-server did not stop")?;
        }
        self.spawn()?;
        Ok(stopped.elapsed())
    }
}

impl Drop for OwnNats {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
        std::fs::remove_dir_all(&self.store).ok();
    }
}
