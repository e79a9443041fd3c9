//! REDIS_LUA_JETSTREAM: the Lua reservation, then one message to the lab's
//! JetStream stream under the id `couponId:memberId` (the stream's
//! duplicate window drops a second publish of it), and 202 only once the
//! stream acked it. The host's durable pull consumer hands each message
//! back to this component, which confirms it in the database; the ack
//! follows the commit, as a double ack. A message delivered `MaxDeliver`
//! times is copied to the dead-letter stream and its reservation given
//! back here.

use couponlab_sdk::broker::{self, Published};
use couponlab_sdk::settle;

couponlab_sdk::world!("broker-issuer");

use couponlab::strategy::broker::{Kind, PublishError, publish};
use exports::couponlab::strategy::{strategy, stream_consumer};

couponlab_sdk::stream_consumer!(RedisLuaJetstream: stream_consumer::Guest);

fn to_jetstream(id: &str, fields: &[(String, String)]) -> Published {
    match publish(Kind::Jetstream, id, fields) {
        Ok(()) => Published::Confirmed,
        Err(PublishError::Refused(why)) => Published::Refused(why),
        Err(PublishError::Unconfirmed(why)) => Published::Unconfirmed(why),
    }
}

couponlab_sdk::strategy! {
    struct RedisLuaJetstream: strategy::Guest { method: "REDIS_LUA_JETSTREAM", claims: [Total, Member, Acked], summary: "one Lua script reserves, then a JetStream stream acks the message, 202; a durable pull consumer runs the DB confirm step", reservation_set: true }
    fn issue(request) { settle(broker::issue(request.coupon_id, request.member_id, to_jetstream)) }
    fn compensate(request) { broker::compensate(request.coupon_id, request.member_id, to_jetstream) }
}
