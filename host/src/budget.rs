//! The latency budget of a request, stage by stage, for `cargo xtask bench
//! --budget`: with `COUPONLAB_BUDGET=<file>` a server times where each
//! strategy call's request spends its time and, when it shuts down, writes
//! each method's stages, their means and medians, to that file as JSON. Unset
//! (the default), nothing is timed: a mark costs one task-local read.
//!
//! A request carries a [`Stopwatch`] in a task-local; each mark charges the
//! time since the previous mark to the stage that just ended, so the stages
//! add up to the time the server held the request, from the moment the
//! HTTP layer handed it over to the moment its response was built. Inside
//! a call, wasmtime's call hook marks every crossing between the host and
//! the guest. The native twin marks the same stages it has.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use parking_lot::Mutex;
use wasmtime::CallHook;

/// Where a request's time goes, in the order it goes there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// From the router to the handler's first line: the task the handler
    /// runs in started, the route matched, the path and JSON body read.
    Extract,
    /// The handler before the call: checks, the method looked up, the
    /// arrival recorded.
    Handler,
    /// A fresh store: its host state, WASI context and limits.
    Store,
    /// A pool slot taken and the component instantiated in it.
    Instantiate,
    /// The host's side of entering and leaving the guest outside host
    /// calls: the export looked up, arguments lowered, results lifted.
    Boundary,
    /// Wasm running.
    Guest,
    /// Host calls, each with its round trip to Redis or the database.
    HostCalls,
    /// The store dropped (its slot's memory reset in place) and what the
    /// call left open cleaned up.
    Teardown,
    /// After the call: the trace kept, the request recorded, the metrics.
    Record,
    /// The answer turned into its response, back through the middleware.
    Respond,
}

impl Stage {
    pub const ALL: [Stage; 10] = [
        Stage::Extract,
        Stage::Handler,
        Stage::Store,
        Stage::Instantiate,
        Stage::Boundary,
        Stage::Guest,
        Stage::HostCalls,
        Stage::Teardown,
        Stage::Record,
        Stage::Respond,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Stage::Extract => "extract",
            Stage::Handler => "handler",
            Stage::Store => "store",
            Stage::Instantiate => "instantiate",
            Stage::Boundary => "boundary",
            Stage::Guest => "guest",
            Stage::HostCalls => "host-calls",
            Stage::Teardown => "teardown",
            Stage::Record => "record",
            Stage::Respond => "respond",
        }
    }
}

/// One request's stages so far.
pub struct Stopwatch {
    last: Instant,
    spent: [Duration; Stage::ALL.len()],
    /// Host calls the guest is inside (a host call's result lowered into
    /// the guest enters the guest again).
    depth: u32,
    /// The method whose call the request reached (the twin: its Redis
    /// call); the others (scrapes, the console) are not budgeted.
    method: Option<Arc<str>>,
}

impl Stopwatch {
    fn start() -> Self {
        Self {
            last: Instant::now(),
            spent: [Duration::ZERO; Stage::ALL.len()],
            depth: 0,
            method: None,
        }
    }

    fn lap(&mut self, stage: Stage) {
        let now = Instant::now();
        self.spent[stage as usize] += now - self.last;
        self.last = now;
    }
}

tokio::task_local! {
    static STOPWATCH: RefCell<Option<Stopwatch>>;
}

/// The budget this process keeps, if `COUPONLAB_BUDGET` names a file.
static BUDGET: LazyLock<Option<Budget>> = LazyLock::new(|| {
    let file = std::env::var_os("COUPONLAB_BUDGET")?;
    Some(Budget {
        file: PathBuf::from(file),
        methods: Mutex::new(BTreeMap::new()),
    })
});

struct Budget {
    file: PathBuf,
    methods: Mutex<BTreeMap<Arc<str>, Totals>>,
}

/// Nanoseconds per stage, and of the whole, over every budgeted request.
struct Totals {
    stages: Vec<Histogram<u64>>,
    total: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    // 1 ns to 10 s, three significant figures.
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("valid histogram bounds")
}

impl Default for Totals {
    fn default() -> Self {
        Self {
            stages: Stage::ALL.iter().map(|_| histogram()).collect(),
            total: histogram(),
        }
    }
}

/// Whether this process keeps a budget.
pub fn enabled() -> bool {
    BUDGET.is_some()
}

/// Runs `request` with a stopwatch when the budget is kept, started now
/// (before the task that runs it is spawned, so its start is counted); the
/// request's stages are added to the budget when `request` has finished.
pub fn timed<R>(request: impl Future<Output = R>) -> impl Future<Output = R> {
    let stopwatch = BUDGET.as_ref().map(|_| Stopwatch::start());
    async move {
        let Some(stopwatch) = stopwatch else {
            return request.await;
        };
        let (answer, stopwatch) = STOPWATCH
            .scope(RefCell::new(Some(stopwatch)), async {
                let answer = request.await;
                lap(Stage::Respond);
                (answer, STOPWATCH.with(|cell| cell.borrow_mut().take()))
            })
            .await;
        if let (Some(budget), Some(stopwatch)) = (BUDGET.as_ref(), stopwatch)
            && let Some(method) = &stopwatch.method
        {
            budget.add(method, &stopwatch);
        }
        answer
    }
}

impl Budget {
    fn add(&self, method: &Arc<str>, stopwatch: &Stopwatch) {
        let mut methods = self.methods.lock();
        let totals = methods.entry(method.clone()).or_default();
        let mut total = 0;
        for (histogram, spent) in totals.stages.iter_mut().zip(stopwatch.spent) {
            let nanos = spent.as_nanos() as u64;
            total += nanos;
            histogram.saturating_record(nanos);
        }
        totals.total.saturating_record(total);
    }
}

/// The request reaches `method`'s call: the handler's stage ends, and the
/// request is budgeted under the method.
pub fn call_starts(method: &Arc<str>) {
    let _ = STOPWATCH.try_with(|cell| {
        if let Some(stopwatch) = cell.borrow_mut().as_mut() {
            stopwatch.lap(Stage::Handler);
            stopwatch.method.get_or_insert_with(|| method.clone());
        }
    });
}

/// Charges the time since the request's previous mark to `stage`.
pub fn lap(stage: Stage) {
    let _ = STOPWATCH.try_with(|cell| {
        if let Some(stopwatch) = cell.borrow_mut().as_mut() {
            stopwatch.lap(stage);
        }
    });
}

/// wasmtime's call hook: each crossing into the guest ends host time (a
/// host call's, or the boundary's), each crossing out ends guest time.
pub fn crossing(hook: CallHook) {
    let _ = STOPWATCH.try_with(|cell| {
        let mut cell = cell.borrow_mut();
        let Some(stopwatch) = cell.as_mut() else {
            return;
        };
        if hook.exiting_host() {
            let host = if stopwatch.depth > 0 {
                Stage::HostCalls
            } else {
                Stage::Boundary
            };
            stopwatch.lap(host);
            if matches!(hook, CallHook::ReturningFromHost) {
                stopwatch.depth = stopwatch.depth.saturating_sub(1);
            }
        } else {
            stopwatch.lap(Stage::Guest);
            if matches!(hook, CallHook::CallingHost) {
                stopwatch.depth += 1;
            }
        }
    });
}

/// Writes the budget kept so far to its file, if one is kept: per method,
/// per stage (and for the whole) the requests, the mean and the median in
/// µs.
pub fn write() -> anyhow::Result<()> {
    let Some(budget) = BUDGET.as_ref() else {
        return Ok(());
    };
    let methods: serde_json::Map<String, serde_json::Value> = budget
        .methods
        .lock()
        .iter()
        .map(|(method, totals)| (method.to_string(), totals.figures()))
        .collect();
    let written = serde_json::json!({ "methods": methods });
    std::fs::write(&budget.file, serde_json::to_vec_pretty(&written)?)
        .with_context(|| format!("cannot write the budget to {}", budget.file.display()))
}

impl Totals {
    fn figures(&self) -> serde_json::Value {
        let figures = |histogram: &Histogram<u64>| {
            serde_json::json!({
                "mean_us": histogram.mean() / 1e3,
                "p50_us": histogram.value_at_quantile(0.5) as f64 / 1e3,
            })
        };
        let stages: serde_json::Map<String, serde_json::Value> = Stage::ALL
            .iter()
            .zip(&self.stages)
            .map(|(stage, histogram)| (stage.name().to_string(), figures(histogram)))
            .collect();
        serde_json::json!({
            "requests": self.total.len(),
            "total": figures(&self.total),
            "stages": stages,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pause(ms: u64) {
        std::thread::sleep(Duration::from_millis(ms));
    }

    /// A call's crossings, as wasmtime reports them for a guest that makes
    /// one host call whose result is lowered into it (a realloc: the
    /// guest entered again from inside the host call).
    #[tokio::test]
    async fn crossings_charge_the_guest_and_the_host_calls_apart_and_add_up() {
        let started = Instant::now();
        let stopwatch = STOPWATCH
            .scope(RefCell::new(Some(Stopwatch::start())), async {
                pause(2);
                lap(Stage::Instantiate);
                crossing(CallHook::CallingWasm);
                pause(3);
                crossing(CallHook::CallingHost);
                pause(5);
                crossing(CallHook::CallingWasm);
                pause(1);
                crossing(CallHook::ReturningFromWasm);
                pause(4);
                crossing(CallHook::ReturningFromHost);
                pause(2);
                crossing(CallHook::ReturningFromWasm);
                lap(Stage::Boundary);
                STOPWATCH.with(|cell| cell.borrow_mut().take()).unwrap()
            })
            .await;
        let elapsed = started.elapsed();
        let spent = |stage: Stage| stopwatch.spent[stage as usize];
        let ms = Duration::from_millis;
        assert!(spent(Stage::Instantiate) >= ms(2));
        // 3 before the host call, 1 inside it, 2 after it.
        assert!(spent(Stage::Guest) >= ms(6), "{:?}", stopwatch.spent);
        // 5 before the realloc, 4 after it.
        assert!(spent(Stage::HostCalls) >= ms(9), "{:?}", stopwatch.spent);
        assert!(spent(Stage::Boundary) < ms(2), "{:?}", stopwatch.spent);
        assert_eq!(stopwatch.depth, 0);
        let total: Duration = stopwatch.spent.iter().sum();
        assert!(total <= elapsed && total >= ms(17));
        // No strategy call began: not budgeted.
        assert!(stopwatch.method.is_none());
    }
}
