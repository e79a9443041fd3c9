//! The Redis ACL user components run as. Redis enforces it — for commands
//! a Lua script calls too — so what a component may reach is decided by the
//! server, not by a list the host keeps.
//!
//! - keys `coupon:*`, channels `coupon:*`;
//! - strings (but GETDEL), sets, hashes; XADD, XLEN, XRANGE; EVAL and
//!   EVALSHA with SCRIPT LOAD (the host's EVALSHA fallback); MULTI, EXEC,
//!   DISCARD, WATCH, UNWATCH; PUBLISH; SUBSCRIBE and UNSUBSCRIBE, for the
//!   host's listener of `redis-channels` only; EXISTS, TYPE, TTL, PTTL; PING;
//!   CLUSTER SLOTS, with which a cluster client learns which node owns
//!   which keys; ROLE, with which a client behind Sentinels checks that the
//!   node they name is the primary (and REDIS_LUA_WAIT that it has
//!   replicas); WAIT, for a replica's acknowledgement;
//! - SELECT of the lab's own database only (`+select|9`, which the client
//!   sends when it connects), so neither a command nor a script reaches
//!   another database: Redis ACL has no rule per database, but it has one
//!   per first argument. A lab on database 0 (and every cluster) gets no
//!   SELECT at all. Each database has a user of its own
//!   (`couponlab-strategy-db9`), since labs on different databases of one
//!   server would otherwise overwrite each other's rule;
//! - DEL and PEXPIRE on the drop gate's keys (`coupon:gate:*`) only, which
//!   its cancel and reserve scripts need, and on locks (`coupon:lock:*`),
//!   which a lock's holder releases and renews; no other key can be
//!   deleted;
//! - nothing else: no FLUSHDB, KEYS, SCAN, SCRIPT FLUSH/KILL, CLIENT,
//!   CONFIG, DEBUG, ACL, no blocking reads, no pattern or shard
//!   subscriptions.
//!
//! The server's own work — consumers, results, warming totals, DELETE
//! /lab/data — runs on the connection of REDIS_URL.

use redis::RedisError;

use crate::redis_target::seeds;
use crate::redis_target::sentinel::{SentinelUrl, is_sentinel};

/// The user name the server creates for a lab on database 0.
pub const USER: &str = "couponlab-strategy";

/// The rules of every database's user, after `ACL SETUSER <user> on
/// resetpass >…`; the database's SELECT rule follows them.
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
    // The host's listener for `redis-channels` runs as this user, so Redis
    // decides which channels it hears; the host refuses both on the
    // connections components send commands on.
    "+subscribe",
    "+unsubscribe",
    "+exists",
    "+type",
    "+ttl",
    "+pttl",
    "+ping",
    "+cluster|slots",
    // Behind Sentinels, the client checks that the node they name as the
    // primary is one before it connects there.
    "+role",
    // REDIS_LUA_WAIT waits for a replica's acknowledgement of what its
    // connection wrote; the host refuses a WAIT without a bounded timeout.
    "+wait",
    "(~coupon:gate:* +del +pexpire)",
    // The locks (`couponlab_contract::keys::lock`): released and renewed by their holder.
    "(~coupon:lock:* +del +pexpire)",
];

/// The components' user of the lab at `admin_url`: [`USER`] on database 0,
/// `couponlab-strategy-db{n}` on database n.
pub fn user(admin_url: &str) -> String {
    match database(admin_url) {
        0 => USER.to_string(),
        db => format!("{USER}-db{db}"),
    }
}

/// The logical database a URL selects (its path, as redis-rs reads it, or
/// after a Sentinel URL's master name); a cluster's seed list has database
/// 0 only.
fn database(admin_url: &str) -> i64 {
    if is_sentinel(admin_url) {
        return SentinelUrl::parse(admin_url).map_or(0, |url| url.db);
    }
    let first = seeds(admin_url).first().copied().unwrap_or(admin_url);
    redis::IntoConnectionInfo::into_connection_info(first)
        .map(|info| info.redis_settings().db())
        .unwrap_or(0)
}

/// The password of the components' user: derived from the administrative
/// URL's credentials and the user's name, so every process that shares a
/// Redis (serve, consume, several hosts) sets the same one and none locks
/// another out; it is never written anywhere. A cluster's seed list derives
/// it from its first seed (the nodes share their credentials).
pub fn password(admin_url: &str) -> String {
    let first = seeds(admin_url).first().copied().unwrap_or(admin_url);
    crate::credentials::derived_password(&user(admin_url), first)
}

/// The URL components connect with: the administrative one (each seed of a
/// cluster's) with the user's credentials in place of any there.
pub fn url(admin_url: &str) -> anyhow::Result<String> {
    let password = password(admin_url);
    let user = user(admin_url);
    if is_sentinel(admin_url) {
        let sentinels = SentinelUrl::parse(admin_url).map_err(anyhow::Error::msg)?;
        return Ok(sentinels.with_user(&user, &password));
    }
    let with_user = |seed: &str| {
        let mut url = url::Url::parse(seed)
            .map_err(|err| anyhow::anyhow!("REDIS_URL is not a URL ({err}): {seed}"))?;
        url.set_username(&user)
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

/// `ACL SETUSER` creating or updating the components' user, for each node
/// (each node of a cluster keeps its own ACL).
pub fn setuser(admin_url: &str) -> redis::Cmd {
    let mut setuser = redis::cmd("ACL");
    setuser
        .arg("SETUSER")
        .arg(user(admin_url))
        .arg("on")
        .arg("resetpass")
        .arg(format!(">{}", password(admin_url)))
        .arg(RULES);
    let db = database(admin_url);
    if db != 0 {
        setuser.arg(format!("+select|{db}"));
    }
    setuser
}

/// Why the user could not be set up, and what the operator can do.
pub fn cannot_set_up(err: RedisError) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot create the Redis ACL user that components run as ({err}). \
         Connect REDIS_URL as a user allowed to run ACL SETUSER (Redis 7 or newer), \
         or create a user yourself with the rules in docs/architecture.md (the trust model) \
         and give it as COUPONLAB_STRATEGY_REDIS_URL=redis://user:password@host:port/db"
    )
}
