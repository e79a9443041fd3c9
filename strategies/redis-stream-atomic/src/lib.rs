//! REDIS_STREAM_ATOMIC (stage 6): one EVALSHA checks, XADDs and SADDs, so the
//! reservation and its stream entry exist together or not at all. The rest
//! is REDIS_STREAM: 202, then the host's stream consumers hand each entry
//! back to this component to confirm.

use couponlab_sdk::{
    Confirmation, Descriptor, Handled, IssueRequest, IssueResult, Outcome, Step, StreamEntry, args,
    clock, coupon, keys, redis, settle, stream,
};

couponlab_sdk::world!("stream-issuer");

use exports::couponlab::strategy::{strategy, stream_consumer};

const METHOD: &str = "REDIS_STREAM_ATOMIC";
const RESERVE_AND_ENQUEUE: &str = include_str!("../../../lua/reserve_and_enqueue.lua");

struct RedisStreamAtomic;

impl strategy::Guest for RedisStreamAtomic {
    fn describe() -> Descriptor {
        Descriptor {
            method: METHOD.into(),
            summary: "one Lua script reserves and XADDs atomically, 202; stream consumers confirm"
                .into(),
        }
    }

    fn issue(request: IssueRequest) -> IssueResult {
        settle(issue(request.coupon_id, request.member_id))
    }
}

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    let keys = args![
        keys::issued(coupon_id),
        keys::total(coupon_id),
        keys::ISSUE_STREAM
    ];
    let eval = || {
        let argv = args![member_id, coupon_id, METHOD, clock::now_millis()];
        redis::eval(RESERVE_AND_ENQUEUE, &keys, &argv)
    };
    let mut verdict = eval()?;
    if verdict.as_int() == Some(-1) {
        coupon::warm_total(coupon_id)?;
        verdict = eval()?;
    }
    match verdict.as_int() {
        Some(1) => Ok(IssueResult::of(Outcome::Accepted)),
        Some(0) => Err(IssueResult::of(Outcome::SoldOut)),
        Some(2) => Err(IssueResult::of(Outcome::Duplicate)),
        _ => {
            Err(IssueResult::of(Outcome::Unavailable).detail(format!("unexpected reply {verdict}")))
        }
    }
}

impl stream_consumer::Guest for RedisStreamAtomic {
    fn handle_entry(entry: StreamEntry) -> Handled {
        stream::handle(&entry)
    }

    fn dead_letter(entry: StreamEntry) -> Confirmation {
        stream::dead_letter(&entry)
    }
}

export!(RedisStreamAtomic);
