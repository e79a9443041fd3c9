//! The Redis ACL user components run as. Redis enforces it — for commands
//! a Lua script calls too — so what a component may reach is decided by the
//! server, not by a list the host keeps.
//!
//! - keys `coupon:*`, channels `coupon:*`;
//! - strings (but GETDEL), sets, hashes; XADD, XLEN, XRANGE; EVAL and
//!   EVALSHA with SCRIPT LOAD (the host's EVALSHA fallback); MULTI, EXEC,
//!   DISCARD, WATCH, UNWATCH; PUBLISH; EXISTS, TYPE, TTL, PTTL; PING and
//!   SELECT (which the client sends when it connects);
//! - DEL and PEXPIRE on the drop gate's keys (`coupon:gate:*`) only, which
//!   its cancel and reserve scripts need; no other key can be deleted;
//! - nothing else: no FLUSHDB, KEYS, SCAN, SCRIPT FLUSH/KILL, CLIENT,
//!   CONFIG, DEBUG, ACL, no blocking reads, no SUBSCRIBE.
//!
//! The server's own work — consumers, results, warming totals, DELETE
//! /lab/data — runs on the connection of REDIS_URL.

use redis::RedisError;
use redis::aio::ConnectionManager;

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
    "(~coupon:gate:* +del +pexpire)",
];

/// The password of [`USER`]: derived from the administrative URL's server
/// and credentials (not its database: an ACL user spans them all), so every
/// process that shares a Redis (serve, consume, several hosts) sets the same
/// one and none locks another out; it is never written anywhere.
pub fn password(admin_url: &str) -> String {
    crate::runtime::capabilities::derived_password(USER, admin_url)
}

/// The URL components connect with: the administrative one with the user's
/// credentials in place of any there.
pub fn url(admin_url: &str) -> anyhow::Result<String> {
    let mut url = url::Url::parse(admin_url)
        .map_err(|err| anyhow::anyhow!("REDIS_URL is not a URL ({err}): {admin_url}"))?;
    url.set_username(USER)
        .and_then(|()| url.set_password(Some(&password(admin_url))))
        .map_err(|()| anyhow::anyhow!("REDIS_URL cannot carry a user: {admin_url}"))?;
    Ok(url.to_string())
}

/// Creates or updates [`USER`] through the administrative connection.
pub async fn ensure_user(admin: &ConnectionManager, admin_url: &str) -> Result<(), RedisError> {
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
