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
//! galera-kill@START                 SIGKILL of the Galera node 127.0.0.1:3309, started again to rejoin
//! galera-pause@START+DURATION       SIGSTOP of that node, SIGCONT after DURATION
//! client-timeout=MS                 clients give up on a request after MS
//! ```
//!
//! START and DURATION are durations into the load: `300ms`, `0.3s`, `2s`,
//! `1m`. MS is milliseconds, plain (`200`) or as a duration (`0.2s`). The
//! links are the noxious proxies of `couponlab-links`; every fault but
//! `client-timeout` and the Galera ones (which act on the cluster of `cargo
//! xtask galera up`, whoever serves on it) needs `--serve`, since the
//! runner can only cut, slow or kill what it started; `redis-restart` gives the served lab a Redis of
//! the run's own (`own_redis.rs`), never the machine's shared one. Faults
//! on one link may not overlap in time.
//!
//! - `spec`: one `--fault` value, parsed, written back and described;
//! - `plan`: a run's faults, checked against each other and the run;
//! - `injector`: the timed faults run while the load runs, each on a
//!   thread of its own, from [`Injector::start`] (the moment the load
//!   starts) to [`Injector::finish`] (every fault ended: link restored,
//!   process restarted and answering), which says when each really fired
//!   and ended;
//! - `target`: what a fault does to its link, server or Redis when it
//!   fires, and undoes when it ends.

mod galera;
mod injector;
mod plan;
mod spec;
mod target;

pub use self::injector::{Fired, Injector, Subjects};
pub use self::plan::{FaultPlan, Setup};
