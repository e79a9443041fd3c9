//! The size of each Redis host call's future. wasmtime moves a host call's
//! future by value, into a box of its own and through the call's wrappers,
//! so every byte of it is copied several times a call: at 13.6 KB an
//! EVALSHA's future cost more instructions in `memcpy` than the rest of the
//! host call. What made it that large was the rare path carried in every
//! command's future (setting Redis up again, kilobytes of ACL commands),
//! and the watched reply nested whole in each wrapper: before the cut, an
//! EVALSHA's future held 13,672 bytes and a dedicated connection's command
//! 6,568.

use wasmtime::component::Resource;

use super::super::bindings::redis as wit;
use super::RedisView;
use super::pools::GuestRedis;
use crate::runtime::future_sizes::{assert_small, future_size};

#[test]
fn host_call_futures_stay_small() {
    let sizes = [
        (
            "redis.execute",
            future_size(|view: &'static mut RedisView<'static>| {
                wit::Host::execute(view, String::new(), Vec::new())
            }),
        ),
        (
            "redis.eval",
            future_size(|view: &'static mut RedisView<'static>| {
                wit::Host::eval(view, String::new(), Vec::new(), Vec::new())
            }),
        ),
        (
            "redis.open",
            future_size(|view: &'static mut RedisView<'static>| wit::Host::open(view)),
        ),
        (
            "connection.execute",
            future_size(|view: &'static mut RedisView<'static>| {
                wit::HostConnection::execute(view, Resource::new_own(0), String::new(), Vec::new())
            }),
        ),
        (
            "connection.pipeline",
            future_size(|view: &'static mut RedisView<'static>| {
                wit::HostConnection::pipeline(view, Resource::new_own(0), Vec::new())
            }),
        ),
        (
            "connection.drop",
            future_size(|view: &'static mut RedisView<'static>| {
                wit::HostConnection::drop(view, Resource::new_own(0))
            }),
        ),
        (
            "the shared connection's command",
            future_size(|redis: &'static mut GuestRedis| redis.execute("", &[])),
        ),
    ];
    assert_small(&sizes);
}
