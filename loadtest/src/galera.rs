//! The Galera cluster of `cargo xtask galera up` (127.0.0.1:3307-3309, its
//! nodes' files under `target/galera/node<n>/`) as the load runner uses
//! it: the served hosts of `--engines galera` (one on each node) and
//! `galera-1` (all on the first), the nodes the Galera faults kill and
//! pause, and what each node counted of the transactions the cluster
//! refused over a run.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;

use crate::paths::target_dir;
use crate::server::{self, Serve, Server};

/// How long a restarted node may take to receive the cluster's state and
/// be `Synced` again (a full rsync transfer after a SIGKILL).
const REJOIN_LIMIT: Duration = Duration::from_secs(120);

/// A node of the cluster, by its number (1-3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node(u16);

impl Node {
    pub const ALL: [Node; 3] = [Node(1), Node(2), Node(3)];
    pub const LAST: Node = Node(3);

    /// 3307-3309, as `cargo xtask galera` places them.
    fn port(self) -> u16 {
        3306 + self.0
    }

    pub fn address(self) -> String {
        format!("127.0.0.1:{}", self.port())
    }

    fn dir(self) -> PathBuf {
        target_dir().join("galera").join(format!("node{}", self.0))
    }

    /// The node's `mariadbd`, by its pid file.
    fn pid(self) -> anyhow::Result<u32> {
        let file = self.dir().join("mariadbd.pid");
        let text = std::fs::read_to_string(&file)
            .with_context(|| format!("{} is not running: no {}", self.address(), file.display()))?;
        Ok(text.trim().parse()?)
    }

    pub fn signal(self, name: &str) -> anyhow::Result<()> {
        let pid = self.pid()?;
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status()?;
        if !status.success() {
            bail!("kill -{name} {pid} ({}) failed", self.address());
        }
        Ok(())
    }

    /// SIGKILL, then the node started again as `cargo xtask galera up`
    /// starts a joiner; how long until it was `Synced` in a cluster of
    /// three again.
    pub fn kill_and_rejoin(self) -> anyhow::Result<Duration> {
        let pid = self.pid()?;
        self.signal("KILL")?;
        let killed = Instant::now();
        while !exited(pid) {
            if killed.elapsed() > REJOIN_LIMIT {
                bail!("{} did not die after SIGKILL", self.address());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut node = self.start()?;
        while !self.synced_in_three() {
            if killed.elapsed() > REJOIN_LIMIT {
                bail!(
                    "{} was not Synced in a cluster of 3 within {REJOIN_LIMIT:?} of its restart",
                    self.address()
                );
            }
            // A start that found a port of the group still held (the
            // kernel lets go of a dead process's sockets on its own time)
            // ends at once: started again until one stays.
            if node.try_wait()?.is_some() {
                node = self.start()?;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(killed.elapsed())
    }

    /// The node's `mariadbd`, as `cargo xtask galera up` starts a joiner:
    /// its own `my.cnf`, its output to its error log, a process group of
    /// its own.
    fn start(self) -> anyhow::Result<std::process::Child> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir().join("error.log"))?;
        Command::new("/usr/sbin/mariadbd")
            .arg(format!(
                "--defaults-file={}",
                self.dir().join("my.cnf").display()
            ))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {} again", self.address()))
    }

    /// The node's global status variables `names`, name → value; none
    /// when it does not answer within 2 s.
    fn status(self, names: &[&str]) -> BTreeMap<String, String> {
        let quoted: Vec<String> = names.iter().map(|name| format!("'{name}'")).collect();
        let output = Command::new("mariadb")
            .args(["--no-defaults", "--protocol=TCP", "-h", "127.0.0.1"])
            .arg(format!("--port={}", self.port()))
            .args(["-u", "root", "--connect-timeout=2", "-N", "-B", "-e"])
            .arg(format!(
                "SHOW GLOBAL STATUS WHERE Variable_name IN ({})",
                quoted.join(", ")
            ))
            .stdin(Stdio::null())
            .output();
        let Ok(output) = output else {
            return BTreeMap::new();
        };
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.split_once('\t'))
            .map(|(name, value)| (name.to_string(), value.to_string()))
            .collect()
    }

    /// Whether the node is `Synced` in a primary component of three.
    fn synced_in_three(self) -> bool {
        let status = self.status(&[
            "wsrep_cluster_size",
            "wsrep_local_state_comment",
            "wsrep_cluster_status",
        ]);
        [
            ("wsrep_cluster_size", "3"),
            ("wsrep_local_state_comment", "Synced"),
            ("wsrep_cluster_status", "Primary"),
        ]
        .iter()
        .all(|(name, value)| status.get(*name).is_some_and(|said| said == value))
    }

    /// The node's conflict counters since it started; none when it does
    /// not answer.
    fn conflicts(self) -> Option<Conflicts> {
        let status = self.status(&[CERT_FAILURES, BF_ABORTS]);
        let number = |name: &str| status.get(name)?.parse().ok();
        Some(Conflicts {
            cert_failures: number(CERT_FAILURES)?,
            bf_aborts: number(BF_ABORTS)?,
        })
    }
}

/// Whether process `pid` has let go of everything it held, its sockets
/// included: gone, or a zombie (`Z`) or dead (`X`) by the state its
/// `/proc/<pid>/stat` gives after the command's closing parenthesis. Its
/// command line empties earlier, while it still holds its ports.
fn exited(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return true;
    };
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next())
        .is_some_and(|state| matches!(state, 'Z' | 'X'))
}

const CERT_FAILURES: &str = "wsrep_local_cert_failures";
const BF_ABORTS: &str = "wsrep_local_bf_aborts";

/// What a node counted of its own transactions the cluster refused: those
/// that failed certification at COMMIT, and those aborted by another
/// node's write set applied over their row locks (brute-force aborts).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Conflicts {
    pub cert_failures: u64,
    pub bf_aborts: u64,
}

/// One node's conflicts over a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeConflicts {
    pub address: String,
    /// Counted over the run; none when the node did not answer at its
    /// start or end.
    pub counted: Option<Conflicts>,
    /// Its counters went back: it restarted during the run (a killed
    /// node), and `counted` is since its restart.
    pub restarted: bool,
}

/// Every node's conflict counters now, in node order.
pub fn conflict_counters() -> Vec<Option<Conflicts>> {
    Node::ALL.into_iter().map(Node::conflicts).collect()
}

/// Each node's conflicts between two readings of [`conflict_counters`].
pub fn conflicts_over(
    before: &[Option<Conflicts>],
    after: &[Option<Conflicts>],
) -> Vec<NodeConflicts> {
    Node::ALL
        .iter()
        .zip(before.iter().zip(after))
        .map(|(node, (before, after))| {
            let (counted, restarted) = match (before, after) {
                (Some(before), Some(after))
                    if after.cert_failures < before.cert_failures
                        || after.bf_aborts < before.bf_aborts =>
                {
                    (Some(*after), true)
                }
                (Some(before), Some(after)) => (
                    Some(Conflicts {
                        cert_failures: after.cert_failures - before.cert_failures,
                        bf_aborts: after.bf_aborts - before.bf_aborts,
                    }),
                    false,
                ),
                _ => (None, false),
            };
            NodeConflicts {
                address: node.address(),
                counted,
                restarted,
            }
        })
        .collect()
}

/// Fails, saying how to start it, unless the cluster is three `Synced`
/// nodes.
pub fn ensure_cluster() -> anyhow::Result<()> {
    for node in Node::ALL {
        if !node.synced_in_three() {
            bail!(
                "the Galera node {} is not Synced in a cluster of 3: start the cluster with `cargo xtask galera up`",
                node.address()
            );
        }
    }
    Ok(())
}

/// The scratch database of `--engines galera` (`spread`: a host on each
/// node) or `galera-1` (every host on the first), on each host's node, the
/// first host's first: named apart, so both run in one report.
pub fn host_database_urls(spread: bool) -> anyhow::Result<Vec<String>> {
    let scratch = server::database_url()?;
    let (_, name) = scratch
        .rsplit_once('/')
        .context("the scratch database's URL names no database")?;
    let name = if spread {
        format!("{name}_galera")
    } else {
        format!("{name}_galera1")
    };
    Ok(Node::ALL
        .into_iter()
        .map(|node| match spread {
            true => node,
            false => Node::ALL[0],
        })
        .map(|node| format!("mysql://root@{}/{name}", node.address()))
        .collect())
}

/// The hosts after the first, each as `serve` says on its own node's URL
/// of `urls`: their canaries find the first host's passes, kept under the
/// cluster's settings, and they serve at once.
pub fn start_more_hosts(urls: &[String], serve: Serve<'_>) -> anyhow::Result<Vec<Server>> {
    urls.iter()
        .skip(1)
        .map(|url| {
            Server::start_with(Serve {
                database_url: Some(url),
                ..serve
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_running_process_has_not_exited_and_one_never_started_has() {
        assert!(!exited(std::process::id()));
        assert!(exited(u32::MAX));
    }

    #[test]
    fn a_nodes_conflicts_are_the_difference_unless_it_restarted() {
        let read = |cert_failures, bf_aborts| {
            Some(Conflicts {
                cert_failures,
                bf_aborts,
            })
        };
        let over = conflicts_over(
            &[read(5, 10), read(2, 2), read(7, 9)],
            &[read(8, 30), None, read(1, 0)],
        );
        assert_eq!(over[0].counted, read(3, 20));
        assert!(!over[0].restarted);
        assert_eq!(over[1].counted, None);
        assert_eq!(over[2].counted, read(1, 0));
        assert!(over[2].restarted, "{over:?}");
        assert_eq!(over[2].address, "127.0.0.1:3309");
    }

    #[test]
    fn spread_hosts_write_to_every_node_and_one_node_hosts_to_the_first() {
        let spread = host_database_urls(true).unwrap();
        let ports: Vec<&str> = spread
            .iter()
            .map(|url| url.split(['@', '/']).nth(3).unwrap())
            .collect();
        assert_eq!(
            ports,
            ["127.0.0.1:3307", "127.0.0.1:3308", "127.0.0.1:3309"]
        );
        let one_node = host_database_urls(false).unwrap();
        assert!(one_node.iter().all(|url| url.contains("127.0.0.1:3307/")));
        assert_ne!(spread[0], one_node[0], "{spread:?} {one_node:?}");
    }
}
