//! REDIS_PUBSUB_LOCK: Redisson's `RLock`. The lock is a hash of its
//! holder's token and hold count with a lease, taken by a script
//! (`lua/hash_lock.lua`) that answers a waiter with the lease left. A
//! waiter does not spin: it subscribes to the coupon's lock channel and
//! tries again when the unlock is published or the lease it was told runs
//! out, until 2 s have passed (503 LOCK_WAIT_TIMEOUT). While the holder
//! works, the host's watchdog renews the lease every third of it
//! (`lua/hash_renew.lua`), so a slow database does not let a second holder
//! in. Under it, stage 1's plain check-and-insert; then a script deletes
//! the lock and publishes the unlock (`lua/hash_unlock.lua`), which wakes
//! one waiter of each server — the one waiting longest — as Redisson's
//! semaphore does. It costs Redis a few commands per request however many
//! wait; but a request arriving just then may take the lock first, so the
//! order is not a queue.

use couponlab_sdk::channels::{Renewal, Subscription};
use couponlab_sdk::redis::RedisError;
use couponlab_sdk::sql::IsolationLevel;
use couponlab_sdk::{IssueResult, Outcome, Step, args, clock, keys, plain_reads, redis, settle};

const LOCK: &str = include_str!("../../../lua/hash_lock.lua");
const UNLOCK: &str = include_str!("../../../lua/hash_unlock.lua");
const RENEW: &str = include_str!("../../../lua/hash_renew.lua");
/// The lease: Redisson's 30 s watchdog timeout, scaled to a call's budget.
const LEASE_MS: u32 = 3_000;
/// How long a request waits for the lock.
const WAIT_MS: u64 = 2_000;

/// One try: `None` when taken, or the ms left of the holder's lease.
fn try_lock(key: &str, token: &str) -> Result<Option<u64>, RedisError> {
    let answer = redis::eval(LOCK, &[key.to_string()], &args![LEASE_MS, token])?;
    Ok(answer.as_int().map(|left| u64::try_from(left).unwrap_or(0)))
}

/// Takes the lock, waiting for unlock messages between tries.
fn acquire(coupon_id: u64, key: &str, token: &str) -> Step<()> {
    if try_lock(key, token)?.is_none() {
        return Ok(());
    }
    let give_up = clock::now_millis() + WAIT_MS;
    // Subscribed before trying again: an unlock published from now on is
    // heard, and one published before is seen by that try.
    let unlocks = Subscription::subscribe(&keys::lock_channel(coupon_id))?;
    let mut tries = 1;
    loop {
        tries += 1;
        let Some(lease_left) = try_lock(key, token)? else {
            return Ok(());
        };
        let now = clock::now_millis();
        if now >= give_up {
            return Err(IssueResult::of(Outcome::LockWaitTimeout).detail(format!(
                "the lock was not free within {WAIT_MS} ms ({tries} tries)"
            )));
        }
        // A lease with no expiry answers -1: wait for the unlock alone.
        let wait = if lease_left == 0 {
            give_up - now
        } else {
            lease_left.min(give_up - now)
        };
        unlocks.next(u32::try_from(wait).unwrap_or(u32::MAX))?;
    }
}

fn issue(request: &couponlab_sdk::IssueRequest) -> Step<IssueResult> {
    let key = keys::lock(request.coupon_id);
    let token = keys::holder_token(request.member_id);
    acquire(request.coupon_id, &key, &token)?;
    let watchdog = Renewal::start(
        RENEW,
        std::slice::from_ref(&key),
        &args![LEASE_MS, token],
        LEASE_MS / 3,
    );
    let result = plain_reads::issue(IsolationLevel::ReadCommitted, request);
    let result = match watchdog {
        Ok(renewing) => {
            drop(renewing);
            result
        }
        Err(_) => result.label("watchdogRefused", 1),
    };
    // What the critical section did stands whatever the release does.
    let channel = keys::lock_channel(request.coupon_id);
    Ok(
        match redis::eval(UNLOCK, &[key, channel], &args![LEASE_MS, token]) {
            Ok(released) if released.is_nil() => result.label("leaseExpired", 1),
            Ok(_) => result,
            Err(_) => result.label("releaseFailed", 1),
        },
    )
}

couponlab_sdk::strategy! {
    struct RedisPubsubLock { method: "REDIS_PUBSUB_LOCK", claims: [Total, Member, Acked], summary: "Redisson's lock: a Lua hash lock with a lease, waiters woken by an unlock message, a watchdog renewing the lease" }
    fn issue(request) { settle(issue(&request)) }
}
