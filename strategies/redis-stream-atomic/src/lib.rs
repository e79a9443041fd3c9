//! REDIS_STREAM_ATOMIC (stage 6): one EVALSHA checks, XADDs and SADDs, so the
//! reservation and its stream entry exist together or not at all. The rest
//! is REDIS_STREAM: 202, then the host's stream consumers hand each entry
//! back to this component to confirm.

use couponlab_sdk::{IssueResult, Outcome, Step, compensate, keys, reserve, settle};

couponlab_sdk::world!("stream-issuer");

use exports::couponlab::strategy::{strategy, stream_consumer};

couponlab_sdk::stream_consumer!(RedisStreamAtomic: stream_consumer::Guest);

const METHOD: &str = "REDIS_STREAM_ATOMIC";

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    reserve::and_enqueue(coupon_id, member_id, keys::issue_stream, METHOD)?;
    Ok(IssueResult::of(Outcome::Accepted))
}

couponlab_sdk::strategy! {
    struct RedisStreamAtomic: strategy::Guest { method: METHOD, claims: [Total, Member, Acked], summary: "one Lua script reserves and XADDs atomically, 202; stream consumers confirm", reservation_set: true }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
    fn compensate(_request) { compensate::carried_by_entry() }
}
