//! REDIS_STREAM (stage 6): the Lua reservation, then XADD to
//! `coupon:issue:stream:{couponId}`, and 202. Two commands: a crash between them leaves
//! the reservation without its entry (REDIS_STREAM_ATOMIC closes that gap).
//! The host's stream consumers hand each entry back to this component, which
//! confirms it and says whether it may be acked.

use couponlab_sdk::{
    IssueResult, Outcome, Step, args, clock, compensate, confirm, keys, redis, reserve, settle,
};
use keys::fields;

couponlab_sdk::world!("stream-issuer");

use exports::couponlab::strategy::{strategy, stream_consumer};

couponlab_sdk::stream_consumer!(RedisStream: stream_consumer::Guest);

const METHOD: &str = "REDIS_STREAM";

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    reserve::with_lua(coupon_id, member_id)?;
    let entry = args![
        keys::issue_stream(coupon_id),
        "*",
        fields::MEMBER_ID,
        member_id,
        fields::COUPON_ID,
        coupon_id,
        fields::METHOD,
        METHOD,
        fields::ACCEPTED_AT,
        clock::now_millis()
    ];
    match redis::execute("XADD", &entry) {
        Ok(_) => Ok(IssueResult::of(Outcome::Accepted)),
        Err(err) => Ok(confirm::release(
            coupon_id,
            member_id,
            IssueResult::from(err),
        )),
    }
}

couponlab_sdk::strategy! {
    struct RedisStream: strategy::Guest { method: METHOD, claims: [Total, Member, Acked], summary: "Lua reservation, then XADD, 202; stream consumers run the DB confirm step", reservation_set: true }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
    fn compensate(request) { compensate::release_unless_issued(request.coupon_id, request.member_id) }
}
