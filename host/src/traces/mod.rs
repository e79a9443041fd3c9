//! Request traces: the capability calls each request's component made
//! ([`crate::runtime::trace`]), kept per coupon in this process's memory
//! for `GET /lab/coupons/{id}/traces` and for the anomalies a result names
//! ([`anomalies`]).
//!
//! What is kept, in bounded memory:
//!
//! - every request that was served (200 or 202), wrote something (a row, a
//!   reservation), failed (5xx), was compensated, or the confirmation of a
//!   202: the witnesses an anomaly is made of — up to
//!   `COUPONLAB_TRACES_PER_COUPON`, past which they are dropped and counted;
//! - the earliest-arriving sold-out refusal of each coupon, the one a
//!   member served out of turn is measured against;
//! - of the other refusals, a uniform sample (a reservoir of
//!   `COUPONLAB_TRACE_SAMPLE` per coupon and method);
//! - for the `COUPONLAB_TRACED_COUPONS` coupons traced last; an older
//!   coupon's traces go when a new one comes.

pub mod anomalies;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde::Serialize;
use utoipa::ToSchema;

use crate::metrics::Metrics;
use crate::outcome::{Ending, Outcome};
use crate::runtime::trace::{CallTrace, TracedCall};

/// The traces' settings.
#[derive(Debug, Clone, clap::Args)]
pub struct TraceArgs {
    /// Record each request's capability calls and keep its trace (`off`:
    /// neither, which is what the bench compares `on` with).
    #[arg(long = "traces", env = "COUPONLAB_TRACES", default_value = "on", value_parser = clap::builder::BoolishValueParser::new())]
    pub enabled: bool,
    /// Traces kept per coupon besides the sample: served, writing, failed
    /// and compensated requests and confirmations.
    #[arg(long, env = "COUPONLAB_TRACES_PER_COUPON", default_value_t = 2000)]
    pub traces_per_coupon: usize,
    /// Other refusals kept per coupon and method: a uniform sample.
    #[arg(long, env = "COUPONLAB_TRACE_SAMPLE", default_value_t = 16)]
    pub trace_sample: usize,
    /// Coupons whose traces are kept: those traced last. At the defaults
    /// they hold at most about 50 MiB (a REDIS_LUA issue's trace takes
    /// 1.6 KiB; `trace_cost_benchmark`).
    #[arg(long, env = "COUPONLAB_TRACED_COUPONS", default_value_t = 16)]
    pub traced_coupons: usize,
}

/// Why a trace was kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Kept {
    /// Issued or accepted.
    Served,
    /// Refused after writing: a row, a reservation, a commit.
    Wrote,
    /// Answered 5xx.
    Failed,
    /// Its call ended midway and its strategy compensated.
    Compensated,
    /// The asynchronous confirmation of a 202.
    Confirmation,
    /// The coupon's earliest-arriving sold-out refusal.
    FirstRefusal,
    /// One of a uniform sample of the other refusals.
    Sample,
}

impl Kept {
    fn label(self) -> &'static str {
        match self {
            Kept::Served => "served",
            Kept::Wrote => "wrote",
            Kept::Failed => "failed",
            Kept::Compensated => "compensated",
            Kept::Confirmation => "confirmation",
            Kept::FirstRefusal => "first-refusal",
            Kept::Sample => "sample",
        }
    }
}

/// One request's trace, or one 202's confirmation's.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestTrace {
    /// This process's number for the trace.
    pub id: u64,
    pub coupon_id: u64,
    pub member_id: u64,
    pub method: String,
    /// Arrival order on the coupon in this process (not for confirmations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// When the request arrived (confirmations: when the call started),
    /// microseconds since the Unix epoch: the recorder's clock.
    pub arrived_us: u64,
    /// When the component's call started, on the same clock: a call's
    /// `startUs` counts from here.
    pub started_us: u64,
    pub duration_us: u64,
    /// The outcome's name (`ISSUED`, `SOLD_OUT`, ...).
    pub outcome: String,
    pub kept: Kept,
    pub calls: Vec<TracedCall>,
    /// Capability calls past the trace's cap, counted, not kept.
    pub calls_dropped: u32,
}

#[derive(Default)]
struct CouponTraces {
    /// When it was last traced, by the store's tick.
    touched: u64,
    kept: Vec<Arc<RequestTrace>>,
    first_refusal: Option<Arc<RequestTrace>>,
    samples: HashMap<String, Reservoir>,
}

#[derive(Default)]
struct Reservoir {
    seen: u64,
    traces: Vec<Arc<RequestTrace>>,
}

pub struct Traces {
    args: TraceArgs,
    coupons: Mutex<HashMap<u64, CouponTraces>>,
    next_id: AtomicU64,
    metrics: Arc<Metrics>,
}

impl Traces {
    pub fn new(args: TraceArgs, metrics: Arc<Metrics>) -> Self {
        // Shown at 0 from the start, so a rate over them reads 0.
        for reason in ["not-sampled", "coupon-full", "coupon-evicted"] {
            metrics.traces_dropped.with_label_values(&[reason]);
        }
        metrics
            .traces_kept
            .with_label_values(&[Kept::Served.label()]);
        Self {
            args,
            coupons: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            metrics,
        }
    }

    pub fn enabled(&self) -> bool {
        self.args.enabled
    }

    /// Keeps the trace of a request that has ended, or drops it.
    pub fn request(&self, ending: &Ending, trace: CallTrace) {
        if !self.args.enabled {
            return;
        }
        let status = ending.outcome.status();
        let keep = if status.is_success() {
            Some(Kept::Served)
        } else if ending.compensations > 0 {
            Some(Kept::Compensated)
        } else if status.is_server_error() {
            Some(Kept::Failed)
        } else if wrote(&trace.calls) {
            Some(Kept::Wrote)
        } else {
            None
        };
        let sold_out = ending.outcome == Outcome::SoldOut;
        self.store(ending, trace, keep, sold_out);
    }

    /// Keeps the trace of a 202's confirmation.
    pub fn confirmation(&self, ending: &Ending, trace: CallTrace) {
        if self.args.enabled {
            self.store(ending, trace, Some(Kept::Confirmation), false);
        }
    }

    fn store(&self, ending: &Ending, trace: CallTrace, keep: Option<Kept>, sold_out: bool) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let duration = trace.started.elapsed();
        let started_us = wall_us(trace.started);
        // A confirmation arrived as its call started.
        let arrived_us = ending.arrived.map_or(started_us, |arrived| arrived.at_us);
        let mut calls = trace.calls;
        // Kept for minutes: no room for calls that never came.
        calls.shrink_to_fit();
        let built = |kept| {
            Arc::new(RequestTrace {
                id,
                coupon_id: ending.coupon_id,
                member_id: ending.member_id,
                method: ending.method.to_string(),
                sequence: ending.arrived.map(|arrived| arrived.sequence),
                arrived_us: arrived_us.min(started_us),
                started_us,
                duration_us: duration.as_micros() as u64,
                outcome: ending.outcome.name().to_string(),
                kept,
                calls,
                calls_dropped: trace.calls_dropped,
            })
        };
        let mut coupons = self.coupons.lock();
        let coupon = self.coupon(&mut coupons, ending.coupon_id);
        let kept = match keep {
            Some(_) if coupon.kept.len() >= self.args.traces_per_coupon => None,
            Some(reason) => {
                coupon.kept.push(built(reason));
                Some(reason)
            }
            None if sold_out
                && coupon
                    .first_refusal
                    .as_ref()
                    .is_none_or(|first| arrived_us < first.arrived_us) =>
            {
                coupon.first_refusal = Some(built(Kept::FirstRefusal));
                Some(Kept::FirstRefusal)
            }
            None => {
                let reservoir = coupon.samples.entry(ending.method.to_string()).or_default();
                reservoir.seen += 1;
                let sample = self.args.trace_sample;
                if reservoir.traces.len() < sample {
                    reservoir.traces.push(built(Kept::Sample));
                    Some(Kept::Sample)
                } else {
                    // Reservoir sampling: the n-th refusal replaces one of
                    // the sample with probability sample / n.
                    let slot = (pseudo_random(id) % reservoir.seen) as usize;
                    (slot < sample).then(|| {
                        reservoir.traces[slot] = built(Kept::Sample);
                        Kept::Sample
                    })
                }
            }
        };
        drop(coupons);
        match kept {
            Some(reason) => self
                .metrics
                .traces_kept
                .with_label_values(&[reason.label()]),
            None => self.metrics.traces_dropped.with_label_values(&[match keep {
                Some(_) => "coupon-full",
                None => "not-sampled",
            }]),
        }
        .inc();
    }

    /// The coupon's traces, making room for them among the coupons traced
    /// last.
    fn coupon<'a>(
        &self,
        coupons: &'a mut HashMap<u64, CouponTraces>,
        id: u64,
    ) -> &'a mut CouponTraces {
        let tick = self.next_id.load(Ordering::Relaxed);
        if !coupons.contains_key(&id) && coupons.len() >= self.args.traced_coupons.max(1) {
            let oldest = coupons
                .iter()
                .min_by_key(|(_, c)| c.touched)
                .map(|(id, _)| *id);
            if let Some(oldest) = oldest {
                coupons.remove(&oldest);
                self.metrics
                    .traces_dropped
                    .with_label_values(&["coupon-evicted"])
                    .inc();
            }
        }
        let coupon = coupons.entry(id).or_default();
        coupon.touched = tick;
        coupon
    }

    /// Every trace kept for `coupon_id`, in the order their calls started.
    pub fn of_coupon(&self, coupon_id: u64) -> Vec<Arc<RequestTrace>> {
        let coupons = self.coupons.lock();
        let Some(coupon) = coupons.get(&coupon_id) else {
            return Vec::new();
        };
        let mut all: Vec<Arc<RequestTrace>> = coupon
            .kept
            .iter()
            .chain(&coupon.first_refusal)
            .chain(coupon.samples.values().flat_map(|r| &r.traces))
            .cloned()
            .collect();
        drop(coupons);
        all.sort_by_key(|trace| (trace.started_us, trace.id));
        all
    }

    /// Traces kept now, over every coupon.
    pub fn count(&self) -> usize {
        let coupons = self.coupons.lock();
        coupons
            .values()
            .map(|c| {
                c.kept.len()
                    + usize::from(c.first_refusal.is_some())
                    + c.samples.values().map(|r| r.traces.len()).sum::<usize>()
            })
            .sum()
    }

    /// Forgets every trace: the lab's data was reset.
    pub fn clear(&self) {
        self.coupons.lock().clear();
    }
}

/// Whether a trace wrote: a statement that changed rows, a commit after
/// one, or a Redis write that took effect.
fn wrote(calls: &[TracedCall]) -> bool {
    const REDIS_WRITES: [&str; 8] = [
        "SADD", "SET", "INCR", "INCRBY", "DECR", "DECRBY", "XADD", "HSET",
    ];
    calls.iter().any(|call| {
        &*call.reply == "ok"
            && match call.capability {
                "sql" => {
                    matches!(&*call.op, "INSERT" | "UPDATE" | "DELETE")
                        && call.rows.unwrap_or(0) > 0
                }
                "redis" => {
                    REDIS_WRITES.contains(&&*call.op)
                        && call.read.get("reply").is_none_or(|&n| n > 0)
                }
                _ => false,
            }
    })
}

/// A well-mixed number from `seed` (splitmix64): the reservoir's choice
/// needs no more than that.
fn pseudo_random(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `at` on the wall clock, in microseconds since the Unix epoch, through
/// one anchor taken once: every trace's times are on the same monotonic
/// clock, so two calls' order is never a clock's jitter.
fn wall_us(at: Instant) -> u64 {
    static ANCHOR: LazyLock<(Instant, u64)> = LazyLock::new(|| {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |since| since.as_micros() as u64);
        (Instant::now(), wall)
    });
    let (instant, wall) = *ANCHOR;
    match at.checked_duration_since(instant) {
        Some(after) => wall + after.as_micros() as u64,
        None => wall.saturating_sub(instant.duration_since(at).as_micros() as u64),
    }
}

#[cfg(test)]
mod tests;
