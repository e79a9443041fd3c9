//! A Redis server of a test's own, from Debian's `redis-server`, on a free
//! port below 55000 (a cluster node's bus port is its port + 10000), with
//! nothing kept on disk: a test that stops, restarts or blocks a Redis does
//! it to this one, never to the Redis every other test shares.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A free port whose cluster bus port is free too.
pub fn node_port() -> u16 {
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// `redis-cli -p port args...`, its standard output.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs (Debian's redis-tools)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// One `redis-server` process, killed when dropped (a failed test too).
pub struct RedisServer {
    pub port: u16,
    /// Arguments beyond the port and the no-persistence ones (a cluster
    /// node's).
    extra: Vec<String>,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// A plain server, answering.
    pub fn start() -> RedisServer {
        Self::start_with(&[], None)
    }

    /// A server with `extra` arguments, working in `dir` (a new temporary
    /// directory when `None`); waits until it answers PING.
    pub fn start_with(extra: &[&str], dir: Option<PathBuf>) -> RedisServer {
        let port = node_port();
        let dir = dir.unwrap_or_else(|| {
            std::env::temp_dir().join(format!("couponlab-redis-{}-{port}", std::process::id()))
        });
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = RedisServer {
            port,
            extra: extra.iter().map(|arg| arg.to_string()).collect(),
            dir,
            child: None,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            // Each node of a cluster sharing the directory keeps its own.
            .args([
                "--cluster-config-file",
                &format!("nodes-{}.conf", self.port),
            ])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server runs (Debian's redis-server)");
        self.child = Some(child);
    }

    /// Until it answers PING (or panics after 20 s).
    pub fn until_answering(&self) {
        let started = Instant::now();
        while cli(self.port, &["ping"]).trim() != "PONG" {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "redis-server on {} never answered",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self, db: u8) -> String {
        format!("redis://127.0.0.1:{}/{db}", self.port)
    }

    /// Ends it the one way that also ends a script Redis cannot kill.
    pub fn shutdown_nosave(&mut self) {
        cli(self.port, &["shutdown", "nosave"]);
        if let Some(mut child) = self.child.take() {
            let started = Instant::now();
            while child.try_wait().unwrap().is_none() {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "redis-server ignored SHUTDOWN NOSAVE"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().ok();
            child.wait().ok();
        }
    }

    /// Starts it again on the same port, empty (users, scripts and keys
    /// gone; a cluster node keeps its configuration file), and waits until
    /// it answers; returns when it first did.
    pub fn start_again(&mut self) -> Instant {
        assert!(self.child.is_none(), "the server still runs");
        self.spawn();
        self.until_answering();
        Instant::now()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}
