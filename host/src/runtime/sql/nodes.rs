//! On a Galera cluster, the components' SQL on every node, for the calls
//! that name one (`CallContext::node`): a canary's requests, spread over
//! the nodes so that what it proves holds across them, not only on the
//! host's own node. Each node's pools are the host's own, on that node: the
//! same user (Galera replicates it), settings and limits, opened on the
//! first call that names a node, so a host whose canary never runs there
//! opens none.

use std::sync::OnceLock;

use prometheus::IntCounter;

use super::GuestSql;
use super::orphans::Orphans;
use crate::db_target::{PoolSettings, Target};

/// The cluster's nodes as the components' user reaches them.
pub struct Nodes {
    /// The components' user on each node, in the order of the cluster's
    /// sorted addresses (`Cluster::addresses`).
    targets: Vec<Target>,
    /// The settings of the components' pool and of the named locks' own
    /// (`None`: from the components' pool).
    settings: (PoolSettings, Option<PoolSettings>),
    /// Counts the sessions each node's orphans end, with the host's own.
    sessions_ended: IntCounter,
    opened: OnceLock<Vec<GuestSql>>,
}

impl Nodes {
    /// The nodes at `addresses`, reached as `target` reaches the host's
    /// own; `None` when there are fewer than two (nothing to spread over).
    pub fn new(
        target: &Target,
        addresses: &[String],
        settings: (PoolSettings, Option<PoolSettings>),
        sessions_ended: IntCounter,
    ) -> Option<Nodes> {
        let targets: Vec<Target> = addresses
            .iter()
            .filter_map(|address| target.at(address))
            .collect();
        (targets.len() > 1).then(|| Nodes {
            targets,
            settings,
            sessions_ended,
            opened: OnceLock::new(),
        })
    }

    /// The components' SQL on node `node` (mod the count), as `host` runs
    /// it on its own node; every node's pools are made (not connected) on
    /// the first call.
    pub fn on(&self, node: usize, host: &GuestSql) -> &GuestSql {
        let opened = self.opened.get_or_init(|| {
            let (pool, locks) = &self.settings;
            self.targets
                .iter()
                .map(|target| {
                    let pool = target.connect_lazy(pool);
                    let lock_pool = locks.as_ref().map(|locks| target.connect_lazy(locks));
                    // A lost session is ended on its own node: the user may
                    // end and list its own sessions there.
                    let orphans = Orphans::start(pool.clone(), self.sessions_ended.clone());
                    let limits_engine = (host.limits, host.engine.clone());
                    GuestSql::new((pool, lock_pool), limits_engine, host.args.clone(), orphans)
                })
                .collect()
        });
        &opened[node % opened.len()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes_at(addresses: &[&str]) -> Option<Nodes> {
        let target = Target::parse("mysql://user:secret@127.0.0.1:3307/lab", "a test").unwrap();
        let settings = PoolSettings {
            size: 1,
            lock_wait_timeout_s: 1,
            extra: None,
        };
        let addresses: Vec<String> = addresses.iter().map(|a| a.to_string()).collect();
        let ended = IntCounter::new("ended", "sessions ended").unwrap();
        Nodes::new(&target, &addresses, (settings, None), ended)
    }

    /// Each node is reached as the host's own, at the node's address; with
    /// fewer than two readable addresses there is nothing to spread over.
    #[test]
    fn every_node_is_the_hosts_target_at_its_address() {
        assert!(nodes_at(&["127.0.0.1:3307"]).is_none());
        assert!(nodes_at(&["127.0.0.1:3307", "no port"]).is_none());
        let nodes = nodes_at(&["127.0.0.1:3307", "127.0.0.1:3308"]).unwrap();
        let reached: Vec<(String, u16, Option<String>)> = nodes
            .targets
            .iter()
            .map(|target| match target {
                Target::MySql(options) => (
                    options.get_host().to_string(),
                    options.get_port(),
                    options.get_database().map(str::to_string),
                ),
                Target::Postgres(_) => panic!("a MySQL target stays MySQL"),
            })
            .collect();
        let lab = Some("lab".to_string());
        assert_eq!(
            reached,
            [
                ("127.0.0.1".to_string(), 3307, lab.clone()),
                ("127.0.0.1".to_string(), 3308, lab)
            ]
        );
    }
}
