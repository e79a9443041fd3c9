//! The server's Prometheus metrics, served at `GET /metrics` in the text
//! exposition format.
//!
//! One registry per server, not the process-wide default: several servers
//! in one process (the tests run many) each report only their own figures.
//! Label values are bounded: methods (loaded components only), outcomes,
//! reasons, pools, gates and streams — never a member or coupon id.
//! Counters and histograms are updated where things happen; the gauges of
//! what a run exhausts are read when the server is scraped.

use prometheus::core::Collector;
use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

/// Latency buckets from 100 µs to 10 s, in seconds.
const LATENCY_BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

pub struct Metrics {
    registry: Registry,
    /// Issue requests by method and outcome.
    pub issue_requests: IntCounterVec,
    /// Their latency, in the server, by method.
    pub issue_duration: HistogramVec,
    /// From a 202 to its confirmation, for the requests issued, by method.
    pub confirmation_lag: HistogramVec,
    /// Strategy calls that trapped, ran past their deadline or found no
    /// free instance, by method and reason.
    pub call_failures: IntCounterVec,
    /// Scripts that outlived their call's deadline and were ended with
    /// SCRIPT KILL, by method.
    pub scripts_killed: IntCounterVec,
    /// Component files loaded, replaced, unloaded or rejected, by method
    /// (`unknown` for a file that never said its method).
    pub component_changes: IntCounterVec,
    /// Strategy instances alive now.
    pub instances_in_use: IntGauge,
    /// Connections of the database pools by pool and state (in use, idle).
    pub db_connections: IntGaugeVec,
    /// Calls waiting for a connection of the components' pool.
    pub db_waiting: IntGauge,
    /// Requests kept to be settled later, settled (issued or not) or given
    /// up on, by method and result.
    pub settlements: IntCounterVec,
    /// Requests waiting to be settled now.
    pub settlements_pending: IntGauge,
    /// Coupons this process keeps a record of requests for, live and
    /// dormant.
    pub recorded_coupons: IntGaugeVec,
    /// Database sessions of lost connections the host ended (KILL).
    pub sql_sessions_ended: IntCounter,
    /// Sessions of lost connections not ended yet.
    pub sql_sessions_to_end: IntGauge,
    /// On a Galera node, the transactions the node counted as refused by
    /// the cluster since it started, by kind: certification failures and
    /// brute-force aborts (its `wsrep_local_*` counters, read when scraped).
    pub galera_conflicts: IntGaugeVec,
    /// Dedicated Redis connections lent to calls now.
    pub redis_dedicated_in_use: IntGauge,
    /// Jobs queued and not yet taken by a worker.
    pub job_queue_depth: IntGauge,
    /// Permits held now, by gate.
    pub permits_in_use: IntGaugeVec,
    /// Process locks held now by calls.
    pub process_locks_held: IntGauge,
    /// Entries delivered and not acked, by stream.
    pub stream_pending: IntGaugeVec,
    /// Entries in each stream's dead-letter stream.
    pub stream_dead_letters: IntGaugeVec,
    /// Broker messages this process confirmed (acked), sent back to be
    /// delivered again, or dead-lettered, by broker and event.
    pub broker_messages: IntCounterVec,
    /// Request traces kept, by why; dropped, by why.
    pub traces_kept: IntCounterVec,
    pub traces_dropped: IntCounterVec,
    /// Request traces held now.
    pub traces_held: IntGauge,
}

impl Metrics {
    pub fn new() -> Self {
        let registry = Registry::new();
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let metric = IntCounterVec::new(Opts::new(name, help), labels);
            registered(&registry, metric.expect("a valid counter"))
        };
        let gauges = |name: &str, help: &str, labels: &[&str]| {
            let metric = IntGaugeVec::new(Opts::new(name, help), labels);
            registered(&registry, metric.expect("a valid gauge"))
        };
        let plain_counter = |name: &str, help: &str| {
            registered(
                &registry,
                IntCounter::new(name, help).expect("a valid counter"),
            )
        };
        let gauge = |name: &str, help: &str| {
            registered(&registry, IntGauge::new(name, help).expect("a valid gauge"))
        };
        let histogram = |name: &str, help: &str| {
            let opts = HistogramOpts::new(name, help).buckets(LATENCY_BUCKETS.to_vec());
            let metric = HistogramVec::new(opts, &["method"]).expect("a valid histogram");
            registered(&registry, metric)
        };
        Self {
            issue_requests: counter(
                "couponlab_issue_requests_total",
                "Issue requests answered, by method and outcome.",
                &["method", "outcome"],
            ),
            issue_duration: histogram(
                "couponlab_issue_duration_seconds",
                "Latency of issue requests in the server, by method.",
            ),
            confirmation_lag: histogram(
                "couponlab_confirmation_lag_seconds",
                "From a 202 to its confirmation, for the requests issued, by method.",
            ),
            call_failures: counter(
                "couponlab_strategy_call_failures_total",
                "Strategy calls that produced no answer, by method and reason.",
                &["method", "reason"],
            ),
            scripts_killed: counter(
                "couponlab_redis_scripts_killed_total",
                "Scripts that outlived their call's deadline and were ended with SCRIPT KILL, by method.",
                &["method"],
            ),
            component_changes: counter(
                "couponlab_component_changes_total",
                "Component files loaded, replaced, unloaded or rejected, by method.",
                &["method", "change"],
            ),
            instances_in_use: gauge(
                "couponlab_instances_in_use",
                "Strategy instances alive now.",
            ),
            db_connections: gauges(
                "couponlab_db_connections",
                "Connections of the database pools, by pool and state.",
                &["pool", "state"],
            ),
            db_waiting: gauge(
                "couponlab_db_waiting",
                "Strategy calls waiting for a connection of the components' pool.",
            ),
            settlements: counter(
                "couponlab_settlements_total",
                "Requests whose outcome was settled after their answer, by method and result (kept, issued, not_issued, abandoned).",
                &["method", "result"],
            ),
            settlements_pending: gauge(
                "couponlab_settlements_pending",
                "Requests waiting to be settled (pending compensations).",
            ),
            recorded_coupons: gauges(
                "couponlab_recorded_coupons",
                "Coupons this process keeps a record of requests for (the recorder's size), by state: live in memory, or dormant (idle, encoded).",
                &["state"],
            ),
            sql_sessions_ended: plain_counter(
                "couponlab_sql_sessions_ended_total",
                "Database sessions whose connection was lost inside a transaction, ended by the host (KILL).",
            ),
            sql_sessions_to_end: gauge(
                "couponlab_sql_sessions_to_end",
                "Database sessions of lost connections the host has not ended yet.",
            ),
            galera_conflicts: gauges(
                "couponlab_galera_conflicts",
                "On a Galera node, the node's transactions refused by the cluster since the node started (wsrep_local_cert_failures, wsrep_local_bf_aborts), by kind (cert_failures, bf_aborts). A 1213 at a statement cannot be told apart per request; these can, per node.",
                &["kind"],
            ),
            redis_dedicated_in_use: gauge(
                "couponlab_redis_dedicated_in_use",
                "Dedicated Redis connections lent to strategy calls now.",
            ),
            job_queue_depth: gauge(
                "couponlab_job_queue_depth",
                "Jobs queued and not yet taken by a worker.",
            ),
            permits_in_use: gauges(
                "couponlab_permits_in_use",
                "Permits held now, by gate.",
                &["gate"],
            ),
            process_locks_held: gauge(
                "couponlab_process_locks_held",
                "Process locks (IN_PROCESS_LOCK's) held now by calls.",
            ),
            stream_pending: gauges(
                "couponlab_stream_pending",
                "Stream entries delivered and not acked, by stream.",
                &["stream"],
            ),
            stream_dead_letters: gauges(
                "couponlab_stream_dead_letters",
                "Entries in each stream's dead-letter stream.",
                &["stream"],
            ),
            broker_messages: counter(
                "couponlab_broker_messages_total",
                "Broker messages this process acked, sent back to be delivered again, or dead-lettered, by broker (rabbitmq, jetstream) and event (acked, redelivered, dead_lettered, and foreign: another lab's message, dropped unread).",
                &["broker", "event"],
            ),
            traces_kept: counter(
                "couponlab_traces_kept_total",
                "Request traces kept, by reason (served, wrote, failed, compensated, confirmation, first-refusal, sample).",
                &["reason"],
            ),
            traces_dropped: counter(
                "couponlab_traces_dropped_total",
                "Request traces dropped, by reason (not-sampled, coupon-full, coupon-evicted).",
                &["reason"],
            ),
            traces_held: gauge(
                "couponlab_traces_held",
                "Request traces held in memory now.",
            ),
            registry,
        }
    }

    /// Shows the counters of what rarely happens to `method` at 0 from its
    /// load on, so a rate over them reads 0 rather than nothing.
    pub fn show_method(&self, method: &str) {
        self.scripts_killed.with_label_values(&[method]);
        for result in ["kept", "issued", "not_issued", "abandoned"] {
            self.settlements.with_label_values(&[method, result]);
        }
    }

    /// Sets the connections of the database pool `pool` (its label), from
    /// its `open` connections and the `idle` ones among them.
    pub fn set_db_connections(&self, pool: &str, (open, idle): (u32, usize)) {
        let (open, idle) = (i64::from(open), idle as i64);
        let gauge = |state| self.db_connections.with_label_values(&[pool, state]);
        gauge("in_use").set(open - idle);
        gauge("idle").set(idle);
    }

    /// The exposition of every metric, in the text format.
    pub fn render(&self) -> String {
        TextEncoder::new()
            .encode_to_string(&self.registry.gather())
            .expect("the text encoding of gathered metrics")
    }
}

/// `metric`, once `registry` reports it. A name registered twice is a bug of
/// [`Metrics::new`]'s list, so it panics rather than report half the figures.
fn registered<M: Collector + Clone + 'static>(registry: &Registry, metric: M) -> M {
    registry
        .register(Box::new(metric.clone()))
        .expect("a metric registered once");
    metric
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    /// Not a pass/fail test: what the metrics add to one issue request (a
    /// counter and a histogram, found by their labels), on two threads at
    /// once as under load.
    /// `cargo test --release --workspace --lib -- metrics_cost --ignored --nocapture`
    #[test]
    #[ignore = "benchmark; run explicitly"]
    fn metrics_cost_benchmark() {
        let metrics = std::sync::Arc::new(Metrics::new());
        const PER_THREAD: u32 = 1_000_000;
        let started = Instant::now();
        std::thread::scope(|scope| {
            for _ in 0..2 {
                let metrics = metrics.clone();
                scope.spawn(move || {
                    for i in 0..PER_THREAD {
                        let outcome = if i % 10 == 0 { "ISSUED" } else { "SOLD_OUT" };
                        metrics
                            .issue_requests
                            .with_label_values(&["REDIS_LUA", outcome])
                            .inc();
                        metrics
                            .issue_duration
                            .with_label_values(&["REDIS_LUA"])
                            .observe(0.0003);
                    }
                });
            }
        });
        let per_request = started.elapsed() / (2 * PER_THREAD);
        println!("metrics per issue request, two threads at once: {per_request:?}");
        assert!(metrics.render().contains("couponlab_issue_requests_total"));
    }
}
