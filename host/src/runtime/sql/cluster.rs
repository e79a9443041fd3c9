//! A MariaDB Galera node: the cluster the host's node is in, the wsrep
//! settings that change what clients are answered, and a 1213 named for
//! what it may be there. Every node takes writes and certifies each
//! transaction against the others' at COMMIT; a row lock is its node's
//! own, so a transaction that loses to another node's learns it as error
//! 1213 — the same number and text as a local deadlock.

use std::collections::BTreeMap;

use serde::Serialize;
use sqlx::MySqlConnection;
use utoipa::ToSchema;

use crate::runtime::bindings::sql::SqlError;

/// The engine's name on a node of a Galera cluster.
pub const GALERA: &str = "galera";

/// Settings that change what a client of a node is answered: whether a
/// read first waits for the writes the node has received but not applied
/// (`wsrep_sync_wait`, session), how often an autocommit statement that
/// lost certification is run again before the client gets 1213
/// (`wsrep_retry_autocommit`, session), and whether a commit survives the
/// node's crash before the next flush (`innodb_flush_log_at_trx_commit`).
const SESSION_SETTINGS: [&str; 2] = ["wsrep_sync_wait", "wsrep_retry_autocommit"];
const GLOBAL_SETTINGS: [&str; 1] = ["innodb_flush_log_at_trx_commit"];

/// Provider options that change answers: whether a node cut off from the
/// others' quorum still takes writes (`pc.ignore_quorum`, `pc.ignore_sb`:
/// split brain), and whether commits become visible in the order they
/// were certified (`repl.commit_order`).
const PROVIDER_OPTIONS: [&str; 3] = ["pc.ignore_quorum", "pc.ignore_sb", "repl.commit_order"];

/// The cluster as the host's node sees it, when read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Cluster {
    /// `wsrep_cluster_name`.
    pub name: String,
    /// Nodes in the node's component (`wsrep_cluster_size`).
    pub size: u32,
    /// The node the host writes to (`wsrep_node_name`).
    pub node: String,
    /// Its address for clients (`wsrep_node_incoming_address`, else its
    /// host name and port).
    pub address: String,
    /// Every node's address for clients, sorted
    /// (`wsrep_incoming_addresses`): a canary's request *n* goes to the
    /// *n* mod size-th (`sql/nodes.rs`).
    pub addresses: Vec<String>,
    /// `wsrep_local_state_comment`: `Synced`, `Donor/Desynced`, `Joining`...
    pub state: String,
    /// Whether its component has quorum (`wsrep_cluster_status` is
    /// `Primary`): without it, the node refuses every statement.
    pub primary: bool,
    /// The node's transactions that failed certification since it started
    /// (`wsrep_local_cert_failures`): each was answered 1213 at COMMIT.
    pub cert_failures: u64,
    /// The node's transactions aborted since it started by another node's
    /// write set applied over their row locks (`wsrep_local_bf_aborts`):
    /// answered 1213, or an autocommit statement run again.
    pub bf_aborts: u64,
}

/// Whether the MariaDB on `conn` is a node of a Galera cluster: wsrep on,
/// with a provider loaded (a plain MariaDB has both variables, off).
pub async fn is_node(conn: &mut MySqlConnection) -> Result<bool, sqlx::Error> {
    let node: i64 = sqlx::query_scalar(
        "SELECT @@GLOBAL.wsrep_on AND IFNULL(@@GLOBAL.wsrep_provider, 'none') <> 'none'",
    )
    .fetch_one(conn)
    .await?;
    Ok(node == 1)
}

impl Cluster {
    /// Reads the cluster, as the node of `conn` sees it now.
    pub async fn read(conn: &mut MySqlConnection) -> Result<Cluster, sqlx::Error> {
        let (name, node, address): (String, String, String) = sqlx::query_as(
            "SELECT @@GLOBAL.wsrep_cluster_name, @@GLOBAL.wsrep_node_name, \
             IF(@@GLOBAL.wsrep_node_incoming_address = 'AUTO', \
                CONCAT(@@hostname, ':', @@port), @@GLOBAL.wsrep_node_incoming_address)",
        )
        .fetch_one(&mut *conn)
        .await?;
        let status: BTreeMap<String, String> = sqlx::query_as::<_, (String, String)>(
            "SHOW GLOBAL STATUS WHERE Variable_name IN ('wsrep_cluster_size', \
             'wsrep_local_state_comment', 'wsrep_cluster_status', \
             'wsrep_local_cert_failures', 'wsrep_local_bf_aborts', \
             'wsrep_incoming_addresses')",
        )
        .fetch_all(conn)
        .await?
        .into_iter()
        .collect();
        let number = |name: &str| -> u64 {
            status
                .get(name)
                .and_then(|value| value.parse().ok())
                .unwrap_or(0)
        };
        Ok(Cluster {
            name,
            size: u32::try_from(number("wsrep_cluster_size")).unwrap_or(0),
            node,
            address,
            addresses: status
                .get("wsrep_incoming_addresses")
                .map_or_else(Vec::new, |addresses| addresses_of(addresses)),
            state: status
                .get("wsrep_local_state_comment")
                .cloned()
                .unwrap_or_default(),
            primary: status.get("wsrep_cluster_status").map(String::as_str) == Some("Primary"),
            cert_failures: number("wsrep_local_cert_failures"),
            bf_aborts: number("wsrep_local_bf_aborts"),
        })
    }
}

/// The nodes' client addresses of `wsrep_incoming_addresses` (`host:port`,
/// comma separated, in the order of the cluster's view), sorted: every
/// host of a lab numbers the nodes alike. A node that gives none
/// (`AUTO` unresolved) is left out.
fn addresses_of(addresses: &str) -> Vec<String> {
    let mut addresses: Vec<String> = addresses
        .split(',')
        .map(str::trim)
        .filter(|address| address.contains(':') && !address.starts_with("AUTO"))
        .map(str::to_string)
        .collect();
    addresses.sort();
    addresses
}

/// The wsrep settings components' sessions on `conn` run with, each as
/// name → value, into `settings`.
pub async fn read_settings(
    conn: &mut MySqlConnection,
    settings: &mut BTreeMap<String, String>,
) -> Result<(), sqlx::Error> {
    let session = SESSION_SETTINGS.map(|name| format!("CAST(@@SESSION.{name} AS CHAR)"));
    let global = GLOBAL_SETTINGS.map(|name| format!("CAST(@@GLOBAL.{name} AS CHAR)"));
    let columns = [&session[..], &global[..]].concat().join(", ");
    let (sync_wait, retry_autocommit, flush): (String, String, String) =
        sqlx::query_as(&format!("SELECT {columns}"))
            .fetch_one(&mut *conn)
            .await?;
    let names = SESSION_SETTINGS.into_iter().chain(GLOBAL_SETTINGS);
    for (name, value) in names.zip([sync_wait, retry_autocommit, flush]) {
        settings.insert(name.to_string(), value);
    }
    let options: String = sqlx::query_scalar("SELECT @@GLOBAL.wsrep_provider_options")
        .fetch_one(conn)
        .await?;
    settings.extend(answering_options(&options));
    Ok(())
}

/// Of `wsrep_provider_options` (`name = value; ...`), those that change
/// answers.
fn answering_options(options: &str) -> impl Iterator<Item = (String, String)> + '_ {
    options.split(';').filter_map(|option| {
        let (name, value) = option.split_once('=')?;
        let name = name.trim();
        PROVIDER_OPTIONS
            .contains(&name)
            .then(|| (name.to_string(), value.trim().to_string()))
    })
}

/// A 1213 on a Galera node, named for what it may be. At COMMIT it is the
/// cluster's: InnoDB's deadlocks happen while a statement waits for a row
/// lock, and COMMIT waits for none. At a statement it may be either, and
/// only the node's counters, over many requests, tell how many were
/// whose.
pub fn conflict_named(err: SqlError, at_commit: bool) -> SqlError {
    match err {
        SqlError::Deadlock(message) if at_commit => SqlError::Deadlock(format!(
            "a certification conflict on the Galera cluster: another node committed a write to a row this transaction wrote (certification failure or brute-force abort; a local deadlock never happens at COMMIT): {message}"
        )),
        SqlError::Deadlock(message) => SqlError::Deadlock(format!(
            "a certification conflict (brute-force abort by another node's write) or a local deadlock: on a Galera node both are 1213, told apart only by the node's wsrep_local_bf_aborts and wsrep_local_cert_failures: {message}"
        )),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_options_that_change_answers_are_kept() {
        let options = "gcache.size = 64M; pc.ignore_sb = false; pc.weight = 1; \
                       repl.commit_order = 3; pc.ignore_quorum = false";
        let kept: BTreeMap<String, String> = answering_options(options).collect();
        assert_eq!(
            kept.into_iter().collect::<Vec<_>>(),
            [
                ("pc.ignore_quorum".to_string(), "false".to_string()),
                ("pc.ignore_sb".to_string(), "false".to_string()),
                ("repl.commit_order".to_string(), "3".to_string()),
            ]
        );
    }

    #[test]
    fn the_nodes_addresses_are_numbered_alike_on_every_node() {
        assert_eq!(
            addresses_of("127.0.0.1:3309,127.0.0.1:3307, 127.0.0.1:3308"),
            ["127.0.0.1:3307", "127.0.0.1:3308", "127.0.0.1:3309"]
        );
        assert!(addresses_of("").is_empty());
    }

    #[test]
    fn a_deadlock_at_commit_is_named_the_clusters() {
        let named = |at_commit| match conflict_named(SqlError::Deadlock("1213".into()), at_commit) {
            SqlError::Deadlock(message) => message,
            other => panic!("{other:?}"),
        };
        assert!(named(true).starts_with("a certification conflict on the Galera cluster"));
        assert!(named(false).contains("or a local deadlock"));
        let timeout = conflict_named(SqlError::LockWaitTimeout("1205".into()), true);
        assert!(matches!(timeout, SqlError::LockWaitTimeout(m) if m == "1205"));
    }
}
