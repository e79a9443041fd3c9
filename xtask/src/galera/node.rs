//! One Galera node: its ports, its files under `target/galera/node<n>/`,
//! its `my.cnf`, and its `mariadbd` process, started, found and stopped.

use std::fs::OpenOptions;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::target_dir;

/// A node's place in the cluster's history: the cluster's uuid and the
/// last write set it committed.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct Position {
    pub uuid: String,
    pub seqno: i64,
}

pub const MARIADBD: &str = "/usr/sbin/mariadbd";
/// Debian's galera-4 puts the provider here.
pub const PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";

pub const NODES: [Node; 3] = [Node(1), Node(2), Node(3)];

/// A node, by its number (1-3), from which its ports and files follow.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Node(pub u16);

impl Node {
    pub fn name(self) -> String {
        format!("node{}", self.0)
    }

    /// 3307-3309: the machine's own MariaDB keeps 3306.
    pub fn port(self) -> u16 {
        3306 + self.0
    }

    /// Galera's ports — group communication (4567), IST (4568) and state
    /// transfer (4444) — moved per node, as three nodes share one address:
    /// 4571-4573, 4581-4583 and 4451-4453.
    fn group_port(self) -> u16 {
        4570 + self.0
    }

    fn ist_port(self) -> u16 {
        4580 + self.0
    }

    fn sst_port(self) -> u16 {
        4450 + self.0
    }

    pub fn dir(self) -> PathBuf {
        target_dir().join("galera").join(self.name())
    }

    fn config(self) -> PathBuf {
        self.dir().join("my.cnf")
    }

    /// First on mariadbd's command line, so that the machine's
    /// `/etc/mysql/my.cnf` (port 3306, its data directory) is not read.
    pub fn defaults_file_arg(self) -> String {
        format!("--defaults-file={}", self.config().display())
    }

    pub fn error_log(self) -> PathBuf {
        self.dir().join("error.log")
    }

    pub fn saved_state(self) -> PathBuf {
        self.dir().join("grastate.dat")
    }

    fn pid_file(self) -> PathBuf {
        self.dir().join("mariadbd.pid")
    }

    /// Creates the node's directory and (re)writes its `my.cnf`.
    pub fn write_config(self) -> anyhow::Result<()> {
        std::fs::create_dir_all(self.dir())?;
        std::fs::write(self.config(), self.config_text())?;
        Ok(())
    }

    fn config_text(self) -> String {
        let dir = self.dir();
        let dir = dir.display();
        let members = NODES
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.group_port()))
            .collect::<Vec<_>>()
            .join(",");
        format!(
            "# Written by `cargo xtask galera up`, on every up.
[mysqld]
{user}datadir = {dir}
socket = {dir}/mariadbd.sock
pid-file = {dir}/mariadbd.pid
log-error = {dir}/error.log
bind-address = 127.0.0.1
port = {port}
skip-name-resolve
# A lab's host holds dozens of connections (its own pool, the components',
# their named locks'), and `--engines galera-1` puts three on one node.
max_connections = 1000
character-set-server = utf8mb4
collation-server = utf8mb4_general_ci
default_storage_engine = InnoDB
binlog_format = ROW
# Galera replicates row events; interleaved auto-increment locks keep an
# insert from holding a table lock the other nodes never see.
innodb_autoinc_lock_mode = 2
# A commit is durable once the other nodes hold its write set, so each node
# flushes its redo log once a second, as Galera's documentation advises.
innodb_flush_log_at_trx_commit = 2
wsrep_on = ON
wsrep_provider = {PROVIDER}
wsrep_cluster_name = couponlab
wsrep_cluster_address = gcomm://{members}
wsrep_node_name = {name}
wsrep_node_address = 127.0.0.1:{group}
wsrep_node_incoming_address = 127.0.0.1:{port}
wsrep_sst_method = rsync
wsrep_sst_receive_address = 127.0.0.1:{sst}
wsrep_provider_options = \"gmcast.listen_addr=tcp://127.0.0.1:{group};ist.recv_addr=127.0.0.1:{ist};gcache.size=64M\"
",
            user = node_user().map_or(String::new(), |user| format!("user = {user}\n")),
            port = self.port(),
            name = self.name(),
            group = self.group_port(),
            sst = self.sst_port(),
            ist = self.ist_port(),
        )
    }

    /// A new data directory, root with an empty password (from localhost,
    /// 127.0.0.1 and ::1), for the node that founds the cluster: the
    /// joiners receive theirs from a donor.
    pub fn initialise(self) -> anyhow::Result<()> {
        if self.dir().join("mysql").exists() {
            return Ok(());
        }
        let output = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.dir().display()))
            .args(node_user().map(|user| format!("--user={user}")))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .output()
            .context("cannot run mariadb-install-db")?;
        if !output.status.success() {
            bail!(
                "mariadb-install-db for {} failed: {}",
                self.name(),
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }

    /// Starts the node's `mariadbd` in a process group of its own (a
    /// Ctrl-C meant for this command leaves it running), with what it
    /// prints before its error log opens appended to that log; from
    /// `position` when recovery found one.
    pub fn start(self, position: Option<&Position>, args: &[&str]) -> anyhow::Result<Child> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.error_log())?;
        if let Some(user) = node_user() {
            // Files root wrote here (the config, the logs) become the node's.
            crate::run(
                Command::new("chown")
                    .arg("-R")
                    .arg(format!("{user}:{user}"))
                    .arg(self.dir()),
            )?;
        }
        let mut command = Command::new(MARIADBD);
        command.arg(self.defaults_file_arg()).args(args);
        if let Some(position) = position {
            command.arg(format!(
                "--wsrep-start-position={}:{}",
                position.uuid, position.seqno
            ));
        }
        command
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {MARIADBD} for {}", self.name()))
    }

    /// The node's `mariadbd`, by its pid file, if it runs: the pid is this
    /// node's only while that process was started with its `my.cnf` (an
    /// exited one's pid may be reused, and its zombie has no command line).
    pub fn pid(self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.pid_file())
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let command_line = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
        String::from_utf8_lossy(&command_line)
            .contains(&self.defaults_file_arg())
            .then_some(pid)
    }

    /// SIGTERM, then SIGKILL if it has not stopped within `limit`.
    pub fn stop(self, limit: Duration) -> anyhow::Result<()> {
        let Some(pid) = self.pid() else {
            return Ok(());
        };
        signal("TERM", pid)?;
        if !self.wait_for_exit(limit) {
            println!("{} did not stop within {limit:?}; killing it", self.name());
            signal("KILL", pid)?;
            self.wait_for_exit(Duration::from_secs(10));
        }
        Ok(())
    }

    fn wait_for_exit(self, limit: Duration) -> bool {
        let since = Instant::now();
        while self.pid().is_some() {
            if since.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        true
    }
}

/// The user the nodes run as: run by root, `mysql`, as the machine's
/// MariaDB (rsync's daemon, which receives a joiner's state, drops root for
/// `nobody`, which could not write a root-owned data directory); else the
/// user running this.
fn node_user() -> Option<&'static str> {
    let root = std::fs::metadata("/proc/self").is_ok_and(|process| process.uid() == 0);
    root.then_some("mysql")
}

fn signal(name: &str, pid: u32) -> anyhow::Result<()> {
    crate::run(
        Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string()),
    )
}
