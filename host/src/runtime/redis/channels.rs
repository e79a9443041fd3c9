//! The `redis-channels` capability: a call subscribes to a `coupon:*`
//! channel and waits for a message, as a Redisson lock's waiters wait for
//! the unlock instead of asking again and again. As in Redisson, where an
//! unlock releases one permit of the process's semaphore, each message goes
//! to one waiting subscription of this server ([`Inbox`]): an unlock wakes
//! the waiter that has waited longest, not a herd that would all try the
//! lock again and all but one fail.
//!
//! Every call's subscriptions share one Pub/Sub connection ([`Listener`]),
//! which authenticates as the components' ACL user: Redis decides which
//! channels may be heard. A channel is subscribed while at least one
//! subscription of any call is on it; its last one going (at the latest
//! with its call's store) unsubscribes it. A broken connection ends every
//! subscription on it (`next` says so) and the next `subscribe` opens a new
//! one.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use parking_lot::Mutex;
use redis::RedisError;
use wasmtime::component::Resource;

use super::RedisView;
use super::failure::to_wit_error;
use super::subscription::{Channel, Inbox, Listener, Subscription};
use crate::redis_target::RedisTarget;
use crate::runtime::bindings::redis::RedisError as WitError;
use crate::runtime::bindings::redis_channels;

/// Messages a channel keeps for nobody waiting before the oldest are
/// dropped.
const UNREAD: usize = 64;

/// The server's subscriptions, on one connection at a time.
pub struct Channels {
    /// Where the subscriber connects, again after its connection broke
    /// (behind Sentinels, to the primary named then).
    target: RedisTarget,
    listener: tokio::sync::Mutex<Option<Arc<Listener>>>,
}

impl Inbox {
    fn deliver(&self, message: String) {
        let mut messages = self.messages.lock();
        if messages.len() == UNREAD {
            messages.pop_front();
        }
        messages.push_back(message);
        drop(messages);
        self.arrived.notify_one();
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.arrived.notify_waiters();
    }

    /// A message, waiting for one as long as it takes.
    async fn take(&self) -> Result<String, WitError> {
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            // Registered before looking, so a message delivered between the
            // look and the wait still wakes this one.
            arrived.as_mut().enable();
            if let Some(message) = self.messages.lock().pop_front() {
                return Ok(message);
            }
            if self.closed.load(Ordering::Relaxed) {
                return Err(WitError::Connection(
                    "the connection the subscription listened on broke; subscribe again".into(),
                ));
            }
            arrived.await;
        }
    }
}

impl Channels {
    pub fn new(target: RedisTarget) -> Self {
        Self {
            target,
            listener: tokio::sync::Mutex::new(None),
        }
    }

    /// Subscribes to `channel`; messages published from then on are kept.
    pub async fn subscribe(&self, channel: &str) -> Result<Subscription, RedisError> {
        let listener = self.listener().await?;
        let inbox = listener.join(channel);
        let subscription = Subscription {
            listener: listener.clone(),
            channel: channel.to_string(),
            inbox,
        };
        // On failure the subscription drops, and with it its count.
        listener.settle(channel).await?;
        Ok(subscription)
    }

    /// The connection subscriptions go on, opened again once broken.
    async fn listener(&self) -> Result<Arc<Listener>, RedisError> {
        let mut current = self.listener.lock().await;
        if let Some(listener) = &*current
            && !listener.broken.load(Ordering::Relaxed)
        {
            return Ok(listener.clone());
        }
        let client = self.target.subscriber().await?;
        let (sink, mut stream) = client.get_async_pubsub().await?.split();
        let listener = Arc::new(Listener {
            sink,
            channels: Mutex::default(),
            changes: tokio::sync::Mutex::new(()),
            broken: AtomicBool::new(false),
        });
        let reader = listener.clone();
        tokio::spawn(async move {
            while let Some(message) = stream.next().await {
                let payload: String = message.get_payload().unwrap_or_default();
                if let Some(channel) = reader.channels.lock().get(message.get_channel_name()) {
                    channel.inbox.deliver(payload);
                }
            }
            reader.broken.store(true, Ordering::Relaxed);
            for (_, channel) in reader.channels.lock().drain() {
                channel.inbox.close();
            }
        });
        *current = Some(listener.clone());
        Ok(listener)
    }
}

impl Listener {
    /// Counts a new subscription of `channel` and gives it the inbox.
    fn join(&self, channel: &str) -> Arc<Inbox> {
        let mut channels = self.channels.lock();
        let entry = channels
            .entry(channel.to_string())
            .or_insert_with(|| Channel {
                subscriptions: 0,
                subscribed: false,
                inbox: Arc::default(),
            });
        entry.subscriptions += 1;
        entry.inbox.clone()
    }

    /// Subscribes `channel` if it has subscriptions and is not subscribed
    /// yet, or unsubscribes it if it has none left.
    async fn settle(&self, channel: &str) -> Result<(), RedisError> {
        let _turn = self.changes.lock().await;
        let wanted = |channels: &HashMap<String, Channel>| {
            channels
                .get(channel)
                .map(|entry| (entry.subscriptions > 0, entry.subscribed))
        };
        let mut sink = self.sink.clone();
        let state = wanted(&self.channels.lock());
        match state {
            Some((true, false)) => {
                // Marked before it is sent: a call dropped at its deadline
                // while Redis has not confirmed yet leaves the channel to
                // be unsubscribed by its last subscription, never listened
                // to with nobody to unsubscribe it. An UNSUBSCRIBE of a
                // channel never subscribed is harmless.
                if let Some(entry) = self.channels.lock().get_mut(channel) {
                    entry.subscribed = true;
                }
                sink.subscribe(channel).await?;
            }
            Some((false, subscribed)) => {
                if subscribed {
                    sink.unsubscribe(channel).await?;
                }
                let mut channels = self.channels.lock();
                if channels.get(channel).is_some_and(|e| e.subscriptions == 0) {
                    channels.remove(channel);
                }
            }
            Some((true, true)) | None => {}
        }
        Ok(())
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut channels = self.listener.channels.lock();
        let Some(entry) = channels.get_mut(&self.channel) else {
            return;
        };
        entry.subscriptions -= 1;
        if entry.subscriptions == 0 && tokio::runtime::Handle::try_current().is_ok() {
            let (listener, channel) = (self.listener.clone(), self.channel.clone());
            tokio::spawn(async move {
                if let Err(err) = listener.settle(&channel).await {
                    tracing::debug!(error = %err, %channel, "cannot unsubscribe a channel nobody waits on");
                }
            });
        }
    }
}

impl Subscription {
    /// A message of its channel, waiting at most `wait`.
    async fn next(&mut self, wait: Duration) -> Result<Option<String>, WitError> {
        match tokio::time::timeout(wait, self.inbox.take()).await {
            Ok(message) => message.map(Some),
            Err(_) => Ok(None),
        }
    }
}

impl redis_channels::Host for RedisView<'_> {
    /// Waits for the subscription no longer than the call's deadline.
    #[tracing::instrument(name = "redis_channels.subscribe", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn subscribe(
        &mut self,
        channel: String,
    ) -> wasmtime::Result<Result<Resource<Subscription>, WitError>> {
        let cap = self.redis.args.subscriptions_per_call;
        if self.held.subscriptions >= cap {
            return Ok(Err(WitError::Refused(format!(
                "this call already holds {cap} subscriptions (COUPONLAB_SUBSCRIPTIONS_PER_CALL)"
            ))));
        }
        let subscribed = self.redis.channels.subscribe(&channel);
        match tokio::time::timeout(self.call.left(), subscribed).await {
            Ok(Ok(subscription)) => {
                self.held.subscriptions += 1;
                Ok(Ok(self.table.push(subscription)?))
            }
            Ok(Err(err)) => Ok(Err(to_wit_error(err))),
            Err(_) => Ok(Err(WitError::Connection(format!(
                "Redis did not confirm the subscription to {channel:.80} before the call's deadline"
            )))),
        }
    }
}

impl redis_channels::HostSubscription for RedisView<'_> {
    #[tracing::instrument(name = "redis_channels.subscription.next", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn next(
        &mut self,
        subscription: Resource<Subscription>,
        timeout_ms: u32,
    ) -> wasmtime::Result<Result<Option<String>, WitError>> {
        let wait = Duration::from_millis(timeout_ms.into()).min(self.call.left());
        Ok(self.table.get_mut(&subscription)?.next(wait).await)
    }

    #[tracing::instrument(name = "redis_channels.subscription.drop", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn drop(&mut self, subscription: Resource<Subscription>) -> wasmtime::Result<()> {
        self.table.delete(subscription)?;
        self.held.subscriptions = self.held.subscriptions.saturating_sub(1);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REDIS: &str = "redis://127.0.0.1:6379";

    async fn subscribers(client: &redis::Client, channel: &str) -> u64 {
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let counts: Vec<(String, u64)> = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query_async(&mut conn)
            .await
            .unwrap();
        counts[0].1
    }

    #[tokio::test]
    async fn each_message_wakes_the_longest_waiter_only_and_the_last_subscription_leaves() {
        let client = redis::Client::open(REDIS).unwrap();
        let channels = Channels::new(RedisTarget::Server(client.clone()));
        let channel = format!("coupon:lock:channel:{{unit-{}}}", std::process::id());
        let mut first = channels.subscribe(&channel).await.unwrap();
        let mut second = channels.subscribe(&channel).await.unwrap();
        assert_eq!(subscribers(&client, &channel).await, 1, "one connection");
        let mut publisher = client.get_multiplexed_async_connection().await.unwrap();

        let waits = async {
            let first_waits = first.next(Duration::from_secs(5));
            let second_waits = async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                second.next(Duration::from_millis(600)).await
            };
            tokio::join!(first_waits, second_waits)
        };
        let publish = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let _: u64 = redis::cmd("PUBLISH")
                .arg(&channel)
                .arg("one")
                .query_async(&mut publisher)
                .await
                .unwrap();
        };
        let ((first_got, second_got), ()) = tokio::join!(waits, publish);
        assert_eq!(first_got.unwrap().as_deref(), Some("one"));
        assert_eq!(second_got.unwrap(), None, "the message woke one waiter");

        // Published while nobody waits: kept for the next to wait.
        let _: u64 = redis::cmd("PUBLISH")
            .arg(&channel)
            .arg("two")
            .query_async(&mut publisher)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let kept = second.next(Duration::from_millis(500)).await.unwrap();
        assert_eq!(kept.as_deref(), Some("two"));

        drop(first);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            subscribers(&client, &channel).await,
            1,
            "one subscription left"
        );
        drop(second);
        let left = async {
            while subscribers(&client, &channel).await > 0 {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(5), left)
            .await
            .expect("the channel is left with its last subscription");
    }
}
