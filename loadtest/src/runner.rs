//! What every run of one `cargo xtask loadtest` shares: the hosts the load
//! goes to, k6, the database and Redis read for the join, the faults and
//! what they act on (`--serve`'s server, its links, its own Redis and
//! NATS).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use couponlab_links::{Links, NATS_UPSTREAM, REDIS_UPSTREAM};

use crate::api::Api;
use crate::engines::Engine;
use crate::faults::{FaultPlan, RedisTopology, Subjects};
use crate::galera;
use crate::k6::K6;
use crate::own_nats::OwnNats;
use crate::own_redis::OwnRedis;
use crate::server::{self, Serve, Server};
use crate::truth::Sources;

/// What every run of one `cargo xtask loadtest` shares.
pub struct Runner {
    /// The host that sets each run up and whose result is reported.
    pub api: Api,
    /// Every host the load is spread over (`--base-url a,b,...`), `api`
    /// first.
    pub hosts: Vec<Api>,
    /// k6 processes that share out each run (k6's execution segments).
    pub k6_processes: u32,
    pub k6: K6,
    /// The server's database and Redis, read directly for the join.
    pub sources: Sources,
    /// Where the report and the per-request records go.
    pub out: PathBuf,
    /// The `--fault`s, injected into every method's run.
    pub faults: FaultPlan,
    /// What they act on: the proxies between `--serve`'s server and its
    /// services when a fault cuts or slows a link, the server, the Redis
    /// and NATS of the run's own when a fault restarts one.
    pub subjects: Subjects,
    /// The engine its served lab runs on, when the run compares several.
    pub engine: Option<&'static str>,
    /// The served lab's hosts after the first (on Galera, one per node),
    /// stopped with the runner.
    _more_servers: Vec<Server>,
}

/// The Redis database of the n-th of several engines' labs (the first's is
/// a lone lab's, 10; 11 is the bench's), so coupons of the same id on two
/// engines never share keys.
fn redis_db(engine: usize) -> u8 {
    match engine {
        0 => 10,
        n => 11 + n as u8,
    }
}

impl Runner {
    /// A runner with a server of its own (`--serve`: database
    /// `couponlab_loadtest_<hash>`, Redis db 10), reached through the
    /// fault proxies when a fault cuts or slows a link; with `engine`, the
    /// n-th of several engines, on that engine's database and a Redis
    /// database of its own; behind the Sentinels of `cargo xtask sentinel
    /// up` when a fault fails their primary over (the runner empties and
    /// reads the data node that is primary when the run starts, a replica
    /// of the new one once the fault ended).
    pub fn serving(
        faults: FaultPlan,
        roles_apart: bool,
        k6: K6,
        out: PathBuf,
        engine: Option<(usize, Engine)>,
    ) -> anyhow::Result<Runner> {
        let redis_db = redis_db(engine.map_or(0, |(n, _)| n));
        let redis = faults.needs_own_redis().then(OwnRedis::start).transpose()?;
        let redis_topology = faults
            .needs_redis_topology()
            .then_some(RedisTopology::Sentinel);
        let redis_url = match (&redis, redis_topology) {
            (Some(redis), _) => redis.url(redis_db),
            (None, Some(topology)) => {
                format!("redis://127.0.0.1:{}/{redis_db}", topology.primary()?)
            }
            (None, None) => format!("{}/{redis_db}", server::REDIS_SERVER),
        };
        let sentinel_url = RedisTopology::sentinel_url(redis_db);
        let mut env: Vec<(&'static str, &str)> =
            engine.map_or(&[][..], |(_, engine)| engine.env()).to_vec();
        if redis_topology.is_some() {
            env.push(("REDIS_URL", &sentinel_url));
        }
        let database_urls = match engine {
            Some((_, engine)) => engine.host_database_urls()?,
            None => vec![server::database_url()?],
        };
        if database_urls.len() > 1 {
            galera::ensure_cluster()?;
        }
        let database_url = database_urls[0].clone();
        let nats = faults.needs_own_nats().then(OwnNats::start).transpose()?;
        let nats_url = nats.as_ref().map(OwnNats::url);
        let links = if faults.needs_links() {
            let redis_upstream = redis
                .as_ref()
                .map_or(REDIS_UPSTREAM.to_string(), OwnRedis::address);
            let nats_upstream = nats
                .as_ref()
                .map_or(NATS_UPSTREAM.to_string(), OwnNats::address);
            Some(Arc::new(Links::start_to_redis_and_nats(
                &redis_upstream,
                &nats_upstream,
            )?))
        } else {
            None
        };
        let serve = Serve {
            links: links.as_deref(),
            roles_apart,
            redis_url: Some(&redis_url),
            nats_url: nats_url.as_deref(),
            database_url: Some(&database_url),
            env: &env,
            ..Serve::default()
        };
        let server = Server::start_with(serve)?;
        let more_servers = galera::start_more_hosts(&database_urls, serve)?;
        let api = Api::new(&server.base_url())?;
        let mut hosts = vec![api.clone()];
        for more in &more_servers {
            hosts.push(Api::new(&more.base_url())?);
        }
        Ok(Runner {
            hosts,
            api,
            k6_processes: 1,
            k6,
            sources: Sources::connect(&database_url, &redis_url, false)?,
            out,
            faults,
            subjects: Subjects {
                links,
                server: Some(Arc::new(Mutex::new(server))),
                redis: redis.map(|redis| Arc::new(Mutex::new(redis))),
                nats: nats.map(|nats| Arc::new(Mutex::new(nats))),
                redis_topology,
            },
            engine: engine.map(|(_, engine)| engine.name()),
            _more_servers: more_servers,
        })
    }

    /// A runner against servers someone else runs (`base_urls`, comma
    /// separated: the load is spread over them), whose data is at
    /// `database_url` and `redis_url` (a Redis Cluster's seed nodes when
    /// `redis_cluster`); a failover fault acts on the cluster of `cargo
    /// xtask cluster up --replicas 1` then, else on the Sentinels of `cargo
    /// xtask sentinel up`.
    pub fn against(
        base_urls: &str,
        database_url: &str,
        redis_url: &str,
        redis_cluster: bool,
        faults: FaultPlan,
        k6: K6,
        out: PathBuf,
    ) -> anyhow::Result<Runner> {
        let hosts = base_urls
            .split(',')
            .map(Api::new)
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Runner {
            api: hosts[0].clone(),
            hosts,
            k6_processes: 1,
            k6,
            sources: Sources::connect(database_url, redis_url, redis_cluster)?,
            out,
            subjects: Subjects {
                redis_topology: faults.needs_redis_topology().then_some(if redis_cluster {
                    RedisTopology::Cluster
                } else {
                    RedisTopology::Sentinel
                }),
                ..Subjects::default()
            },
            faults,
            engine: None,
            _more_servers: Vec::new(),
        })
    }
}
