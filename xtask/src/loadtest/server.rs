//! `--serve`: a server of the runner's own, on a free port, with a database
//! (`couponlab_loadtest_<migrations>`) and a Redis database (10) nobody else
//! uses. It is emptied at start and stopped with SIGTERM when the run ends.
//! The database name carries a hash of the migrations, so a checkout with
//! other migrations never meets a schema it cannot migrate.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::http::Api;
use crate::{release_binary, root, run, services, strategies};

pub const REDIS_URL: &str = "redis://127.0.0.1:6379/10";

pub struct Server {
    child: Child,
    port: u16,
}

impl Server {
    /// Starts the server; `build` first builds the components and the
    /// release binary (`cargo xtask test` has just done both).
    pub fn start(build: bool) -> anyhow::Result<Server> {
        services::ensure()?;
        let dist = root().join("strategies").join("dist");
        if build {
            strategies::build_and_install(&dist)?;
            run(
                Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                    .args(["build", "--release", "--package", "couponlab"])
                    .current_dir(root()),
            )?;
        }
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = Command::new(release_binary("couponlab"))
            .arg("serve")
            .env("COUPONLAB_BIND", format!("127.0.0.1:{port}"))
            .env("DATABASE_URL", database_url()?)
            .env("REDIS_URL", REDIS_URL)
            .env("COUPONLAB_STRATEGY_DIR", &dist)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", release_binary("couponlab").display()))?;
        let mut server = Server { child, port };
        let api = Api::new(&server.base_url())?;
        let started = Instant::now();
        while api.get("/lab/strategies").is_err() {
            if let Some(status) = server.child.try_wait()? {
                bail!("the server exited at start with {status}");
            }
            if started.elapsed() > Duration::from_secs(60) {
                bail!("the server did not answer within 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        api.delete_data()?;
        println!(
            "serving on {} (a database of its own, Redis db 10)",
            server.base_url()
        );
        Ok(server)
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        crate::terminate(&mut self.child);
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
