//! The representation of the WIT `subscription` resource, the type the
//! bindings' `with:` maps it to, with the listener and inbox it is made of.
//! Only their definitions live here, taking nothing from the bindings, so
//! the bindings take from no file that takes from them; what they do is in
//! [`super::channels`].

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use parking_lot::Mutex;
use redis::aio::PubSubSink;
use tokio::sync::Notify;

/// One Pub/Sub connection and the channels subscribed on it.
pub(super) struct Listener {
    pub(super) sink: PubSubSink,
    pub(super) channels: Mutex<HashMap<String, Channel>>,
    /// Serializes SUBSCRIBE and UNSUBSCRIBE, so each is sent for the
    /// number of subscriptions its channel has when it goes out.
    pub(super) changes: tokio::sync::Mutex<()>,
    pub(super) broken: AtomicBool,
}

pub(super) struct Channel {
    pub(super) subscriptions: usize,
    pub(super) subscribed: bool,
    pub(super) inbox: Arc<Inbox>,
}

/// A channel's messages, each for one waiter: the first waiting when it
/// comes (tokio's `Notify` wakes waiters in order), or the next to wait.
#[derive(Default)]
pub(super) struct Inbox {
    pub(super) messages: Mutex<VecDeque<String>>,
    pub(super) arrived: Notify,
    /// The connection broke: no message comes any more.
    pub(super) closed: AtomicBool,
}

/// One call's subscription to one channel.
pub struct Subscription {
    pub(super) listener: Arc<Listener>,
    pub(super) channel: String,
    pub(super) inbox: Arc<Inbox>,
}
