//! The size of each Redis host call's future. wasmtime moves a host call's
//! future by value, into a box of its own and through the call's wrappers,
//! so every byte of it is copied several times a call: at 13.6 KB an
//! EVALSHA's future cost more instructions in `memcpy` than the rest of the
//! host call. What made it that large was the rare path carried in every
//! command's future (setting Redis up again, kilobytes of ACL commands),
//! and the watched reply nested whole in each wrapper.

use wasmtime::component::Resource;

use super::super::bindings::redis as wit;
use super::{GuestRedis, HostState};

/// The most a host call's future may hold; before the cut, an EVALSHA's held
/// 13,672 bytes and a dedicated connection's command 6,568.
const LIMIT: usize = 1024;

/// The size of the future `call` answers, without making one.
fn future_size<S: 'static, F: Future>(_: impl FnOnce(&'static mut S) -> F) -> usize {
    std::mem::size_of::<F>()
}

#[test]
fn host_call_futures_stay_small() {
    let sizes = [
        (
            "redis.execute",
            future_size(|state: &'static mut HostState| {
                wit::Host::execute(state, String::new(), Vec::new())
            }),
        ),
        (
            "redis.eval",
            future_size(|state: &'static mut HostState| {
                wit::Host::eval(state, String::new(), Vec::new(), Vec::new())
            }),
        ),
        (
            "redis.open",
            future_size(|state: &'static mut HostState| wit::Host::open(state)),
        ),
        (
            "connection.execute",
            future_size(|state: &'static mut HostState| {
                wit::HostConnection::execute(state, Resource::new_own(0), String::new(), Vec::new())
            }),
        ),
        (
            "connection.pipeline",
            future_size(|state: &'static mut HostState| {
                wit::HostConnection::pipeline(state, Resource::new_own(0), Vec::new())
            }),
        ),
        (
            "connection.drop",
            future_size(|state: &'static mut HostState| {
                wit::HostConnection::drop(state, Resource::new_own(0))
            }),
        ),
        (
            "the shared connection's command",
            future_size(|redis: &'static mut GuestRedis| redis.execute("", &[])),
        ),
    ];
    for (call, size) in sizes {
        println!("{call}: {size} bytes");
    }
    for (call, size) in sizes {
        assert!(
            size <= LIMIT,
            "{call}'s future is {size} bytes, over {LIMIT}: wasmtime copies it several times a call"
        );
    }
}
