//! REDIS_PUBSUB (stage 5): the Lua reservation, then
//! `PUBLISH coupon:issue:requests "memberId:couponId"`, and 202. The reply is
//! how many subscribers received the message, which is not completion: with
//! no subscriber the message is gone and only the reservation remains. The
//! subscriber (this same component, as the message handler) runs the confirm
//! step, SREM on failure.

use couponlab_sdk::{
    Confirmation, IssueResult, Outcome, Step, args, compensate, confirm, keys, message, redis,
    reserve, settle,
};

couponlab_sdk::world!("pubsub-issuer");

use exports::couponlab::strategy::{message_handler, strategy};

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

couponlab_sdk::strategy! {
    struct RedisPubsub: strategy::Guest {
        method: "REDIS_PUBSUB",
        claims: [Total, Member],
        summary: "Lua reservation, PUBLISH, 202; the subscriber runs the DB confirm step",
        reservation_set: true,
        // The result shows the requests by how many subscribers received
        // their message: 0 means nobody will ever confirm them.
        result_labels: ["receivers" => "publishReceivers"],
    }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
    fn compensate(request) { compensate::release_unless_issued(request.coupon_id, request.member_id) }
}
