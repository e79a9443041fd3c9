//! What the bench writes: each figure the median of its rounds, the lab
//! against its twin, traces on against off, the sold-out path in each
//! language, and every run.

use std::fmt::Write as _;

use super::wrk::Run;
use super::{LANGUAGES, Options, UNTRACED};
use crate::spread::Spread;

/// Every run, by pair and server.
#[derive(Default)]
pub(super) struct Report {
    runs: Vec<(&'static str, &'static str, Run, Run)>,
}

impl Report {
    /// What request traces cost: couponlab against itself with
    /// `COUPONLAB_TRACES=off`, at one connection (latency) and saturated
    /// (the time per request the two cores spend, 2 s / req/s).
    fn traces_cost(&self) -> String {
        let mut out = String::from(
            "\nRequest traces, on (the default) against `COUPONLAB_TRACES=off`:\n\n| pair | p50 c=1 on | off | added | req/s on | off | core time per request on | off | added |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        for pair in ["sold out", "issue"] {
            let p50 = |server| self.median(pair, server, |_, s| s.p50_us);
            let rps = |server| self.median(pair, server, |l, _| l.requests_per_s);
            let (on, off) = (p50("couponlab"), p50(UNTRACED));
            let (rps_on, rps_off) = (rps("couponlab"), rps(UNTRACED));
            let core_us = |rps: f64| 2e6 / rps;
            let _ = writeln!(
                out,
                "| {pair} | {on:.0} µs | {off:.0} µs | {:+.0} µs | {rps_on:.0} | {rps_off:.0} | {:.1} µs | {:.1} µs | {:+.1} µs |",
                on - off,
                core_us(rps_on),
                core_us(rps_off),
                core_us(rps_on) - core_us(rps_off),
            );
        }
        out
    }

    /// The sold-out path in Python and JavaScript against REDIS_LUA in
    /// Rust, on the same server in the same run.
    fn languages(&self) -> String {
        let rust_rps = self.median("sold out", "couponlab", |l, _| l.requests_per_s);
        let rust_p50 = self.median("sold out", "couponlab", |_, s| s.p50_us);
        let mut out = format!(
            "\nThe sold-out path in other languages (the same `lua/reserve.lua`), against REDIS_LUA in Rust on the same server:\n\n| method | req/s | of Rust's | p50 c=1 | added to Rust's |\n|---|---:|---:|---:|---:|\n| REDIS_LUA | {rust_rps:.0} | 1.00× | {rust_p50:.0} µs | — |\n"
        );
        for (method, pair) in LANGUAGES {
            let rps = self.median(pair, "couponlab", |l, _| l.requests_per_s);
            let p50 = self.median(pair, "couponlab", |_, s| s.p50_us);
            if rps.is_nan() {
                continue;
            }
            let _ = writeln!(
                out,
                "| {method} | {rps:.0} | {:.2}× | {p50:.0} µs | {:+.0} µs |",
                rps / rust_rps,
                p50 - rust_p50
            );
        }
        out
    }

    pub(super) fn add(
        &mut self,
        pair: &'static str,
        server: &'static str,
        loaded: Run,
        single: Run,
    ) {
        self.runs.push((pair, server, loaded, single));
    }

    /// The median of `figure` over a server's rounds of a pair.
    pub(super) fn median(
        &self,
        pair: &str,
        server: &str,
        figure: impl Fn(&Run, &Run) -> f64,
    ) -> f64 {
        let mut values = self.values(pair, server, figure);
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied().unwrap_or(f64::NAN)
    }

    /// `figure` over a server's rounds of a pair, in the order they ran.
    fn values(&self, pair: &str, server: &str, figure: impl Fn(&Run, &Run) -> f64) -> Vec<f64> {
        self.runs
            .iter()
            .filter(|(p, s, ..)| *p == pair && *s == server)
            .map(|(_, _, loaded, single)| figure(loaded, single))
            .collect()
    }

    /// `compare(lab, twin)` of each round's couponlab and twin figures (run
    /// one after the other), as its median and range over the rounds, each
    /// written by `show`.
    fn per_round(
        &self,
        pair: &str,
        figure: impl Fn(&Run, &Run) -> f64,
        compare: impl Fn(f64, f64) -> f64,
        show: impl Fn(f64) -> String,
    ) -> String {
        let lab = self.values(pair, "couponlab", &figure);
        let twin = self.values(pair, "native twin", &figure);
        let compared = lab.iter().zip(&twin).map(|(l, t)| compare(*l, *t));
        Spread::of(compared).map_or_else(|| "—".to_string(), |spread| spread.show(show))
    }

    pub(super) fn markdown(
        &self,
        options: &Options,
        raw: f64,
        rss: &[(&str, Option<u64>)],
    ) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Measured by `cargo xtask bench --duration {} --rounds {} --connections {}` on this \
             machine (2 cores, server, twin, wrk, MariaDB and Redis together), alternating \
             couponlab and `native-twin` run by run; each figure is the median of the rounds, \
             and each comparison of the two also its range over the rounds (min–max).\n",
            options.duration, options.rounds, options.connections
        );
        let _ = writeln!(
            out,
            "| pair | couponlab req/s | twin req/s | throughput ratio | couponlab p99 | twin p99 | p99 ratio | couponlab p50 c=1 | twin p50 c=1 | overhead per request |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for pair in ["sold out", "issue"] {
            // What counts for the issue pair is what issued.
            let answered = |run: &Run| match pair {
                "issue" => run.requests_per_s - run.refused_per_s,
                _ => run.requests_per_s,
            };
            let lab_rps = self.median(pair, "couponlab", |l, _| answered(l));
            let twin_rps = self.median(pair, "native twin", |l, _| answered(l));
            let lab_p99 = self.median(pair, "couponlab", |l, _| l.p99_us);
            let twin_p99 = self.median(pair, "native twin", |l, _| l.p99_us);
            let lab_p50 = self.median(pair, "couponlab", |_, s| s.p50_us);
            let twin_p50 = self.median(pair, "native twin", |_, s| s.p50_us);
            let ratio = |lab: f64, twin: f64| lab / twin;
            let times = |v: f64| format!("{v:.2}×");
            let throughput = self.per_round(pair, |l, _| answered(l), ratio, times);
            let p99 = self.per_round(pair, |l, _| l.p99_us, ratio, times);
            let overhead = self.per_round(
                pair,
                |_, s| s.p50_us,
                |lab, twin| lab - twin,
                |v| format!("{v:+.0} µs"),
            );
            let _ = writeln!(
                out,
                "| {pair} | {lab_rps:.0} | {twin_rps:.0} | {} | {:.2} ms | {:.2} ms | {} | {lab_p50:.0} µs | {twin_p50:.0} µs | {} |",
                throughput,
                lab_p99 / 1000.0,
                twin_p99 / 1000.0,
                p99,
                overhead,
            );
        }
        out.push_str(&self.traces_cost());
        out.push_str(&self.languages());
        let _ = writeln!(
            out,
            "\n`redis-benchmark` of the same EVALSHA (50 clients): {raw:.0} requests/s — the \
             physical limit of the sold-out path on one Redis core.\n"
        );
        for (server, kib) in rss {
            if let Some(kib) = kib {
                let _ = writeln!(
                    out,
                    "- resident memory of {server} after the run: {:.0} MiB",
                    *kib as f64 / 1024.0
                );
            }
        }
        out.push_str("\nEvery run (refused: answers other than 2xx, the sold-out pair's 409s):\n\n| pair | server | c | req/s | refused/s | p50 | p99 | c=1 p50 |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
        for (pair, server, loaded, single) in &self.runs {
            let _ = writeln!(
                out,
                "| {pair} | {server} | {} | {:.0} | {:.0} | {:.0} µs | {:.0} µs | {:.0} µs |",
                options.connections,
                loaded.requests_per_s,
                loaded.refused_per_s,
                loaded.p50_us,
                loaded.p99_us,
                single.p50_us
            );
        }
        out
    }
}
