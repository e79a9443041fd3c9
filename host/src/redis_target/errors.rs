//! What a Redis error says of the server, as the host reads it wherever a
//! command fails: the components' capability, the lab's claim and the API's
//! envelope read the same error the same way.

use redis::{ErrorKind, RedisError};

/// Redis answered `BUSY`: a script (anyone's) is running past the
/// threshold, and it serves nobody until that script ends.
pub fn is_busy(err: &RedisError) -> bool {
    err.code() == Some("BUSY")
}

/// The error is the connection's, not an answer of Redis: the server was not
/// reached, or its answer was lost.
pub fn is_connection_error(err: &RedisError) -> bool {
    !matches!(err.kind(), ErrorKind::Server(_) | ErrorKind::Extension)
}

#[cfg(test)]
mod tests {
    use std::io;

    use redis::Value;

    use super::*;

    /// An error reply as Redis sends it (`-CODE detail`).
    fn reply(line: &str) -> RedisError {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(Value::ServerError(err)) => err.into(),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn an_answer_of_redis_is_not_the_connections_and_busy_is_one() {
        let busy = reply("BUSY Redis is busy running a script.");
        assert!(is_busy(&busy));
        assert!(!is_connection_error(&busy));
        let wrong_type = reply("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert!(!is_busy(&wrong_type));
        assert!(!is_connection_error(&wrong_type));
        let reset: RedisError = io::Error::from(io::ErrorKind::ConnectionReset).into();
        assert!(is_connection_error(&reset));
        assert!(!is_busy(&reset));
    }
}
