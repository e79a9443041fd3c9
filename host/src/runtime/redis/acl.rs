//! The Redis ACL user components run as. Redis enforces it — for commands
//! a Lua script calls too — so what a component may reach is decided by the
//! server, not by a list the host keeps.
//!
//! - keys `coupon:*`, channels `coupon:*`;
//! - strings (but GETDEL), sets, hashes; XADD, XLEN, XRANGE; EVAL and
//!   EVALSHA with SCRIPT LOAD (the host's EVALSHA fallback); MULTI, EXEC,
//!   DISCARD, WATCH, UNWATCH; PUBLISH; EXISTS, TYPE, TTL, PTTL; PING and
//!   SELECT (which the client sends when it connects); CLUSTER SLOTS, with
//!   which a cluster client learns which node owns which keys;
//! - DEL and PEXPIRE on the drop gate's keys (`coupon:gate:*`) only, which
//!   its cancel and reserve scripts need; no other key can be deleted;
//! - nothing else: no FLUSHDB, KEYS, SCAN, SCRIPT FLUSH/KILL, CLIENT,
//!   CONFIG, DEBUG, ACL, no blocking reads, no SUBSCRIBE.
//!
//! The server's own work — consumers, results, warming totals, DELETE
//! /lab/data — runs on the connection of REDIS_URL.

use redis::RedisError;

use crate::redis_target::{RedisConn, seeds};

/// The user name the server creates.
pub const USER: &str = "couponlab-strategy";

/// The rules of [`USER`], after `ACL SETUSER <user> on resetpass >…`.
const RULES: &[&str] = &[
    "resetkeys",
    "resetchannels",
    "clearselectors",
    "-@all",
    "~coupon:*",
    "&coupon:*",
    "+@string",
    "-getdel",
    "+@set",
    "+@hash",
    "+xadd",
    "+xlen",
    "+xrange",
    "+xrevrange",
    "+eval",
    "+evalsha",
    "+eval_ro",
    "+evalsha_ro",
    "+script|load",
    "+script|exists",
    "+multi",
    "+exec",
    "+discard",
    "+watch",
    "+unwatch",
    "+publish",
    "+exists",
    "+type",
    "+ttl",
    "+pttl",
    "+ping",
    "+select",
    "+cluster|slots",
    "(~coupon:gate:* +del +pexpire)",
];

/// The password of [`USER`]: derived from the administrative URL's server
/// and credentials (not its database: an ACL user spans them all), so every
/// process that shares a Redis (serve, consume, several hosts) sets the same
/// one and none locks another out; it is never written anywhere. A
/// cluster's seed list derives it from its first seed (the nodes share
/// their credentials).
pub fn password(admin_url: &str) -> String {
    let first = seeds(admin_url).first().copied().unwrap_or(admin_url);
    crate::runtime::capabilities::derived_password(USER, first)
}

/// The URL components connect with: the administrative one (each seed of a
/// cluster's) with the user's credentials in place of any there.
pub fn url(admin_url: &str) -> anyhow::Result<String> {
    let password = password(admin_url);
    let with_user = |seed: &str| {
        let mut url = url::Url::parse(seed)
            .map_err(|err| anyhow::anyhow!("REDIS_URL is not a URL ({err}): {seed}"))?;
        url.set_username(USER)
            .and_then(|()| url.set_password(Some(&password)))
            .map_err(|()| anyhow::anyhow!("REDIS_URL cannot carry a user: {seed}"))?;
        Ok::<_, anyhow::Error>(url.to_string())
    };
    let seeds: Vec<String> = seeds(admin_url)
        .into_iter()
        .map(with_user)
        .collect::<Result<_, _>>()?;
    Ok(seeds.join(","))
}

/// Creates or updates [`USER`] through the administrative connection (on a
/// cluster on every node, as redis-rs sends ACL SETUSER: each node keeps its
/// own ACL).
pub async fn ensure_user(admin: &RedisConn, admin_url: &str) -> Result<(), RedisError> {
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg(USER)
        .arg("on")
        .arg("resetpass")
        .arg(format!(">{}", password(admin_url)))
        .arg(RULES)
        .query_async(&mut admin.clone())
        .await
}

/// Why the user could not be set up, and what the operator can do.
pub fn cannot_set_up(err: RedisError) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot create the Redis ACL user {USER} that components run as ({err}). \
         Connect REDIS_URL as a user allowed to run ACL SETUSER (Redis 7 or newer), \
         or create a user yourself with the rules in docs/architecture.md (the trust model) \
         and give it as COUPONLAB_STRATEGY_REDIS_URL=redis://user:password@host:port/db"
    )
}
