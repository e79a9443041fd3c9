//! What the faults act on, as far as the run has it, and what each did.

use std::sync::{Arc, Mutex};

use couponlab_links::Links;
use serde_json::{Value, json};

use super::redis_topology::RedisTopology;
use crate::own_nats::OwnNats;
use crate::own_redis::OwnRedis;
use crate::server::Server;

/// What the faults act on, as far as the run has it.
#[derive(Clone, Default)]
pub struct Subjects {
    /// The proxies the served lab talks through.
    pub links: Option<Arc<Links>>,
    /// `--serve`'s server, for the faults that kill it.
    pub server: Option<Arc<Mutex<Server>>>,
    /// The Redis of the run's own, for `redis-restart`.
    pub redis: Option<Arc<Mutex<OwnRedis>>>,
    /// The NATS server of the run's own, for `nats-restart`.
    pub nats: Option<Arc<Mutex<OwnNats>>>,
    /// The Redis with replicas the lab runs on, for `redis-failover` and
    /// `redis-pause`: the Sentinels' primary or the cluster's first master.
    pub redis_topology: Option<RedisTopology>,
}

/// What a fault did, in milliseconds from the load's start.
#[derive(Debug, Clone, PartialEq)]
pub struct Fired {
    /// The fault's spec (canonical form).
    pub fault: String,
    pub fired_at_ms: f64,
    pub ended_at_ms: f64,
    /// What happened, e.g. "restarted, answering after 850 ms".
    pub note: String,
}

impl Fired {
    pub fn to_json(&self) -> Value {
        json!({
            "fault": self.fault,
            "firedAtMs": self.fired_at_ms,
            "endedAtMs": self.ended_at_ms,
            "note": self.note,
        })
    }
}
