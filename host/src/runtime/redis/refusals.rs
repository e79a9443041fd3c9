//! What the host refuses to send on a component's connection, whatever the
//! ACL allows: commands that change who the connection is or make it a
//! subscriber, connection state on the shared connection, and a WAIT that
//! could block its connection without bound.

use crate::runtime::bindings::redis::RedisError as WitError;

/// Commands that would change who a connection is, or which database it
/// reaches: refused on every connection a component uses.
const IDENTITY: [&str; 5] = ["AUTH", "HELLO", "RESET", "SELECT", "QUIT"];

/// Commands that would turn a connection into a subscriber, which answers
/// nothing else: refused on every connection a component uses (it hears
/// channels through `redis-channels`).
const SUBSCRIBER: [&str; 6] = [
    "SUBSCRIBE",
    "UNSUBSCRIBE",
    "PSUBSCRIBE",
    "PUNSUBSCRIBE",
    "SSUBSCRIBE",
    "SUNSUBSCRIBE",
];

/// Commands that leave state on their connection: they need a dedicated one.
const CONNECTION_STATE: [&str; 5] = ["MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH"];

fn refuse(name: &str, list: &[&str], why: &str) -> Option<WitError> {
    list.contains(&name)
        .then(|| WitError::Refused(format!("{name} is not allowed {why}")))
}

fn refuse_identity(name: &str) -> Option<WitError> {
    refuse(
        name,
        &IDENTITY,
        "on a component's connection: it would change who the connection is",
    )
    .or_else(|| {
        refuse(
            name,
            &SUBSCRIBER,
            "on a component's connection: it would make it a subscriber; use redis-channels",
        )
    })
}

/// The longest WAIT a component may ask for. WAIT blocks the connection it
/// is sent on (on the shared one, every component's commands behind it),
/// and a timeout of 0 would block it until a replica answers, for ever on
/// a Redis without replicas.
const LONGEST_WAIT_MS: u64 = 1_000;

/// WAIT with its timeout missing, 0, or past [`LONGEST_WAIT_MS`].
fn refuse_unbounded_wait(name: &str, args: &[String]) -> Option<WitError> {
    let timeout = args.get(1).and_then(|ms| ms.parse::<u64>().ok());
    (name == "WAIT" && !timeout.is_some_and(|ms| (1..=LONGEST_WAIT_MS).contains(&ms))).then(|| {
        WitError::Refused(format!(
            "WAIT needs a timeout of 1 to {LONGEST_WAIT_MS} ms: it blocks its connection until then"
        ))
    })
}

/// Why `name` with `args` may not go out on the shared connection, which
/// every call uses at once, if it may not.
pub(super) fn refused_on_shared(name: &str, args: &[String]) -> Option<WitError> {
    refused_on_dedicated(name, args).or_else(|| {
        refuse(
            name,
            &CONNECTION_STATE,
            "on the shared connection; use redis.open() for connection state",
        )
    })
}

/// Why `name` with `args` may not go out on a connection a call holds, if
/// it may not.
pub(super) fn refused_on_dedicated(name: &str, args: &[String]) -> Option<WitError> {
    refuse_identity(name).or_else(|| refuse_unbounded_wait(name, args))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(args: &[&str]) -> bool {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        refuse_unbounded_wait("WAIT", &args).is_some()
    }

    #[test]
    fn a_wait_is_refused_unless_its_timeout_is_bounded() {
        assert!(!refused(&["1", "100"]));
        assert!(!refused(&["1", "1000"]));
        assert!(refused(&["1", "0"]), "0 blocks until a replica answers");
        assert!(refused(&["1", "1001"]));
        assert!(refused(&["1"]));
        assert!(refused(&["1", "soon"]));
        assert!(refuse_unbounded_wait("GET", &["k".into()]).is_none());
    }
}
