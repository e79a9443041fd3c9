use super::*;

fn row(file: &str, function: &str) -> &'static str {
    ROWS.get(row_of(file, function))
        .map_or("other", |(row, _)| *row)
}

#[test]
fn code_belongs_to_the_source_file_it_was_written_in() {
    // wasmtime's code inlined into the lab's function is wasmtime's.
    assert_eq!(
        row(
            "/work/vendor/wasmtime/src/runtime/component/instance.rs",
            "couponlab::runtime::call::<impl couponlab::runtime::engine::Runtime>::instantiate::{{closure}}"
        ),
        "wasmtime: instantiation"
    );
    assert_eq!(
        row(
            "/root/.cargo/registry/src/index.crates.io-1949cf8c6b5b557f/hyper-util-0.1.21/src/server/conn/auto/mod.rs",
            "<hyper_util::server::conn::auto::UpgradeableConnection<I,S,E> as core::future::future::Future>::poll"
        ),
        "HTTP (hyper, httparse)"
    );
    assert_eq!(
        row(
            "/work/host/src/http/issue.rs",
            "couponlab::http::issue::issue::{{closure}}"
        ),
        "axum and the lab's handler"
    );
    // The standard library's generic code is its function's.
    assert_eq!(
        row(
            "/rustc/5980/library/core/src/ptr/mod.rs",
            "core::ptr::drop_in_place<wasmtime::runtime::store::StoreInner<couponlab::runtime::store::HostState>>"
        ),
        "wasmtime: the store made and dropped"
    );
    assert_eq!(row("???", "0x000000000673b100"), "guest (compiled wasm)");
    assert_eq!(
        row(
            "/rustc/5980/library/core/src/hash/sip.rs",
            "<core::hash::sip::Hasher<S> as core::hash::Hasher>::write"
        ),
        "other"
    );
}

/// A dump as callgrind writes it: names numbered on first use, code
/// inlined from another file, a call and its inclusive cost.
const DUMP: &str = "\
events: Ir
summary: 400

ob=(1) /x/couponlab
fl=(1) /work/host/src/traces/mod.rs
fn=(1) couponlab::traces::Traces::store
10 100
fi=(2) /root/.cargo/registry/src/index.crates.io-1/serde_json-1.0.154/src/ser.rs
20 50
fe=(1)
+1 50
cfl=(3) ./string/memset.S
cfn=(2) __memset_avx2_unaligned_erms
calls=2 30
* 120
cfn=(3) couponlab::traces::Traces::evict
calls=1 40
* 30

fl=(3)
fn=(2)
30 120

fl=(1)
fn=(3)
40 30
fl=(4) ???
fn=(4) 0x0000000004a2b000
0 40
";

#[test]
fn a_dump_is_split_by_whose_lines_ran_and_copies_go_to_their_callers() {
    let rows = split_dump(DUMP, 400).unwrap();
    let of = |name: &str| rows.iter().find(|(row, _)| *row == name).unwrap().1;
    // 100 + 50 of its own, 120 of memset it called, 30 of `evict`.
    assert_eq!(of("traces"), 300);
    assert_eq!(of("JSON (serde_json)"), 50);
    assert_eq!(of("guest (compiled wasm)"), 40);
    assert_eq!(of("other"), 0);
    assert_eq!(rows.iter().map(|(_, n)| n).sum::<u64>(), 390);
}
