//! The size of each SQL host call's future ([`crate::runtime::future_sizes`]
//! says why it matters).

use wasmtime::component::Resource;

use super::SqlView;
use crate::runtime::bindings::{named_lock, sql as wit};
use crate::runtime::future_sizes::{assert_small, future_size};

type View = SqlView<'static>;

#[test]
fn host_call_futures_stay_small() {
    let level = wit::IsolationLevel::EngineDefault;
    let sizes = [
        (
            "sql.engine",
            future_size(|view: &'static mut View| wit::Host::engine(view)),
        ),
        (
            "sql.begin",
            future_size(|view: &'static mut View| wit::Host::begin(view, level)),
        ),
        (
            "sql.begin_read_only",
            future_size(|view: &'static mut View| wit::Host::begin_read_only(view, level)),
        ),
        (
            "sql.query",
            future_size(|view: &'static mut View| {
                wit::Host::query(view, String::new(), Vec::new())
            }),
        ),
        (
            "sql.execute",
            future_size(|view: &'static mut View| {
                wit::Host::execute(view, String::new(), Vec::new())
            }),
        ),
        (
            "transaction.query",
            future_size(|view: &'static mut View| {
                wit::HostTransaction::query(view, Resource::new_own(0), String::new(), Vec::new())
            }),
        ),
        (
            "transaction.execute",
            future_size(|view: &'static mut View| {
                wit::HostTransaction::execute(view, Resource::new_own(0), String::new(), Vec::new())
            }),
        ),
        (
            "transaction.commit",
            future_size(|view: &'static mut View| {
                wit::HostTransaction::commit(view, Resource::new_own(0))
            }),
        ),
        (
            "transaction.rollback",
            future_size(|view: &'static mut View| {
                wit::HostTransaction::rollback(view, Resource::new_own(0))
            }),
        ),
        (
            "transaction.drop",
            future_size(|view: &'static mut View| {
                wit::HostTransaction::drop(view, Resource::new_own(0))
            }),
        ),
        (
            "named_lock.acquire",
            future_size(|view: &'static mut View| {
                named_lock::Host::acquire(view, String::new(), 0)
            }),
        ),
        (
            "named_lock.release",
            future_size(|view: &'static mut View| named_lock::Host::release(view, String::new())),
        ),
    ];
    assert_small(&sizes);
}
