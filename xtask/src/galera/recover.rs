//! Which node a cluster that is wholly down starts from: the one Galera
//! marked `safe_to_bootstrap` when the last node left cleanly, else, after
//! an unclean stop, the most advanced one, whose position `mariadbd
//! --wsrep-recover` reads from InnoDB since `grastate.dat` then says
//! `seqno: -1`.

use std::process::Command;

use anyhow::{Context, bail};

use super::node::{MARIADBD, NODES, Node, Position};

/// The saved state Galera writes into a node's data directory,
/// `grastate.dat`.
#[derive(Debug, PartialEq, Eq)]
pub struct SavedState {
    pub uuid: String,
    /// -1 after an unclean stop: the position is then only in InnoDB.
    pub seqno: i64,
    pub safe_to_bootstrap: bool,
}

/// How a wholly stopped cluster starts again: `bootstrap` first, as a new
/// primary component; each node then given the position recovered for it
/// (`--wsrep-start-position`), so that a joiner catches up by IST from the
/// gcache instead of a whole state transfer, and the bootstrap node
/// continues the old history instead of restarting it at -1.
pub struct Plan {
    pub bootstrap: Node,
    pub recovered: Vec<(Node, Position)>,
}

pub fn parse_saved_state(text: &str) -> Option<SavedState> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .map(str::trim)
    };
    Some(SavedState {
        uuid: field("uuid")?.to_string(),
        seqno: field("seqno")?.parse().ok()?,
        safe_to_bootstrap: field("safe_to_bootstrap") == Some("1"),
    })
}

/// The position `mariadbd --wsrep-recover` logs:
/// `[Note] WSREP: Recovered position: <uuid>:<seqno>`.
pub fn parse_recovered_position(log: &str) -> Option<Position> {
    let position = log
        .lines()
        .rev()
        .find_map(|line| line.split_once("WSREP: Recovered position:"))?
        .1
        .trim();
    let (uuid, seqno) = position.split_once(':')?;
    let seqno: String = seqno
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '-')
        .collect();
    Some(Position {
        uuid: uuid.to_string(),
        seqno: seqno.parse().ok()?,
    })
}

/// The node to bootstrap from: the one Galera called safe, else the most
/// advanced; on a tie the lowest numbered, so the choice is the same every
/// time.
pub fn choose_bootstrap(nodes: &[(Node, i64, bool)]) -> Option<Node> {
    let safe = nodes.iter().find(|(_, _, safe)| *safe);
    safe.or_else(|| {
        nodes
            .iter()
            .min_by_key(|(node, seqno, _)| (std::cmp::Reverse(*seqno), node.0))
    })
    .map(|(node, _, _)| *node)
}

/// `grastate.dat` with `safe_to_bootstrap: 1`: Galera refuses to bootstrap
/// a node without it, lest a node behind the others found a new history.
pub fn mark_safe_to_bootstrap(text: &str) -> String {
    text.lines()
        .map(|line| {
            if line.starts_with("safe_to_bootstrap:") {
                "safe_to_bootstrap: 1".to_string()
            } else {
                line.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The plan for a cluster none of whose nodes runs, or `None` when no node
/// has ever joined one (a new cluster).
pub fn plan() -> anyhow::Result<Option<Plan>> {
    let mut candidates = Vec::new();
    let mut recovered = Vec::new();
    for node in NODES {
        let Ok(text) = std::fs::read_to_string(node.saved_state()) else {
            continue;
        };
        let Some(saved) = parse_saved_state(&text) else {
            bail!("cannot read {}", node.saved_state().display());
        };
        let seqno = if saved.seqno >= 0 {
            saved.seqno
        } else {
            let position = wsrep_recover(node)?;
            println!(
                "{}: stopped uncleanly; InnoDB recovered position {}:{}",
                node.name(),
                position.uuid,
                position.seqno
            );
            let seqno = position.seqno;
            recovered.push((node, position));
            seqno
        };
        candidates.push((node, seqno, saved.safe_to_bootstrap));
    }
    let Some(bootstrap) = choose_bootstrap(&candidates) else {
        return Ok(None);
    };
    let path = bootstrap.saved_state();
    let text = std::fs::read_to_string(&path)?;
    std::fs::write(&path, mark_safe_to_bootstrap(&text))
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(Some(Plan {
        bootstrap,
        recovered,
    }))
}

/// Runs `mariadbd --wsrep-recover` on a stopped node: InnoDB's crash
/// recovery, then the last committed position logged, and exit.
fn wsrep_recover(node: Node) -> anyhow::Result<Position> {
    let log = node.dir().join("wsrep-recover.log");
    // What it prints before its log opens (warnings) goes there too.
    let early = std::fs::File::create(&log)?;
    let status = Command::new(MARIADBD)
        .arg(node.defaults_file_arg())
        .arg("--wsrep-recover")
        .arg(format!("--log-error={}", log.display()))
        .stdout(early.try_clone()?)
        .stderr(early)
        .status()
        .context("cannot run mariadbd --wsrep-recover")?;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    match parse_recovered_position(&text) {
        Some(position) if status.success() => Ok(position),
        _ => bail!(
            "mariadbd --wsrep-recover on {} failed ({status}); see {}",
            node.name(),
            log.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLEAN: &str = "# GALERA saved state\nversion: 2.1\nuuid:    8d5b1c36-1a2b-11ef-9c1e-2f0c3e5a6b7d\nseqno:   42\nsafe_to_bootstrap: 0\n";

    #[test]
    fn grastate_is_read_and_marked_safe_to_bootstrap() {
        let saved = parse_saved_state(CLEAN).unwrap();
        assert_eq!(
            saved,
            SavedState {
                uuid: "8d5b1c36-1a2b-11ef-9c1e-2f0c3e5a6b7d".into(),
                seqno: 42,
                safe_to_bootstrap: false,
            }
        );
        let marked = parse_saved_state(&mark_safe_to_bootstrap(CLEAN)).unwrap();
        assert!(marked.safe_to_bootstrap);
        assert_eq!(marked.seqno, 42);
        let killed = CLEAN.replace("seqno:   42", "seqno:   -1");
        assert_eq!(parse_saved_state(&killed).unwrap().seqno, -1);
        assert_eq!(parse_saved_state("# GALERA saved state\n"), None);
    }

    #[test]
    fn the_recovered_position_is_read_from_the_log() {
        let log = "2024-05-01 [Note] InnoDB: Starting shutdown...\n\
                   2024-05-01 [Note] WSREP: Recovered position: 8d5b1c36-1a2b-11ef-9c1e-2f0c3e5a6b7d:57,0-1-57\n";
        assert_eq!(
            parse_recovered_position(log),
            Some(Position {
                uuid: "8d5b1c36-1a2b-11ef-9c1e-2f0c3e5a6b7d".into(),
                seqno: 57,
            })
        );
        assert_eq!(parse_recovered_position("no position here"), None);
    }

    #[test]
    fn the_safe_node_else_the_most_advanced_else_the_first_bootstraps() {
        let [one, two, three] = NODES;
        assert_eq!(
            choose_bootstrap(&[(one, 9, false), (two, 7, true), (three, 9, false)]),
            Some(two)
        );
        assert_eq!(
            choose_bootstrap(&[(one, 7, false), (two, 9, false), (three, 8, false)]),
            Some(two)
        );
        assert_eq!(
            choose_bootstrap(&[(two, 9, false), (three, 9, false)]),
            Some(two)
        );
        assert_eq!(choose_bootstrap(&[]), None);
    }
}
