//! The Why section's lines for a run on the Galera cluster: what each node
//! counted of the transactions the cluster refused over the run, and what
//! of that a client's answer tells. A refusal reaches a client as 503
//! `DEADLOCK` (1213) whoever refused it: at COMMIT the host names it a
//! certification conflict (InnoDB never deadlocks there); at a statement a
//! brute-force abort by another node's write set and a local deadlock are
//! one error, and only the nodes' counters tell how many were the
//! cluster's.

use std::fmt::Write as _;

use super::markup::esc;
use crate::galera::NodeConflicts;

/// Why a count of 503 `DEADLOCK` answers cannot be split per request.
const NOT_PER_REQUEST: &str = "A 503 DEADLOCK at COMMIT names the certification conflict; one at a statement is a brute-force abort or a local deadlock, the same error 1213, which the engine does not tell apart per request";

/// One line: each node's counters over the run, and what they mean.
fn sentence(nodes: &[NodeConflicts]) -> String {
    let counted: Vec<String> = nodes
        .iter()
        .map(|node| match node.counted {
            Some(counted) => format!(
                "{} {} certification failures, {} brute-force aborts{}",
                node.address,
                counted.cert_failures,
                counted.bf_aborts,
                if node.restarted {
                    " (since its restart)"
                } else {
                    ""
                }
            ),
            None => format!("{} not read (it did not answer)", node.address),
        })
        .collect();
    let mut line = format!(
        "the cluster's refusals over the run, by node (wsrep_local_cert_failures, wsrep_local_bf_aborts): {}",
        counted.join("; ")
    );
    let _ = write!(line, ". {NOT_PER_REQUEST}");
    line
}

pub fn markdown(out: &mut String, nodes: Option<&[NodeConflicts]>) {
    if let Some(nodes) = nodes {
        let _ = writeln!(out, "- Galera: {}", sentence(nodes));
    }
}

pub fn html(out: &mut String, nodes: Option<&[NodeConflicts]>) {
    if let Some(nodes) = nodes {
        let _ = writeln!(out, "<li>Galera: {}</li>", esc(&sentence(nodes)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::galera::Conflicts;

    #[test]
    fn each_node_is_counted_and_the_report_says_what_a_request_cannot_tell() {
        let nodes = [
            NodeConflicts {
                address: "127.0.0.1:3307".into(),
                counted: Some(Conflicts {
                    cert_failures: 3,
                    bf_aborts: 40,
                }),
                restarted: false,
            },
            NodeConflicts {
                address: "127.0.0.1:3309".into(),
                counted: Some(Conflicts {
                    cert_failures: 0,
                    bf_aborts: 2,
                }),
                restarted: true,
            },
        ];
        let mut out = String::new();
        markdown(&mut out, Some(&nodes));
        assert!(
            out.contains("127.0.0.1:3307 3 certification failures, 40 brute-force aborts;"),
            "{out}"
        );
        assert!(
            out.contains("2 brute-force aborts (since its restart)"),
            "{out}"
        );
        assert!(out.contains("does not tell apart per request"), "{out}");
        let mut none = String::new();
        markdown(&mut none, None);
        html(&mut none, None);
        assert!(none.is_empty());
    }
}
