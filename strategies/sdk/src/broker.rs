//! What the broker methods (REDIS_LUA_RABBITMQ, REDIS_LUA_JETSTREAM) share:
//! the Lua reservation, then one message to a broker, and 202 only once the
//! broker confirmed it. The consumer side is the stream world's
//! ([`crate::stream`]): the host hands each message back as a stream entry.
//!
//! The `broker` import is generated in each method's crate (its world is
//! `broker-issuer`), so the crate passes its `publish` in, answering
//! [`Published`].
//!
//! - confirmed: 202; the message carries the reservation to its consumer,
//!   which confirms it or gives it back;
//! - refused: the broker does not have it, so the reservation is given
//!   back and the answer is 503;
//! - unconfirmed (the confirm was lost): the broker may have it, so the
//!   answer is 503 and the request is settled later, by publishing it
//!   again under the same id (JetStream's duplicate window drops the
//!   second; a second RabbitMQ message finds the row, a duplicate): then
//!   the consumer decides, whichever message it gets.

use crate::bindings::couponlab::strategy::types::{Compensation, IssueResult, Outcome};
use crate::keys::fields;
use crate::outcome::Step;
use crate::{args, clock, compensate, confirm, keys, redis, reserve};

/// What a broker said of one message.
pub enum Published {
    Confirmed,
    /// The broker does not have it.
    Refused(String),
    /// The broker may have it: its confirm was lost.
    Unconfirmed(String),
}

/// A member's request for a coupon, as its message's id: one reservation
/// per member and coupon, so one message id.
pub fn message_id(coupon_id: u64, member_id: u64) -> String {
    format!("{coupon_id}:{member_id}")
}

/// The message's fields; the host adds the method.
fn message(coupon_id: u64, member_id: u64) -> Vec<(String, String)> {
    vec![
        (fields::MEMBER_ID.into(), member_id.to_string()),
        (fields::COUPON_ID.into(), coupon_id.to_string()),
        (fields::ACCEPTED_AT.into(), clock::now_millis().to_string()),
    ]
}

/// Reserves with the Lua script, then publishes the request with `publish`.
pub fn issue(
    coupon_id: u64,
    member_id: u64,
    publish: impl FnOnce(&str, &[(String, String)]) -> Published,
) -> Step<IssueResult> {
    reserve::with_lua(coupon_id, member_id)?;
    let published = publish(
        &message_id(coupon_id, member_id),
        &message(coupon_id, member_id),
    );
    Ok(match published {
        Published::Confirmed => IssueResult::of(Outcome::Accepted),
        Published::Refused(why) => confirm::release(
            coupon_id,
            member_id,
            IssueResult::of(Outcome::Unavailable)
                .detail(format!("the broker did not take the request: {why}")),
        ),
        Published::Unconfirmed(why) => IssueResult::of(Outcome::Unavailable)
            .detail(format!(
                "the broker's confirm was lost ({why}); it may have the request, which is settled later"
            ))
            .settle_later(),
    })
}

/// Settles a request whose call ended without an answer or whose confirm
/// was lost: finished once the member has a row or no reservation (its
/// consumer confirmed it or gave it back); until then its message is
/// published again each time, and its consumer finishes it.
pub fn compensate(
    coupon_id: u64,
    member_id: u64,
    publish: impl FnOnce(&str, &[(String, String)]) -> Published,
) -> Compensation {
    match compensate::issued(coupon_id, member_id) {
        Ok(true) => return Compensation::of(0, "the member's coupon was issued"),
        Ok(false) => {}
        Err(err) => {
            let why = format!("the issue rows could not be read: {}", err.message());
            return Compensation::unfinished(0, why);
        }
    }
    match redis::execute("SISMEMBER", &args![keys::issued(coupon_id), member_id]) {
        Ok(reply) if reply.as_int() == Some(0) => {
            return Compensation::of(0, "there was no reservation to carry on");
        }
        Ok(_) => {}
        Err(err) => {
            let why = format!("the reservation could not be read: {}", err.message());
            return Compensation::unfinished(0, why);
        }
    }
    let published = publish(
        &message_id(coupon_id, member_id),
        &message(coupon_id, member_id),
    );
    match published {
        // Unfinished until the consumer has decided, so the host asks
        // again and the settlement says what the request became.
        Published::Confirmed => Compensation::unfinished(
            0,
            "the request was published again; its consumer confirms it or gives the reservation back",
        ),
        Published::Refused(why) | Published::Unconfirmed(why) => Compensation::unfinished(
            0,
            format!("the request could not be published again: {why}"),
        ),
    }
}
