//! What a failed Redis command tells the component that sent it: whether
//! Redis may have run it. The client's error kinds say when a command
//! failed, and only the host sees them, so it decides here, once:
//!
//! - `connection`: the command may have reached Redis and its answer was
//!   lost — the connection broke once it was written (a broken pipe, a
//!   reset, an abort, the connection closed while the reply was awaited),
//!   the reply did not come in time, or could not be read. A write may have
//!   happened: the components settle it later from the truth (the rows,
//!   then the reservation). redis-rs reports a connect that timed out as
//!   the same `TimedOut` as a late reply, so it counts as lost too: settling
//!   a request that did nothing costs a read, while a definite failure for
//!   a script that ran strands its unit.
//! - `refused`: not run. Nothing was sent (the connection was refused, the
//!   server would not log the components' user in, no connection could be
//!   made or borrowed in time), or Redis answered that it would not run it
//!   (`BUSY` while a script holds it, `NOPERM`).
//! - `server`: Redis ran it, or tried to, and answered with an error.

use redis::{ErrorKind, RedisError};

use crate::redis_target::errors::{is_busy, is_connection_error};
use crate::runtime::bindings::redis::RedisError as WitError;

/// Maps a client error to what the guest sees.
pub(super) fn to_wit_error(err: RedisError) -> WitError {
    if is_busy(&err) {
        WitError::Refused(format!(
            "Redis is busy running a script and serves nobody until it ends: {err}"
        ))
    } else if never_sent(&err) {
        not_sent(err)
    } else if is_connection_error(&err) {
        WitError::Connection(format!(
            "Redis is unavailable; the command may have run, its answer was lost: {err}"
        ))
    } else if err.code() == Some("NOPERM")
        || err
            .detail()
            .is_some_and(|detail| detail.starts_with("The user executing the script can't"))
    {
        WitError::Refused(format!("the components' Redis user may not: {err}"))
    } else {
        WitError::Server(err.to_string())
    }
}

/// A failure before anything of the component's was sent: definite.
pub(super) fn not_sent(err: impl std::fmt::Display) -> WitError {
    WitError::Refused(format!("Redis is unavailable; nothing was sent: {err}"))
}

/// Whether `err` was raised before the command left this process: while
/// connecting or logging in, never once a connection carried it.
fn never_sent(err: &RedisError) -> bool {
    match err.kind() {
        ErrorKind::AuthenticationFailed
        | ErrorKind::InvalidClientConfig
        | ErrorKind::ClusterConnectionNotFound
        | ErrorKind::RESP3NotSupported => true,
        // Refused, or a Unix socket with no server behind it: only ever
        // while connecting.
        ErrorKind::Io => err.is_connection_refusal(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::time::Duration;

    use redis::{AsyncConnectionConfig, Value};
    use tokio::io::AsyncReadExt;
    use tokio::net::TcpListener;

    use super::*;

    fn io_error(kind: io::ErrorKind) -> RedisError {
        io::Error::from(kind).into()
    }

    /// An error reply as Redis sends it (`-CODE detail`).
    fn reply(line: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(Value::ServerError(err)) => err.into(),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    fn lost(err: &WitError) -> bool {
        matches!(err, WitError::Connection(_))
    }

    #[test]
    fn a_connection_that_broke_or_a_reply_that_never_came_lost_the_answer() {
        for kind in crate::runtime::BROKEN_CONNECTION {
            let err = to_wit_error(io_error(kind));
            assert!(lost(&err), "{kind:?}: {err:?}");
        }
        let unreadable = to_wit_error((ErrorKind::Parse, "a reply cut short").into());
        assert!(lost(&unreadable), "{unreadable:?}");
    }

    #[test]
    fn a_failure_before_anything_was_sent_is_definite() {
        for err in [
            io_error(io::ErrorKind::ConnectionRefused),
            (ErrorKind::AuthenticationFailed, "WRONGPASS").into(),
            (ErrorKind::InvalidClientConfig, "not a URL").into(),
            (ErrorKind::ClusterConnectionNotFound, "no node").into(),
        ] {
            let wit = to_wit_error(err);
            assert!(matches!(wit, WitError::Refused(_)), "{wit:?}");
        }
    }

    #[test]
    fn what_redis_answered_is_definite() {
        assert!(matches!(
            to_wit_error(reply("BUSY Redis is busy running a script.")),
            WitError::Refused(message) if message.contains("busy running a script")
        ));
        assert!(matches!(
            to_wit_error(reply(
                "NOPERM User has no permissions to run the 'flushall' command"
            )),
            WitError::Refused(_)
        ));
        assert!(matches!(
            to_wit_error(reply(
                "WRONGTYPE Operation against a key holding the wrong kind of value"
            )),
            WitError::Server(_)
        ));
    }

    /// What redis-rs really reports, not what its kinds suggest: a real
    /// connection, to a port nobody listens on, to a server that reads the
    /// command and hangs up, and to one that never answers.
    #[tokio::test]
    async fn real_connections_fail_the_way_they_are_classified() {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(1)))
            .set_response_timeout(Some(Duration::from_millis(200)));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let info = redis::IntoConnectionInfo::into_connection_info(url.as_str()).unwrap();
        // Nothing to say on connecting: the server here answers nothing.
        let quiet = info.redis_settings().clone().set_skip_set_lib_name();
        let client = redis::Client::open(info.set_redis_settings(quiet)).unwrap();
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        let (mut server, _) = listener.accept().await.unwrap();

        let sadd = redis::cmd("SADD").arg(&["k", "1"]).clone();
        let never_answered = sadd.query_async::<Value>(&mut conn);
        let (answer, _) = tokio::join!(never_answered, async {
            server.read(&mut [0; 64]).await.unwrap()
        });
        let err = to_wit_error(answer.unwrap_err());
        assert!(lost(&err), "a reply that never came: {err:?}");

        let hung_up = sadd.query_async::<Value>(&mut conn);
        let (answer, _) = tokio::join!(hung_up, async {
            let read = server.read(&mut [0; 64]).await.unwrap();
            drop(server);
            read
        });
        let err = to_wit_error(answer.unwrap_err());
        assert!(
            lost(&err),
            "a command read, then the connection closed: {err:?}"
        );

        drop(listener);
        let refused = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap_err();
        let err = to_wit_error(refused);
        assert!(matches!(err, WitError::Refused(_)), "refused: {err:?}");
    }
}
