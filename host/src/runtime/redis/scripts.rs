//! Lua scripts: the SHA-1 cache behind `GuestRedis::eval` (`pools.rs`), and
//! what the host does about
//! a script that outlives the call that sent it.
//!
//! Redis runs one script at a time and serves nobody else meanwhile, so a
//! script that never ends takes Redis from every client. Redis bounds
//! nothing itself; past `busy-reply-threshold` it answers everyone else
//! `BUSY` and accepts `SCRIPT KILL`, which ends a script that has not
//! written yet. So the host sets that threshold low on every node
//! ([`super::setup`]), and when a call reaches its deadline with a script's
//! reply still missing, sends `SCRIPT KILL` as the administrative user to
//! the node running it. `SCRIPT KILL` only ever ends a script that has
//! run past the threshold: never one of the microsecond scripts of the
//! methods. A script that wrote cannot be killed (`UNKILLABLE`): only
//! `SHUTDOWN NOSAVE` ends it, and the host quarantines its component.
//!
//! Which call's script is the one running? Redis reads nothing more from
//! the connection whose script runs, so on the shared connection every
//! command sent after it waits silently, scripts included, and may reach
//! its own deadline unanswered. Only the oldest script still unanswered on
//! a connection ([`InFlight`]; on a cluster, of a slot) can be running:
//! the others are queued behind it, and their calls kill nothing. And once
//! Redis refused to kill a script, the component that sent it is the one
//! quarantined, not the calls that waited behind it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use redis::cluster_routing::Route;
use redis::{RedisError, Value};

use crate::redis_target::{RedisConn, route_of};

/// The commands that run a script.
const SCRIPT_COMMANDS: [&str; 4] = ["EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO"];

/// Whether `name` (upper case) runs a script.
pub fn runs_a_script(name: &str) -> bool {
    SCRIPT_COMMANDS.contains(&name)
}

/// Script source -> SHA-1, so EVALSHA needs no SHA-1 after the first call.
/// Every EVAL hashes its whole script to find it: with foldhash rather than
/// std's SipHash (2,400 instructions a request for REDIS_LUA's script,
/// counted by `cargo xtask bench --instructions`). The key is the text, not
/// something cheaper, because a component sends whatever script it likes.
#[derive(Default)]
pub struct Shas(RwLock<HashMap<Box<str>, Arc<str>, foldhash::fast::RandomState>>);

impl Shas {
    pub fn of(&self, script: &str) -> Arc<str> {
        if let Some(sha) = self.0.read().get(script) {
            return sha.clone();
        }
        let sha: Arc<str> = sha1_smol::Sha1::from(script).digest().to_string().into();
        self.0.write().insert(script.into(), sha.clone());
        sha
    }
}

/// Where a script was sent: the shared connection (its number, and on a
/// cluster the slot of the script's first key), or a dedicated one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SentOn {
    Shared { id: u64, slot: Option<Route> },
    Dedicated,
}

/// Scripts sent on the shared connections and not answered yet, in the
/// order they were sent.
#[derive(Default)]
pub struct InFlight {
    next: AtomicU64,
    sent: Mutex<HashMap<SentOn, BTreeSet<u64>>>,
}

/// One script in flight; forgotten when dropped.
pub struct Sent<'a> {
    in_flight: &'a InFlight,
    on: SentOn,
    order: u64,
}

impl InFlight {
    pub fn send(&self, on: SentOn) -> Sent<'_> {
        let order = self.next.fetch_add(1, Ordering::Relaxed);
        if on != SentOn::Dedicated {
            self.sent.lock().entry(on).or_default().insert(order);
        }
        Sent {
            in_flight: self,
            on,
            order,
        }
    }
}

impl Sent<'_> {
    /// Whether no script sent earlier on the same connection is still
    /// unanswered: only then can this one be the script Redis runs.
    pub fn is_oldest(&self) -> bool {
        self.on == SentOn::Dedicated
            || self
                .in_flight
                .sent
                .lock()
                .get(&self.on)
                .is_none_or(|sent| sent.first().is_none_or(|&first| first >= self.order))
    }
}

impl Drop for Sent<'_> {
    fn drop(&mut self) {
        if self.on == SentOn::Dedicated {
            return;
        }
        let mut sent = self.in_flight.sent.lock();
        if let Some(orders) = sent.get_mut(&self.on) {
            orders.remove(&self.order);
            if orders.is_empty() {
                sent.remove(&self.on);
            }
        }
    }
}

/// What `SCRIPT KILL` did about a script that outlived its call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScriptEnd {
    /// Killed: Redis serves everyone again.
    Killed,
    /// No script was running any more (`NOTBUSY`): it ended by itself.
    AlreadyOver,
    /// The script wrote, so Redis refuses to kill it (`UNKILLABLE`).
    Unkillable(String),
    /// `SCRIPT KILL` itself failed (Redis unreachable, the command refused).
    NotSent(String),
}

/// Sends `SCRIPT KILL` through `admin` to the node that runs a script whose
/// first key is `key`: on one server, to it; on a cluster, to the key's
/// master, or to every master when the script named no key (Redis then
/// ran it on any of them).
pub async fn kill(admin: &RedisConn, key: Option<&str>) -> ScriptEnd {
    let mut admin = admin.clone();
    let kill = || {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("KILL");
        cmd
    };
    let answers = match (admin.is_cluster(), key) {
        (true, Some(key)) => vec![admin.query_at(kill(), Some(&route_of(key))).await],
        (true, None) => match admin.on_each_master(kill()).await {
            Ok(answers) => answers,
            Err(err) => return ScriptEnd::NotSent(err.to_string()),
        },
        (false, _) => vec![admin.query_at(kill(), None).await],
    };
    verdict(answers)
}

/// The end of the script from each node's answer: a kill, or a refusal to
/// kill, on any node says it; every node answering `NOTBUSY` means it was
/// over.
fn verdict(answers: Vec<Result<Value, RedisError>>) -> ScriptEnd {
    let mut end = ScriptEnd::AlreadyOver;
    for answer in answers {
        match answer {
            Ok(_) => return ScriptEnd::Killed,
            Err(err) if err.code() == Some("UNKILLABLE") => {
                return ScriptEnd::Unkillable(err.to_string());
            }
            Err(err) if err.code() == Some("NOTBUSY") => {}
            Err(err) => end = ScriptEnd::NotSent(err.to_string()),
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error reply as Redis sends it (`-CODE detail`).
    fn refusal(line: &str) -> Result<Value, RedisError> {
        match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()) {
            Ok(Value::ServerError(err)) => Err(err.into()),
            other => panic!("not an error reply: {other:?}"),
        }
    }

    #[test]
    fn the_node_that_ran_the_script_decides_its_end() {
        assert_eq!(verdict(vec![Ok(Value::Okay)]), ScriptEnd::Killed);
        assert_eq!(
            verdict(vec![refusal("NOTBUSY No scripts in execution right now.")]),
            ScriptEnd::AlreadyOver
        );
        assert_eq!(
            verdict(vec![refusal("NOTBUSY none"), Ok(Value::Okay)]),
            ScriptEnd::Killed
        );
        assert!(matches!(
            verdict(vec![
                refusal("NOTBUSY none"),
                refusal("UNKILLABLE Sorry the script already executed write commands")
            ]),
            ScriptEnd::Unkillable(_)
        ));
    }

    #[test]
    fn only_the_oldest_unanswered_script_of_a_connection_can_be_running() {
        let in_flight = InFlight::default();
        let shared = SentOn::Shared { id: 0, slot: None };
        let first = in_flight.send(shared);
        let behind = in_flight.send(shared);
        let elsewhere = in_flight.send(SentOn::Shared { id: 1, slot: None });
        let dedicated = in_flight.send(SentOn::Dedicated);
        assert!(first.is_oldest());
        assert!(!behind.is_oldest());
        assert!(elsewhere.is_oldest());
        assert!(dedicated.is_oldest());
        drop(first);
        assert!(behind.is_oldest());
    }

    #[test]
    fn only_script_commands_are_watched() {
        assert!(runs_a_script("EVALSHA"));
        assert!(runs_a_script("EVAL_RO"));
        assert!(!runs_a_script("GET"));
        assert!(!runs_a_script("SCRIPT"));
    }
}
