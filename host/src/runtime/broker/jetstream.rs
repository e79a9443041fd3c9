//! NATS JetStream through async-nats: the lab's streams, and the publisher
//! the `broker` capability sends through.
//!
//! The stream keeps its messages on disk as a work queue (a message is
//! removed once acked) and drops a second publish of a message id within
//! its duplicate window, which is what makes publishing again safe.

use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::stream::{Config, RetentionPolicy, StorageType};
use async_nats::jetstream::{self, Context};
use tokio::sync::Mutex;

use super::{Published, Topology};

/// How long the stream remembers a message id: a second publish of it
/// within this window is dropped (JetStream's default).
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// Connects to `url` within `within`.
pub async fn connect(url: &str, within: Duration) -> Result<async_nats::Client, String> {
    let options = async_nats::ConnectOptions::new()
        .connection_timeout(within)
        .name("couponlab");
    options
        .connect(url)
        .await
        .map_err(|err| format!("NATS at {url}: {err}"))
}

/// Creates the lab's stream and dead-letter stream unless they exist.
pub async fn declare(context: &Context, topology: &Topology) -> Result<(), String> {
    let names = &topology.names;
    for (stream, subject) in [
        (&names.stream, &names.subject),
        (&names.dead_stream, &names.dead_subject),
    ] {
        let retention = if stream == &names.stream {
            RetentionPolicy::WorkQueue
        } else {
            RetentionPolicy::Limits
        };
        context
            .get_or_create_stream(Config {
                name: stream.clone(),
                subjects: vec![subject.clone()],
                retention,
                storage: StorageType::File,
                duplicate_window: DUPLICATE_WINDOW,
                ..Config::default()
            })
            .await
            .map_err(|err| format!("JetStream refused the stream {stream}: {err}"))?;
    }
    Ok(())
}

/// One client, connected on first use; it reconnects by itself after a
/// break, and the streams are declared again on the first publish after.
pub struct Publisher {
    url: String,
    open: Mutex<Option<Context>>,
}

impl Publisher {
    pub fn new(url: &str) -> Self {
        Self {
            url: url.to_string(),
            open: Mutex::new(None),
        }
    }

    async fn context(&self, topology: &Topology, within: Duration) -> Result<Context, String> {
        let mut open = self.open.lock().await;
        if let Some(context) = &*open {
            return Ok(context.clone());
        }
        let client = connect(&self.url, within).await?;
        let context = jetstream::new(client);
        tokio::time::timeout(within, declare(&context, topology))
            .await
            .map_err(|_| format!("JetStream did not set up within {within:?}"))??;
        *open = Some(context.clone());
        Ok(context)
    }

    /// Publishes `body` with the message id `id` to the lab's subject and
    /// waits `within` at most for the stream's ack. A duplicate (the stream
    /// has the id already) is confirmed: the message is there.
    pub async fn publish(
        &self,
        topology: &Topology,
        id: &str,
        body: &[u8],
        within: Duration,
    ) -> Published {
        let mut context = match self.context(topology, within).await {
            Ok(context) => context,
            Err(err) => return Published::Refused(err),
        };
        // Buffered while disconnected, a publish would go out once the
        // client reconnects: refused here, it is never sent.
        if context.client().connection_state() != State::Connected {
            return Published::Refused(format!("NATS at {} is not connected", self.url));
        }
        context.set_timeout(within);
        let message = PublishMessage::build()
            .message_id(id)
            .payload(body.to_vec().into());
        let subject = topology.names.subject.clone();
        let sent = match context.send_publish(subject, message).await {
            Ok(sent) => sent,
            Err(err) => return refused_or_unconfirmed(err.kind(), err.to_string()),
        };
        match sent.await {
            Ok(_ack) => Published::Confirmed,
            Err(err) if err.kind() == PublishErrorKind::StreamNotFound => {
                // Deleted behind the lab's back: declared again next time.
                *self.open.lock().await = None;
                Published::Refused(format!("JetStream: {err}"))
            }
            Err(err) => refused_or_unconfirmed(err.kind(), err.to_string()),
        }
    }
}

/// What a failed publish means: only a timeout or a broken link after
/// sending leaves the message possibly stored.
fn refused_or_unconfirmed(kind: PublishErrorKind, err: String) -> Published {
    match kind {
        PublishErrorKind::TimedOut | PublishErrorKind::BrokenPipe => {
            Published::Unconfirmed(format!("JetStream: {err}"))
        }
        _ => Published::Refused(format!("JetStream: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_lost_ack_leaves_the_message_possibly_stored() {
        let read = |kind| refused_or_unconfirmed(kind, String::new());
        assert!(matches!(
            read(PublishErrorKind::TimedOut),
            Published::Unconfirmed(_)
        ));
        assert!(matches!(
            read(PublishErrorKind::BrokenPipe),
            Published::Unconfirmed(_)
        ));
        for kind in [
            PublishErrorKind::StreamNotFound,
            PublishErrorKind::MaxAckPending,
            PublishErrorKind::MaxPayloadExceeded,
            PublishErrorKind::Other,
        ] {
            assert!(matches!(read(kind), Published::Refused(_)));
        }
    }
}
