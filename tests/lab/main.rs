//! Integration tests: real servers on 127.0.0.1:0, real MariaDB, real Redis
//! (and PostgreSQL, for what each engine allows: `isolation`),
//! real components. One test binary, so wasmtime links once.

mod common;

mod api_contract;
mod async_methods;
mod brokers;
mod call_endings;
mod canary;
mod canary_dependencies;
mod cluster;
mod cluster_failover;
mod cluster_faults;
mod console;
mod dashboard;
mod drop_gate;
mod drop_gate_fail_open;
mod failover_burst;
mod galera;
mod hang_ups;
mod hot_reload;
mod idle;
mod isolation;
mod issue_concurrency;
mod languages;
mod least_privilege;
mod locks_and_counters;
mod lost_answers;
mod metrics;
mod migrations;
mod mysql_methods;
mod named_and_pubsub_locks;
mod openapi;
mod postgres;
mod postgres_roles;
mod redis_faults;
mod redis_methods;
mod redis_server;
mod report_charts;
mod result_endpoint;
mod sandbox;
mod sentinel;
mod several_hosts;
mod sharded;
mod snapshot_isolation;
mod traces;
mod turns;
mod wasi_imports;
mod wit_roundtrip;
mod write_behind;
