//! `--engines mariadb,mariadb-si,postgres,galera,galera-1`: the same runs
//! on one served lab per engine, each on a database and a Redis database of
//! its own, reported side by side (`METHOD@ENGINE`). A Galera lab has three
//! hosts, request n going to host n mod 3 (`galera.rs`).

use serde_json::Value;

use crate::{galera, server};

/// A database setting a served lab can run its components on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// The machine's MariaDB, `innodb_snapshot_isolation` off.
    MariaDb,
    /// The same MariaDB with `innodb_snapshot_isolation` on for the
    /// components' sessions: REPEATABLE READ refuses a stale write.
    MariaDbSnapshotIsolation,
    /// The machine's PostgreSQL.
    Postgres,
    /// The Galera cluster of `cargo xtask galera up`, a host on each node.
    Galera,
    /// The same cluster, its three hosts on its first node: its answer as
    /// one node.
    GaleraOneNode,
}

impl Engine {
    const ALL: [Engine; 5] = [
        Engine::MariaDb,
        Engine::MariaDbSnapshotIsolation,
        Engine::Postgres,
        Engine::Galera,
        Engine::GaleraOneNode,
    ];

    /// As `--engines` and the report name it.
    pub fn name(self) -> &'static str {
        match self {
            Engine::MariaDb => "mariadb",
            Engine::MariaDbSnapshotIsolation => "mariadb-si",
            Engine::Postgres => "postgres",
            Engine::Galera => "galera",
            Engine::GaleraOneNode => "galera-1",
        }
    }

    /// The served lab's database: one of its own per engine (on Galera, as
    /// its first host reaches it).
    pub fn database_url(self) -> anyhow::Result<String> {
        Ok(match self {
            Engine::MariaDb => server::database_url()?,
            Engine::MariaDbSnapshotIsolation => format!("{}_si", server::database_url()?),
            Engine::Postgres => server::postgres_database_url()?,
            Engine::Galera | Engine::GaleraOneNode => self.host_database_urls()?.remove(0),
        })
    }

    /// Each served host's database URL: one host, or on Galera three.
    pub fn host_database_urls(self) -> anyhow::Result<Vec<String>> {
        match self {
            Engine::Galera => galera::host_database_urls(true),
            Engine::GaleraOneNode => galera::host_database_urls(false),
            _ => Ok(vec![self.database_url()?]),
        }
    }

    /// The served lab's settings for this engine.
    pub fn env(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Engine::MariaDb => &[("COUPONLAB_SNAPSHOT_ISOLATION", "off")],
            Engine::MariaDbSnapshotIsolation => &[("COUPONLAB_SNAPSHOT_ISOLATION", "on")],
            Engine::Postgres | Engine::Galera | Engine::GaleraOneNode => &[],
        }
    }
}

/// The engines `--engines` names, in its order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineList(pub Vec<Engine>);

/// `--engines A,B,...`, each named once.
pub fn engine_list(text: &str) -> Result<EngineList, String> {
    let mut engines = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let engine = Engine::ALL
            .into_iter()
            .find(|engine| engine.name() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = Engine::ALL.iter().map(|e| e.name()).collect();
                format!(
                    "unknown engine {name:?}; the engines are {}",
                    known.join(", ")
                )
            })?;
        if engines.contains(&engine) {
            return Err(format!("{name} is named twice"));
        }
        engines.push(engine);
    }
    if engines.is_empty() {
        return Err("name at least one engine".into());
    }
    Ok(EngineList(engines))
}

/// A results.json key: the method alone with one engine, `METHOD@ENGINE`
/// with several.
pub fn key(method: &str, engine: Option<&str>) -> String {
    match engine {
        Some(engine) => format!("{method}@{engine}"),
        None => method.to_string(),
    }
}

/// One line per engine for a report's opening: its name, the server's
/// version and the settings its components ran with, as the lab said (on
/// Galera, the cluster's size and the first host's node too).
pub fn described(engines: &[(&str, &Value)]) -> String {
    let lines: Vec<String> = engines
        .iter()
        .map(|(name, engine)| {
            let settings: Vec<String> = engine["settings"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(setting, value)| format!("{setting}={}", value.as_str().unwrap_or("?")))
                .collect();
            let cluster = &engine["cluster"];
            format!(
                "**{name}**: {} {}{}{}",
                engine["name"].as_str().unwrap_or("?"),
                engine["version"].as_str().unwrap_or("?"),
                if cluster.is_object() {
                    format!(
                        ", a cluster of {} (the first host on {})",
                        cluster["size"],
                        cluster["address"].as_str().unwrap_or("?")
                    )
                } else {
                    String::new()
                },
                if settings.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", settings.join(", "))
                }
            )
        })
        .collect();
    format!(" Engines side by side: {}.", lines.join("; "))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn engines_are_read_by_name_once_each() {
        assert_eq!(
            engine_list("mariadb, mariadb-si").unwrap().0,
            [Engine::MariaDb, Engine::MariaDbSnapshotIsolation]
        );
        let unknown = engine_list("mariadb,oracle").unwrap_err();
        assert!(
            unknown.contains("\"oracle\"") && unknown.contains("mariadb-si"),
            "{unknown}"
        );
        assert!(
            engine_list("mariadb,mariadb")
                .unwrap_err()
                .contains("twice")
        );
        assert!(engine_list(",").is_err());
    }

    #[test]
    fn each_engine_has_a_database_of_its_own() {
        let plain = Engine::MariaDb.database_url().unwrap();
        let si = Engine::MariaDbSnapshotIsolation.database_url().unwrap();
        assert_ne!(plain, si);
        assert!(si.starts_with(&plain));
        assert_eq!(key("REDIS_LUA", Some("mariadb-si")), "REDIS_LUA@mariadb-si");
        assert_eq!(key("REDIS_LUA", None), "REDIS_LUA");
    }

    #[test]
    fn the_opening_names_each_engine_with_its_settings() {
        let si = json!({ "name": "mariadb", "version": "10.11.19-MariaDB",
                         "settings": { "innodb_snapshot_isolation": "ON" } });
        let text = described(&[("mariadb-si", &si)]);
        assert!(
            text.contains(
                "**mariadb-si**: mariadb 10.11.19-MariaDB (innodb_snapshot_isolation=ON)"
            ),
            "{text}"
        );
        let galera = json!({ "name": "galera", "version": "10.11.19-MariaDB",
                             "settings": { "wsrep_sync_wait": "0" },
                             "cluster": { "size": 3, "address": "127.0.0.1:3307" } });
        let text = described(&[("galera", &galera)]);
        assert!(
            text.contains("**galera**: galera 10.11.19-MariaDB, a cluster of 3 (the first host on 127.0.0.1:3307) (wsrep_sync_wait=0)"),
            "{text}"
        );
    }
}
