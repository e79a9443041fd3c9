//! `cargo xtask galera up|down|status`: a MariaDB Galera cluster of three
//! nodes on this machine, from its own `mariadbd` and Debian's `galera-4`,
//! on 127.0.0.1:3307-3309 (root, empty password, as the machine's MariaDB
//! on 3306). Each node keeps its data, `my.cnf`, socket, pid file and
//! `error.log` in `target/galera/node<n>/`. `up` bootstraps one node as a
//! new primary component — the first of a new cluster, or after a stop the
//! one `recover` chooses — then joins the others (rsync state transfer, or
//! IST from a donor's gcache), and returns once all three are `Synced`; a
//! cluster already up is left as it is. `down` stops the nodes and keeps
//! their data.

mod node;
mod recover;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::packages::{ensure_debian, install_debian};
use crate::target_dir;
use node::{MARIADBD, NODES, Node, PROVIDER, Position};

/// How long a node may take to start, receive the cluster's state and
/// report `Synced`.
const SYNC_LIMIT: Duration = Duration::from_secs(120);
/// How long a node may take to stop after SIGTERM before it is killed.
const STOP_LIMIT: Duration = Duration::from_secs(60);

pub fn main(args: &[String]) -> anyhow::Result<()> {
    crate::up_down_status("galera", args, up, down, print_status)
}

/// What a running node says of itself and its cluster.
struct Wsrep {
    /// `wsrep_local_state_comment`: Joining, Donor/Desynced, Synced...
    state: String,
    cluster_size: u32,
    /// Whether its component has quorum, and so takes statements.
    primary: bool,
    last_committed: i64,
}

impl Wsrep {
    fn synced(&self) -> bool {
        self.primary && self.state == "Synced"
    }
}

/// Starts the nodes that are down and brings the cluster to three `Synced`
/// nodes; then prints its status.
pub fn up() -> anyhow::Result<()> {
    if !NODES.into_iter().all(in_a_synced_cluster_of_three) {
        ensure_installed()?;
        start_missing_nodes()?;
        for node in NODES {
            wait_until(
                node,
                None,
                "Synced in a cluster of 3",
                in_a_synced_cluster_of_three,
            )?;
        }
    }
    print_status();
    Ok(())
}

fn synced(node: Node) -> bool {
    wsrep(node).is_some_and(|wsrep| wsrep.synced())
}

fn in_a_synced_cluster_of_three(node: Node) -> bool {
    wsrep(node).is_some_and(|wsrep| wsrep.synced() && wsrep.cluster_size == 3)
}

fn ensure_installed() -> anyhow::Result<()> {
    if !Path::new(MARIADBD).exists() {
        bail!(
            "{MARIADBD} is not installed; the Galera nodes run the machine's MariaDB (apt-get install mariadb-server)"
        );
    }
    if !Path::new(PROVIDER).exists() {
        install_debian("galera-4")?;
    }
    // Joiners receive a donor's data by rsync; the nodes are asked their
    // state by the client.
    ensure_debian("rsync", "rsync")?;
    ensure_debian("mariadb", "mariadb-client")?;
    Ok(())
}

fn start_missing_nodes() -> anyhow::Result<()> {
    for node in NODES {
        if node.pid().is_none() && port_answers(node.port()) {
            bail!(
                "127.0.0.1:{} answers but not from {}; stop what listens there",
                node.port(),
                node.name()
            );
        }
        node.write_config()?;
    }
    let running: Vec<Node> = NODES
        .into_iter()
        .filter(|node| node.pid().is_some())
        .collect();
    for &node in &running {
        wait_until(node, None, "answering", |node| wsrep(node).is_some())?;
    }
    let has_primary = running
        .iter()
        .any(|&node| wsrep(node).is_some_and(|wsrep| wsrep.primary));
    // Of equals, the lowest numbered, so the choice is the same every time.
    let most_advanced = running.iter().copied().max_by_key(|&node| {
        let last_committed = wsrep(node).map(|wsrep| wsrep.last_committed);
        (last_committed, std::cmp::Reverse(node.0))
    });
    let recovered = if has_primary {
        Vec::new()
    } else if let Some(node) = most_advanced {
        make_primary(node)?;
        Vec::new()
    } else {
        bootstrap()?
    };
    // One at a time: an rsync donor serves one joiner and blocks meanwhile.
    for node in NODES {
        if node.pid().is_some() {
            continue;
        }
        println!("{}: joining", node.name());
        let position = recovered.iter().find(|(n, _)| *n == node).map(|(_, p)| p);
        let mut child = node.start(position, &[])?;
        wait_until(node, Some(&mut child), "Synced", synced)?;
    }
    Ok(())
}

/// Nodes left without quorum (two of three stopped uncleanly) keep running
/// but refuse every statement until one is told to form a primary
/// component on its own; the others then join it.
fn make_primary(node: Node) -> anyhow::Result<()> {
    println!(
        "{} runs outside a primary component; making it one (pc.bootstrap=YES)",
        node.name()
    );
    sql(node, "SET GLOBAL wsrep_provider_options='pc.bootstrap=YES'")
        .context("pc.bootstrap=YES failed")?;
    wait_until(node, None, "Synced", synced)
}

/// Starts a new primary component from the node `recover` chooses, or
/// from a new first node; returns the positions recovered for the others.
fn bootstrap() -> anyhow::Result<Vec<(Node, Position)>> {
    let (node, recovered) = match recover::plan()? {
        Some(plan) => (plan.bootstrap, plan.recovered),
        None => {
            NODES[0].initialise()?;
            (NODES[0], Vec::new())
        }
    };
    println!("{}: bootstrapping the cluster", node.name());
    let position = recovered.iter().find(|(n, _)| *n == node).map(|(_, p)| p);
    let mut child = node.start(position, &["--wsrep-new-cluster"])?;
    wait_until(node, Some(&mut child), "Synced", synced)?;
    Ok(recovered)
}

/// Waits until `done(node)`; fails as soon as `started` (the node's
/// process, when this command started it) exits, and after
/// [`SYNC_LIMIT`], naming the node and its log's last lines.
fn wait_until(
    node: Node,
    mut started: Option<&mut Child>,
    what: &str,
    done: impl Fn(Node) -> bool,
) -> anyhow::Result<()> {
    let since = Instant::now();
    while !done(node) {
        if let Some(child) = started.as_deref_mut()
            && let Some(status) = child.try_wait()?
        {
            bail!(
                "{} (127.0.0.1:{}) exited with {status}{}",
                node.name(),
                node.port(),
                log_tail(node)
            );
        }
        if since.elapsed() > SYNC_LIMIT {
            bail!(
                "{} (127.0.0.1:{}) is not {what} after {SYNC_LIMIT:?} ({}){}",
                node.name(),
                node.port(),
                state(node),
                log_tail(node)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    Ok(())
}

fn log_tail(node: Node) -> String {
    let log = std::fs::read_to_string(node.error_log()).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    format!(
        "; the end of {}:\n{}",
        node.error_log().display(),
        lines[lines.len().saturating_sub(15)..].join("\n")
    )
}

/// Stops the nodes, the first last, so that a clean stop leaves it marked
/// safe to bootstrap from.
pub fn down() -> anyhow::Result<()> {
    for node in NODES.into_iter().rev() {
        node.stop(STOP_LIMIT)?;
    }
    println!(
        "the Galera cluster is down; its data stays in {} (remove it to start afresh)",
        target_dir().join("galera").display()
    );
    Ok(())
}

fn print_status() {
    for node in NODES {
        let pid = node.pid().map_or("-".to_string(), |pid| pid.to_string());
        println!(
            "{}  127.0.0.1:{}  pid {pid:<8} {}",
            node.name(),
            node.port(),
            state(node)
        );
    }
}

fn state(node: Node) -> String {
    match wsrep(node) {
        Some(wsrep) if wsrep.primary => {
            format!("{}, cluster size {}", wsrep.state, wsrep.cluster_size)
        }
        Some(wsrep) => format!("{}, non-primary", wsrep.state),
        None if node.pid().is_some() => "not answering".to_string(),
        None => "down".to_string(),
    }
}

fn wsrep(node: Node) -> Option<Wsrep> {
    let status = sql(node, "SHOW GLOBAL STATUS LIKE 'wsrep%'").ok()?;
    let value = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix('\t'))
    };
    Some(Wsrep {
        state: value("wsrep_local_state_comment")?.to_string(),
        cluster_size: value("wsrep_cluster_size")?.parse().ok()?,
        primary: value("wsrep_cluster_status")? == "Primary",
        last_committed: value("wsrep_last_committed")?.parse().ok()?,
    })
}

/// Runs `statement` on `node` as root over TCP, as the lab connects.
fn sql(node: Node, statement: &str) -> anyhow::Result<String> {
    let output = Command::new("mariadb")
        .args(["--no-defaults", "--protocol=TCP", "-h", "127.0.0.1"])
        .arg(format!("--port={}", node.port()))
        .args(["-u", "root", "--connect-timeout=2", "-N", "-B", "-e"])
        .arg(statement)
        .stdin(Stdio::null())
        .output()
        .context("cannot run mariadb")?;
    if !output.status.success() {
        bail!("{}", String::from_utf8_lossy(&output.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn port_answers(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    )
    .is_ok()
}
