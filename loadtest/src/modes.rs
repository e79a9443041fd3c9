//! `cargo xtask loadtest`: its modes and their flags, and the runner they
//! set up.
//!
//! For each method, one after another: create members (one per request)
//! and a fresh coupon, run `loadtest/issue.js` (k6 writes one record per
//! request), wait until every accepted request has its outcome or nothing
//! moves any more, read the coupon's result, and join the records with the
//! issue rows and the Redis stock read directly (`verification`). Reports go
//! to `loadtest/reports/<UTC time>/` (report.md, chart.svg, report.html,
//! results.json, requests-<METHOD>.csv). A method that breaks a guarantee it
//! claims fails the run unless `--allow-broken`.

use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, Subcommand};

use crate::comparison::{self, Comparison, Report};
use crate::durations::duration_text;
use crate::engines::{Engine, EngineList, engine_list};
use crate::faults::{FaultPlan, Setup};
use crate::k6::{self, K6};
use crate::run::Arrivals;
use crate::runner::Runner;
use crate::{paths, smoke};

#[derive(Subcommand)]
pub enum Mode {
    /// Each method in turn at a constant arrival rate, on a coupon of its own
    Compare(Compare),
    /// Every member asks at second zero (the event-open scenario)
    Spike(Spike),
    /// Raise the rate until the failure rate or p99 passes its bound
    Capacity(Capacity),
    /// The short checked run `cargo xtask test` ends with
    Smoke,
}

#[derive(Args)]
pub struct Compare {
    #[command(flatten)]
    methods: Methods,
    /// Requests a second, every request from a distinct member
    #[arg(long, default_value_t = 300)]
    rate: u64,
    /// How long the load lasts: 500ms, 10s, 2m, 1h
    #[arg(long, default_value = "10s", value_parser = duration_text)]
    duration: String,
    /// The total of each method's coupon
    #[arg(long, default_value_t = 1000)]
    total: u64,
    #[command(flatten)]
    setup: Common,
}

#[derive(Args)]
pub struct Spike {
    #[command(flatten)]
    methods: Methods,
    /// Distinct members, each sending one request at second zero
    #[arg(long, default_value_t = 3000)]
    members: u64,
    /// The total of each method's coupon
    #[arg(long, default_value_t = 100)]
    total: u64,
    #[command(flatten)]
    setup: Common,
}

#[derive(Args)]
pub struct Capacity {
    #[command(flatten)]
    search: comparison::Capacity,
    #[command(flatten)]
    setup: Common,
}

/// `--methods A,B,...|all`.
#[derive(Args)]
struct Methods {
    /// The methods, comma separated, each on a coupon of its own; `all`:
    /// every method the server has loaded
    #[arg(long = "methods", value_name = "A,B,...|all", value_parser = method_list)]
    list: MethodList,
}

/// The methods named, in capitals.
#[derive(Clone)]
struct MethodList(Vec<String>);

fn method_list(text: &str) -> Result<MethodList, String> {
    let methods: Vec<String> = text
        .split(',')
        .map(|m| m.trim().to_ascii_uppercase())
        .filter(|m| !m.is_empty())
        .collect();
    if methods.is_empty() {
        return Err("name at least one method".into());
    }
    Ok(MethodList(methods))
}

/// What every mode shares: where the lab is, the faults, the report.
#[derive(Args)]
struct Common {
    /// The lab's hosts, comma separated: request n goes to host n mod
    /// hosts; the first sets the runs up and its result is reported, and
    /// each host's count of the requests is recorded beside it
    #[arg(
        long,
        value_name = "URL[,URL...]",
        default_value = "http://127.0.0.1:8080"
    )]
    base_url: String,
    /// Start a server of its own (own database, Redis db 10) instead of
    /// --base-url
    #[arg(long)]
    serve: bool,
    /// With --serve: one server per engine, each on a database of its own,
    /// every method run on each and reported side by side (METHOD@ENGINE);
    /// mariadb-si is MariaDB with innodb_snapshot_isolation on for the
    /// components' sessions, postgres the machine's PostgreSQL; galera a
    /// host on each node of `cargo xtask galera up`'s cluster, galera-1
    /// three hosts on its first node
    #[arg(long, value_name = "mariadb,mariadb-si,postgres,galera,galera-1", value_parser = engine_list)]
    engines: Option<EngineList>,
    /// Measure every method N times, each round of them all in turn; each
    /// figure is reported as the median with its range
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Share each run out over N k6 processes (k6's execution segments),
    /// which start their load at one moment; the report merges their
    /// records
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    k6_processes: u32,
    /// Where the report goes [default: loadtest/reports/<UTC time>/]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// k6 also writes its figures to this Prometheus remote-write URL
    /// (without one: the docker compose Prometheus);
    /// K6_PROMETHEUS_RW_SERVER_URL set does the same
    #[arg(long, value_name = "URL", num_args = 0..=1,
          default_missing_value = k6::DEFAULT_REMOTE_WRITE)]
    prometheus_rw: Option<String>,
    /// A fault injected into each method's run (repeatable; all but
    /// client-timeout need --serve). START and DURATION into the load:
    /// 300ms, 0.3s, 2s, 1m.
    ///
    ///   redis-cut@START+DURATION, db-cut@START+DURATION: the link drops, then comes back;
    ///   amqp-cut@START+DURATION, nats-cut@START+DURATION: the same for RabbitMQ and NATS;
    ///   redis-latency=MS@START+DURATION, db-latency=MS@START+DURATION: MS more on every answer;
    ///   kill-server@START: SIGKILL of the server, restarted at once;
    ///   kill-consumers@START: the same for the consumer processes (--roles-apart);
    ///   redis-restart@START: the run's own Redis shut down without saving, started again empty;
    ///   nats-restart@START: the run's own NATS killed, started again on its JetStream store;
    ///   client-timeout=MS: clients give up after MS
    #[arg(long = "fault", value_name = "SPEC", verbatim_doc_comment)]
    faults: Vec<String>,
    /// With --serve: `serve --consumers false` plus one `couponlab
    /// consume` process per consumer role
    #[arg(long)]
    roles_apart: bool,
    /// Report a method that breaks a guarantee it claims, but exit 0 (for
    /// demonstrations of what breaks)
    #[arg(long)]
    allow_broken: bool,
    /// Where the server behind --base-url keeps its data, read directly for
    /// the verification [default: DATABASE_URL, else the server's default]
    #[arg(long, value_name = "URL")]
    database_url: Option<String>,
    /// Where the server behind --base-url keeps its Redis data [default:
    /// REDIS_URL, else the server's default]
    #[arg(long, value_name = "URL")]
    redis_url: Option<String>,
    /// --redis-url is a Redis Cluster's seed nodes, comma separated
    #[arg(long)]
    redis_cluster: bool,
}

pub fn main(mode: Mode) -> anyhow::Result<()> {
    match mode {
        Mode::Smoke => smoke::smoke(),
        Mode::Compare(compare) => {
            let arrivals = Arrivals::Rate {
                rate: compare.rate,
                duration: compare.duration,
            };
            (compare.setup).compare(compare.methods, compare.total, arrivals)
        }
        Mode::Spike(spike) => {
            let arrivals = Arrivals::Spike {
                members: spike.members,
            };
            (spike.setup).compare(spike.methods, spike.total, arrivals)
        }
        Mode::Capacity(capacity) => {
            let rounds = capacity.setup.rounds;
            if capacity
                .setup
                .engines
                .as_ref()
                .is_some_and(|e| e.0.len() > 1)
            {
                bail!("capacity searches one engine at a time: run it once per --engines name");
            }
            (capacity.setup)
                .run(|runners| comparison::capacity(&runners[0], &capacity.search, rounds))
        }
    }
}

/// What the server reads when `DATABASE_URL` and `REDIS_URL` are not set.
const LOCAL_DATABASE: &str = "mysql://root@127.0.0.1:3306/couponlab";
const LOCAL_REDIS: &str = "redis://127.0.0.1:6379/0";

impl Common {
    /// `compare` or `spike`: each of `methods` on a coupon of `total`.
    fn compare(&self, methods: Methods, total: u64, arrivals: Arrivals) -> anyhow::Result<()> {
        let comparison = Comparison {
            methods: methods.list.0,
            total,
            arrivals,
            rounds: self.rounds,
        };
        self.run(|runners| comparison::compare(runners, &comparison))
    }

    /// Runs `load` on the runners these flags ask for (one per engine),
    /// stops their servers, and fails when a method broke a guarantee it
    /// claims (unless `--allow-broken`).
    fn run(&self, load: impl FnOnce(&[Runner]) -> anyhow::Result<Report>) -> anyhow::Result<()> {
        let runners = self.runners()?;
        let report = load(&runners)?;
        drop(runners);
        report.check_claims(self.allow_broken)
    }

    /// The runners these flags ask for: one, or one per `--engines` name,
    /// each writing into the one report.
    fn runners(&self) -> anyhow::Result<Vec<Runner>> {
        let out = self
            .out
            .clone()
            .unwrap_or_else(|| paths::new_report_dir(""));
        let Some(EngineList(engines)) = &self.engines else {
            return Ok(vec![self.runner(None, out)?]);
        };
        if !self.serve {
            bail!("--engines compares servers the run starts: add --serve");
        }
        engines
            .iter()
            .enumerate()
            .map(|(n, &engine)| {
                println!("engine {}:", engine.name());
                self.runner(Some((n, engine)), out.clone())
            })
            .collect()
    }

    /// The runner these flags ask for (on `engine`, the n-th named), its
    /// faults checked against it, writing into `out`.
    fn runner(&self, engine: Option<(usize, Engine)>, out: PathBuf) -> anyhow::Result<Runner> {
        let faults = FaultPlan::parse(&self.faults)?;
        faults.check(Setup {
            serve: self.serve,
            roles_apart: self.roles_apart,
        })?;
        for fault in faults.describe() {
            println!("fault {fault}");
        }
        let k6 = K6::find(self.remote_write())?;
        if self.serve && self.base_url.contains(',') {
            bail!("--serve runs one host of its own; several --base-url hosts are servers you run");
        }
        if self.serve && self.redis_cluster {
            bail!(
                "--serve runs on one Redis of its own; --redis-cluster is for servers you run on a cluster (--base-url)"
            );
        }
        let mut runner = if self.serve {
            Runner::serving(faults, self.roles_apart, k6, out, engine)?
        } else {
            let database_url = self
                .database_url
                .clone()
                .unwrap_or_else(|| env_or("DATABASE_URL", LOCAL_DATABASE));
            let redis_url = self
                .redis_url
                .clone()
                .unwrap_or_else(|| env_or("REDIS_URL", LOCAL_REDIS));
            Runner::against(
                &self.base_url,
                &database_url,
                &redis_url,
                self.redis_cluster,
                faults,
                k6,
                out,
            )?
        };
        runner.k6_processes = self.k6_processes;
        Ok(runner)
    }

    /// Where k6 also writes its figures: `--prometheus-rw [URL]`, else
    /// `K6_PROMETHEUS_RW_SERVER_URL` when set, else nowhere.
    fn remote_write(&self) -> Option<String> {
        self.prometheus_rw.clone().or_else(|| {
            std::env::var(k6::REMOTE_WRITE_ENV)
                .ok()
                .filter(|url| !url.is_empty())
        })
    }
}

fn env_or(key: &str, default: &str) -> String {
    std::env::var(key)
        .ok()
        .filter(|value| !value.is_empty())
        .unwrap_or_else(|| default.to_string())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::{Cli, Task};

    /// `cargo xtask loadtest <args>`, as the runner reads it.
    fn parse(args: &str) -> Result<Mode, clap::Error> {
        let words = ["cargo xtask", "loadtest"]
            .into_iter()
            .chain(args.split_whitespace());
        Cli::try_parse_from(words).map(|cli| match cli.task {
            Task::Loadtest {
                task: crate::Loadtest::Mode(mode),
            } => mode,
            _ => panic!("not loadtest"),
        })
    }

    #[test]
    fn a_mistyped_option_is_refused_by_name() {
        assert!(parse("compare --methods REDIS_LUA --rate 50 --serve").is_ok());
        let Ok(Mode::Spike(spike)) =
            parse("spike --methods A --serve --engines mariadb,mariadb-si")
        else {
            panic!("a spike on two engines")
        };
        assert_eq!(spike.setup.engines.map(|e| e.0.len()), Some(2));
        assert!(parse("spike --methods A --serve --engines oracle").is_err());
        let typo = parse("compare --methods REDIS_LUA --rat 50").err().unwrap();
        assert!(typo.to_string().contains("--rat"), "{typo}");
        // A rate means nothing to a spike: every member asks at once.
        assert!(parse("spike --methods REDIS_LUA --rate 50").is_err());
        assert!(parse("compare --methods REDIS_LUA --duration 10 ").is_err());
    }

    /// `cargo xtask loadtest compare <args>`'s flags.
    fn compare(args: &str) -> Compare {
        match parse(&format!("compare {args}")) {
            Ok(Mode::Compare(compare)) => compare,
            _ => panic!("not a comparison: {args}"),
        }
    }

    #[test]
    fn methods_are_read_in_capitals_and_the_last_of_a_flag_counts() {
        let Ok(Mode::Spike(spike)) =
            parse("spike --methods redis_lua,,Pessimistic --total 5 --total 7")
        else {
            panic!("a spike")
        };
        assert_eq!(spike.methods.list.0, ["REDIS_LUA", "PESSIMISTIC"]);
        assert_eq!((spike.total, spike.members), (7, 3000));
        let faults = compare("--methods A --fault kill-server@1s --fault db-cut@2s+1s");
        assert_eq!(faults.setup.faults, ["kill-server@1s", "db-cut@2s+1s"]);
    }

    #[test]
    fn prometheus_rw_takes_a_url_or_the_compose_default() {
        let given = compare("--methods REDIS_LUA --prometheus-rw http://p:9090/api/v1/write");
        assert_eq!(
            given.setup.remote_write().as_deref(),
            Some("http://p:9090/api/v1/write")
        );
        let bare = compare("--prometheus-rw --methods REDIS_LUA");
        assert_eq!(
            bare.setup.remote_write().as_deref(),
            Some(k6::DEFAULT_REMOTE_WRITE)
        );
    }
}
