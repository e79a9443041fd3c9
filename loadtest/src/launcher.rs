//! The one way the runner starts a server: a binary of the release build
//! (or another build of it) on a free port of 127.0.0.1, with the
//! environment it is given and its output in the run's log; started again
//! on the same port after a kill, and stopped as a supervisor would
//! (SIGTERM, then reaped) when dropped. The lab (`server.rs`, for the load
//! runs, idle, soak, the API check and the bench) and the bench's native
//! twin start through it.

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::paths::root;

/// What to start.
pub struct Launch {
    pub binary: PathBuf,
    pub args: Vec<&'static str>,
    pub env: Vec<(&'static str, String)>,
    /// How the process is told its address.
    pub bind: Bind,
}

/// Where a server reads the address it binds.
pub enum Bind {
    /// An environment variable (the lab's `COUPONLAB_BIND`).
    Env(&'static str),
    /// A flag (the native twin's `--bind`).
    Flag(&'static str),
}

/// A started server.
pub struct Launched {
    launch: Launch,
    port: u16,
    child: Child,
}

impl Launched {
    /// Starts `launch` on a free port.
    pub fn start(launch: Launch) -> anyhow::Result<Launched> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let child = spawn(&launch, port)?;
        Ok(Launched {
            launch,
            port,
            child,
        })
    }

    pub fn launch(&self) -> &Launch {
        &self.launch
    }

    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process has exited, and how.
    pub fn exited(&mut self) -> anyhow::Result<Option<ExitStatus>> {
        Ok(self.child.try_wait()?)
    }

    /// SIGKILL, reaped; the killed process's id.
    pub fn kill(&mut self) -> u32 {
        kill(&mut self.child)
    }

    /// The same process again, on the same port.
    pub fn start_again(&mut self) -> anyhow::Result<()> {
        self.child = spawn(&self.launch, self.port)?;
        Ok(())
    }

    /// Waits until something listens on the port, `limit` at most: for a
    /// server with no API to ask (the native twin).
    pub fn wait_listening(&mut self, limit: Duration) -> anyhow::Result<()> {
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if let Some(status) = self.exited()? {
                bail!("{} exited at start with {status}", self.name());
            }
            if started.elapsed() > limit {
                bail!("{} did not listen within {limit:?}", self.name());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn name(&self) -> String {
        self.launch.binary.display().to_string()
    }
}

impl Drop for Launched {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

/// Stops a server process as a supervisor would (SIGTERM: it finishes what
/// it holds) and waits for it.
pub fn terminate(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// SIGKILL, reaped; the process's id.
pub fn kill(child: &mut Child) -> u32 {
    let pid = child.id();
    let _ = child.kill();
    let _ = child.wait();
    pid
}

fn spawn(launch: &Launch, port: u16) -> anyhow::Result<Child> {
    let address = format!("127.0.0.1:{port}");
    let mut command = Command::new(&launch.binary);
    command.args(&launch.args);
    match launch.bind {
        Bind::Env(key) => command.env(key, &address),
        Bind::Flag(flag) => command.arg(flag).arg(&address),
    };
    command
        .envs(launch.env.iter().map(|(key, value)| (key, value)))
        .env("RUST_LOG", "warn")
        .stdout(log()?)
        .spawn()
        .with_context(|| format!("cannot start {}", launch.binary.display()))
}

/// Where the servers log, each process of a run after the one before (a
/// restart appends): what a fault did on the server's side.
pub fn log_path() -> PathBuf {
    root().join("target").join("loadtest-server.log")
}

/// The log, appended to by one more process; a run's log starts empty.
fn log() -> anyhow::Result<Stdio> {
    static EMPTIED: Once = Once::new();
    let path = log_path();
    std::fs::create_dir_all(path.parent().expect("target/"))?;
    EMPTIED.call_once(|| drop(std::fs::File::create(&path)));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(Stdio::from(file))
}
