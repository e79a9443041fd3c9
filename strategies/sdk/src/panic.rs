//! A panic's message, written to the lab's log. A component built for
//! `wasm32-unknown-unknown` has no stderr: without this, a panic would trap
//! with nothing said but the trap.

use std::panic::PanicHookInfo;

use crate::bindings::couponlab::strategy::log::{self as wit, Level};

/// `panicked at src/lib.rs:12:5:` and the message, as an error line.
fn to_log(info: &PanicHookInfo<'_>) {
    wit::write(Level::Error, &info.to_string());
}

extern "C" fn install() {
    std::panic::set_hook(Box::new(to_log));
}

/// Runs `install` among the module's constructors, which wit-bindgen's
/// exports run before the first export call of every instance: each call
/// (a fresh instance) has the hook before its code can panic, whatever
/// export it enters by, the ones a crate implements by hand included.
/// `.init_array` is where wasm-ld collects constructors; placing a
/// function pointer there is the one unsafe thing the sdk does.
#[allow(unsafe_code)]
#[used]
#[unsafe(link_section = ".init_array")]
static INSTALL: extern "C" fn() = install;
