//! Not a pass/fail test: what wasmtime itself costs for one call of
//! REDIS_LUA's component, with nothing of the lab around it — the engine's
//! settings the lab uses, a store with a WASI context, `InstancePre::
//! instantiate`, one export call (`describe`, which calls no import), the
//! store dropped. `cargo xtask bench --budget` runs it and sets its line
//! beside the lab's budget, as the floor a call cannot go below.
//! `cargo test --release --workspace --lib -- wasmtime_call_benchmark --ignored --nocapture`

use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::strategy;
use super::engine::{Limits, engine_config};

/// A store's data with WASI and nothing else.
struct Bare {
    wasi: WasiCtx,
    table: ResourceTable,
}

impl WasiView for Bare {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// The WASI context the lab gives each call: nothing granted.
fn wasi() -> WasiCtx {
    WasiCtx::builder()
        .allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .build()
}

const WARM_UP: u32 = 2_000;
const CALLS: u32 = 20_000;

fn micros(spent: Duration, calls: u32) -> f64 {
    spent.as_secs_f64() * 1e6 / f64::from(calls)
}

#[tokio::test(flavor = "current_thread")]
#[ignore = "benchmark; run explicitly"]
async fn wasmtime_call_benchmark() {
    let limits = Limits {
        timeout: Duration::from_secs(10),
        memory_bytes: 32 << 20,
        max_instances: 1000,
        trace_calls: false,
    };
    let engine = Engine::new(&engine_config(&limits)).unwrap();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../strategies/target/wasm32-wasip2/release/redis_lua.wasm"
    );
    let component = Component::from_file(&engine, path)
        .unwrap_or_else(|err| panic!("{path}: {err} (run `cargo xtask strategies`)"));
    let mut linker = Linker::<Bare>::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
    // The couponlab capabilities: describe() calls none of them.
    linker.define_unknown_imports_as_traps(&component).unwrap();
    let pre = linker.instantiate_pre(&component).unwrap();
    let indices = strategy::GuestIndices::new(&pre).unwrap();

    // Store, instantiate, call, drop.
    let mut spent = [Duration::ZERO; 4];
    for call in 0..WARM_UP + CALLS {
        let started = Instant::now();
        let mut store = Store::new(
            &engine,
            Bare {
                wasi: wasi(),
                table: ResourceTable::new(),
            },
        );
        store.set_epoch_deadline(1);
        let stored = Instant::now();
        let instance = pre.instantiate_async(&mut store).await.unwrap();
        let instantiated = Instant::now();
        let guest = indices.load(&mut store, &instance).unwrap();
        guest.call_describe(&mut store).await.unwrap();
        let called = Instant::now();
        drop(store);
        let dropped = Instant::now();
        if call >= WARM_UP {
            spent[0] += stored - started;
            spent[1] += instantiated - stored;
            spent[2] += called - instantiated;
            spent[3] += dropped - called;
        }
    }
    let started = Instant::now();
    for _ in 0..CALLS {
        std::hint::black_box(wasi());
    }
    let wasi_alone = started.elapsed();
    let [store, instantiate, call, drop] = spent.map(|spent| micros(spent, CALLS));
    println!(
        "wasmtime alone: store {store:.1} µs (its WASI context {:.1} µs), instantiate {instantiate:.1} µs, \
         describe() {call:.1} µs, drop {drop:.1} µs: {:.1} µs a call",
        micros(wasi_alone, CALLS),
        store + instantiate + call + drop
    );
}
