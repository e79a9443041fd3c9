//! Not a pass/fail test: what wasmtime itself costs for one call of
//! REDIS_LUA's component, in Rust, Python and JavaScript, with nothing of
//! the lab around it — the engine's settings the lab uses, a store (with a
//! WASI context built on the component's first WASI call, as the lab's),
//! `InstancePre::instantiate`, one export call (`describe`, which calls no
//! import), the store dropped (its slot reset).
//! `cargo xtask bench --budget` runs it and sets its lines beside the
//! lab's budget, as the floor a call in each language cannot go below.
//! `cargo test --release --workspace --lib -- wasmtime_call_benchmark --ignored --nocapture`

use std::time::{Duration, Instant};

use wasmtime::component::types::ComponentItem;
use wasmtime::component::{Component, Linker, ResourceTable, ResourceType};
use wasmtime::{Engine, Store};
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::engine::{Limits, engine_config};
use super::exports::StrategyExport;

/// A store's data with WASI, built when first asked for, and nothing else.
struct Bare {
    wasi: Option<WasiCtx>,
    table: ResourceTable,
}

impl WasiView for Bare {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: self.wasi.get_or_insert_with(wasi),
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

/// Each component measured: the method it serves, its file (in
/// `strategies/dist`, or in `COUPONLAB_BENCH_COMPONENTS`: other builds of
/// them, to set a build option beside the default), and how many calls are
/// timed (an interpreter's call costs a hundred times a Rust one).
const COMPONENTS: [(&str, &str, u32); 3] = [
    ("REDIS_LUA", "redis_lua.wasm", 20_000),
    ("PY_REDIS_LUA", "py_redis_lua.wasm", 2_000),
    ("JS_REDIS_LUA", "js_redis_lua.wasm", 2_000),
];

/// WASI contexts built to time one alone.
const WASI_CONTEXTS: u32 = 20_000;

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
    let started = Instant::now();
    for _ in 0..WASI_CONTEXTS {
        std::hint::black_box(wasi());
    }
    let wasi_alone = micros(started.elapsed(), WASI_CONTEXTS);
    for (method, file, calls) in COMPONENTS {
        let [store, instantiate, call, drop] = time_calls(&engine, file, calls).await;
        println!(
            "wasmtime alone, {method}: store {store:.1} µs (a WASI context, built once a component calls WASI: {wasi_alone:.1} µs), \
             instantiate {instantiate:.1} µs, describe() {call:.1} µs, drop {drop:.1} µs: {:.1} µs a call",
            store + instantiate + call + drop
        );
    }
}

/// The couponlab capabilities the component imports, each function a trap:
/// describe() calls none of them. (wasmtime's `define_unknown_imports_as_traps`
/// would also stub the WASI interfaces an interpreter imports at a newer
/// patch version than wasmtime-wasi's, which the lab's linker serves.)
fn stub_capabilities(engine: &Engine, component: &Component, linker: &mut Linker<Bare>) {
    struct Stubbed;
    let component_type = component.component_type();
    let imports = component_type.imports(engine);
    for (name, item) in imports.filter(|(name, _)| name.starts_with("couponlab:")) {
        let ComponentItem::ComponentInstance(interface) = item.ty else {
            continue;
        };
        let mut instance = linker.instance(name).unwrap();
        for (export, item) in interface.exports(engine) {
            match item.ty {
                ComponentItem::ComponentFunc(_) => instance
                    .func_new(export, |_, _, _, _| {
                        Err(wasmtime::Error::msg("a stubbed capability"))
                    })
                    .unwrap(),
                ComponentItem::Resource(_) => instance
                    .resource(export, ResourceType::host::<Stubbed>(), |_, _| Ok(()))
                    .unwrap(),
                _ => {}
            }
        }
    }
}

/// Mean µs of a call's store, instantiation, `describe()` and drop, over
/// `calls` calls of the component in `file` after a tenth as many unmeasured.
async fn time_calls(engine: &Engine, file: &str, calls: u32) -> [f64; 4] {
    let dir = std::env::var("COUPONLAB_BENCH_COMPONENTS")
        .unwrap_or_else(|_| format!("{}/../strategies/dist", env!("CARGO_MANIFEST_DIR")));
    let path = format!("{dir}/{file}");
    let component = Component::from_file(engine, &path)
        .unwrap_or_else(|err| panic!("{path}: {err} (run `cargo xtask strategies`)"));
    let mut linker = Linker::<Bare>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
    stub_capabilities(engine, &component, &mut linker);
    let pre = linker.instantiate_pre(&component).unwrap();
    let export = StrategyExport::find(&component).unwrap().unwrap();

    let warm_up = calls / 10;
    let mut spent = [Duration::ZERO; 4];
    for call in 0..warm_up + calls {
        let started = Instant::now();
        let mut store = Store::new(
            engine,
            Bare {
                wasi: None,
                table: ResourceTable::new(),
            },
        );
        store.set_epoch_deadline(1);
        let stored = Instant::now();
        let instance = pre.instantiate_async(&mut store).await.unwrap();
        let instantiated = Instant::now();
        export.describe(&mut store, &instance).await.unwrap();
        let called = Instant::now();
        drop(store);
        let dropped = Instant::now();
        if call >= warm_up {
            spent[0] += stored - started;
            spent[1] += instantiated - stored;
            spent[2] += called - instantiated;
            spent[3] += dropped - called;
        }
    }
    spent.map(|spent| micros(spent, calls))
}
