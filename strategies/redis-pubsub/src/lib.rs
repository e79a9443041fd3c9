//! REDIS_PUBSUB (stage 5): the Lua reservation, then
//! `PUBLISH coupon:issue:requests "memberId:couponId"`, and 202. The reply is
//! how many subscribers received the message, which is not completion: with
//! no subscriber the message is gone and only the reservation remains. The
//! subscriber (this same component, as the message handler) runs the confirm
//! step, SREM on failure.

use couponlab_sdk::{
    Compensation, Confirmation, Descriptor, IssueRequest, IssueResult, Outcome, Step, args,
    compensate, confirm, keys, message, redis, reserve, settle,
};

couponlab_sdk::world!("pubsub-issuer");

use exports::couponlab::strategy::{message_handler, strategy};

struct RedisPubsub;

impl strategy::Guest for RedisPubsub {
    fn describe() -> Descriptor {
        Descriptor {
            method: "REDIS_PUBSUB".into(),
            summary: "Lua reservation, PUBLISH, 202; the subscriber runs the DB confirm step"
                .into(),
        }
    }

    fn issue(request: IssueRequest) -> IssueResult {
        settle(issue(request.coupon_id, request.member_id))
    }

    fn compensate(request: IssueRequest) -> Compensation {
        compensate::release_unless_issued(request.coupon_id, request.member_id)
    }
}

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    reserve::with_lua(coupon_id, member_id)?;
    let published = redis::execute(
        "PUBLISH",
        &args![
            keys::REQUESTS_CHANNEL,
            message::format(coupon_id, member_id)
        ],
    );
    match published {
        Ok(receivers) => {
            let receivers = receivers.as_int().unwrap_or(0);
            Ok(IssueResult::of(Outcome::Accepted).label("receivers", receivers))
        }
        Err(err) => Ok(confirm::release(
            coupon_id,
            member_id,
            IssueResult::from(err),
        )),
    }
}

impl message_handler::Guest for RedisPubsub {
    fn handle_message(payload: String) -> Option<Confirmation> {
        let (coupon_id, member_id) = message::parse(&payload)?;
        Some(confirm::confirm_later(coupon_id, member_id))
    }
}

export!(RedisPubsub);
