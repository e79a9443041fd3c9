//! Log lines, tagged with the method by the host.

use crate::bindings::couponlab::strategy::log::{self as wit, Level};

pub fn info(message: &str) {
    wit::write(Level::Info, message);
}

pub fn warn(message: &str) {
    wit::write(Level::Warn, message);
}
