//! REDIS_SPIN_LOCK: the Lettuce-style lock. `SET coupon:lock:{id} token NX
//! PX lease`, tried again with a growing pause until it is taken or the
//! wait runs out (503 LOCK_WAIT_TIMEOUT); under it, stage 1's plain
//! check-and-insert (read the coupon, check the member and the stock, INSERT,
//! `issued_count + 1` with no guard); then a compare-and-delete script
//! releases it. Every waiter asks Redis again and again: the lock costs
//! Redis commands in proportion to the contention. And the lease is a
//! guess: a critical section that outlives it (a slow database) lets a
//! second request take the lock while the first still works, and the
//! unguarded write over-issues: only the UNIQUE key still holds.

use couponlab_sdk::sql::IsolationLevel;
use couponlab_sdk::{IssueResult, Outcome, Step, args, clock, plain_reads, redis, settle};

const UNLOCK: &str = include_str!("../../../lua/unlock.lua");
/// How long a lock lives unless released: the critical section must end sooner.
const LEASE_MS: u32 = 3_000;
/// How long a request waits for the lock.
const WAIT_MS: u64 = 2_000;
/// The pause after a failed try, doubling up to the ceiling.
const FIRST_PAUSE_MS: u32 = 2;
const MAX_PAUSE_MS: u32 = 20;

/// Takes the lock, or answers LOCK_WAIT_TIMEOUT.
fn acquire(key: &str, token: &str) -> Step<()> {
    let give_up = clock::now_millis() + WAIT_MS;
    let (mut tries, mut pause) = (0, FIRST_PAUSE_MS);
    loop {
        tries += 1;
        let set = redis::execute("SET", &args![key, token, "NX", "PX", LEASE_MS])?;
        if !set.is_nil() {
            return Ok(());
        }
        if clock::now_millis() >= give_up {
            return Err(IssueResult::of(Outcome::LockWaitTimeout).detail(format!(
                "the lock was not free within {WAIT_MS} ms ({tries} tries)"
            )));
        }
        clock::sleep(pause);
        pause = (pause * 2).min(MAX_PAUSE_MS);
    }
}

fn issue(request: &couponlab_sdk::IssueRequest) -> Step<IssueResult> {
    let key = couponlab_sdk::keys::lock(request.coupon_id);
    let token = couponlab_sdk::keys::holder_token(request.member_id);
    acquire(&key, &token)?;
    let result = plain_reads::issue(IsolationLevel::ReadCommitted, request);
    // What the critical section did stands whatever the release does: a
    // lock left behind goes with its lease.
    Ok(match redis::eval(UNLOCK, &[key], &args![token]) {
        Ok(released) if released.as_int() == Some(1) => result,
        // Another request holds the lock now: this one's lease ran out
        // while it worked, and both were inside at once.
        Ok(_) => result.label("leaseExpired", 1),
        Err(_) => result.label("releaseFailed", 1),
    })
}

couponlab_sdk::strategy! {
    struct RedisSpinLock { method: "REDIS_SPIN_LOCK", claims: [Total, Member, Acked], summary: "SET NX PX lock, retried with backoff; the plain check-and-insert under it; compare-and-delete release" }
    fn issue(request) { settle(issue(&request)) }
}
