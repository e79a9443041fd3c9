//! `--fault SPEC`: faults injected while the load runs.
//!
//! ```text
//! redis-cut@START+DURATION          the Redis link drops and refuses connections, then comes back
//! db-cut@START+DURATION             the same for the MySQL link
//! amqp-cut@START+DURATION           the same for the RabbitMQ link
//! nats-cut@START+DURATION           the same for the NATS link
//! redis-latency=MS@START+DURATION   MS more on every Redis answer for a while
//! db-latency=MS@START+DURATION      the same for MySQL
//! kill-server@START                 SIGKILL of the served process, restarted right after
//! kill-consumers@START              the same for the consumer processes (roles apart)
//! redis-restart@START               SHUTDOWN NOSAVE of the run's own Redis, started again empty
//! nats-restart@START                SIGKILL of the run's own NATS, started again on its store
//! redis-failover@START              SIGKILL of the Redis primary (Sentinels) or of a cluster master; a replica promoted, the old one rejoining as its replica
//! redis-pause@START+DURATION        SIGSTOP of that primary, SIGCONT after DURATION (a failover meanwhile)
//! galera-kill@START                 SIGKILL of the Galera node 127.0.0.1:3309, started again to rejoin
//! galera-pause@START+DURATION       SIGSTOP of that node, SIGCONT after DURATION
//! client-timeout=MS                 clients give up on a request after MS
//! ```
//!
//! START and DURATION are durations into the load: `300ms`, `0.3s`, `2s`,
//! `1m`. MS is milliseconds, plain (`200`) or as a duration (`0.2s`). The
//! links are the noxious proxies of `couponlab-links`; every fault but
//! `client-timeout`, the Galera ones (which act on the cluster of `cargo
//! xtask galera up`, whoever serves on it) and the failover ones (the
//! Sentinels of `cargo xtask sentinel up`, where `--serve` puts its lab, or
//! the cluster of `cargo xtask cluster up --replicas 1` with
//! `--redis-cluster`) needs `--serve`, since the
//! runner can only cut, slow or kill what it started; `redis-restart` gives the served lab a Redis of
//! the run's own (`own_redis.rs`), never the machine's shared one. Faults
//! on one link may not overlap in time.
//!
//! - `spec`: one `--fault` value, parsed by its family, written back and
//!   described; `parts` its pieces and durations;
//! - the families, each parsed, described and fired in its own module:
//!   `links`, `processes`, `galera`, `redis_failover` (on the topologies of
//!   `redis_topology`);
//! - `plan`: a run's faults, checked against each other and the run;
//! - `injector`: the timed faults run while the load runs, each on a
//!   thread of its own, from [`Injector::start`] (the moment the load
//!   starts) to [`Injector::finish`] (every fault ended: link restored,
//!   process restarted and answering), which says when each really fired
//!   and ended;
//! - `target`: one fault's thread, firing its family's fault at its start
//!   and undoing it at its end; `cancel` ends what is under way when the
//!   run stops first; `subjects` what the faults act on, and what each did.

mod cancel;
mod galera;
mod injector;
mod links;
mod parts;
mod plan;
mod processes;
mod redis_failover;
mod redis_topology;
mod spec;
mod subjects;
mod target;

pub use self::injector::Injector;
pub use self::plan::{FaultPlan, Setup};
pub use self::redis_topology::RedisTopology;
pub use self::subjects::{Fired, Subjects};
