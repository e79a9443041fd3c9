//! REDIS_LUA_RABBITMQ: the Lua reservation, then one message to the lab's
//! RabbitMQ quorum queue, published with confirms and `mandatory`, and 202
//! only once RabbitMQ confirmed it. The host's RabbitMQ consumers hand each
//! message back to this component, which confirms it in the database; the
//! ack follows the commit. A message redelivered past the queue's delivery
//! limit is dead-lettered by RabbitMQ, and its reservation given back here.

use couponlab_sdk::broker::{self, Published};
use couponlab_sdk::settle;

couponlab_sdk::world!("broker-issuer");

use couponlab::strategy::broker::{Kind, PublishError, publish};
use exports::couponlab::strategy::{strategy, stream_consumer};

couponlab_sdk::stream_consumer!(RedisLuaRabbitmq: stream_consumer::Guest);

fn to_rabbitmq(id: &str, fields: &[(String, String)]) -> Published {
    match publish(Kind::Rabbitmq, id, fields) {
        Ok(()) => Published::Confirmed,
        Err(PublishError::Refused(why)) => Published::Refused(why),
        Err(PublishError::Unconfirmed(why)) => Published::Unconfirmed(why),
    }
}

couponlab_sdk::strategy! {
    struct RedisLuaRabbitmq: strategy::Guest { method: "REDIS_LUA_RABBITMQ", claims: [Total, Member, Acked], summary: "one Lua script reserves, then a RabbitMQ quorum queue confirms the message, 202; its consumers run the DB confirm step", reservation_set: true }
    fn issue(request) { settle(broker::issue(request.coupon_id, request.member_id, to_rabbitmq)) }
    fn compensate(request) { broker::compensate(request.coupon_id, request.member_id, to_rabbitmq) }
}
