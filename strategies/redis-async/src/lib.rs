//! REDIS_ASYNC (stage 4): the Lua reservation, then a job on the host's
//! in-process queue, and 202 at once. A worker later runs the confirm step
//! (SREM on failure). A full queue answers 503 and removes the reservation.
//! Like the seed's `@Async` executor, queued jobs live in the server's
//! memory: a crash loses them, leaving reservations without issue rows.

use couponlab_sdk::{
    Confirmation, IssueResult, Outcome, Step, compensate, confirm, message, reserve, settle,
};

couponlab_sdk::world!("async-issuer");

use couponlab::strategy::jobs;
use exports::couponlab::strategy::{job_runner, strategy};

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    reserve::with_lua(coupon_id, member_id)?;
    match jobs::submit(&message::format(coupon_id, member_id)) {
        Ok(()) => Ok(IssueResult::of(Outcome::Accepted)),
        Err(jobs::SubmitError::QueueFull) => Ok(confirm::release(
            coupon_id,
            member_id,
            IssueResult::of(Outcome::QueueFull),
        )),
        Err(jobs::SubmitError::TooLarge) => Ok(confirm::release(
            coupon_id,
            member_id,
            IssueResult::of(Outcome::Unavailable).detail("the job payload is over the host's cap"),
        )),
    }
}

impl job_runner::Guest for RedisAsync {
    fn run_job(payload: String) -> Confirmation {
        match message::parse(&payload) {
            Some((coupon_id, member_id)) => confirm::confirm_later(coupon_id, member_id),
            None => IssueResult::of(Outcome::Unavailable)
                .detail(format!("unreadable job payload {payload:?}"))
                .confirmation(0, 0),
        }
    }
}

couponlab_sdk::strategy! {
    struct RedisAsync: strategy::Guest { method: "REDIS_ASYNC", claims: [Total, Member], summary: "Lua reservation, 202, then the DB confirm step on the host's job workers", reservation_set: true }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
    fn compensate(request) { compensate::release_unless_issued(request.coupon_id, request.member_id) }
}
