//! The shards section of a coupon's result: REDIS_LUA_SHARDED's stock, shard
//! by shard — each shard's part of the total, what it reserved, the rows of
//! its members, and what it would still sell. A shard left with stock while
//! another refused members is the method's lesson, visible here.

use std::collections::BTreeSet;

use couponlab_contract::results::ShardFigures;
use couponlab_contract::{keys, shards};

use crate::redis_target::RedisConn;

/// Every shard's figures, or `None` when the coupon has no shard in Redis
/// (no sharded method served it).
pub(super) async fn shard_figures(
    redis: &RedisConn,
    coupon_id: u64,
    issued_members: &BTreeSet<u64>,
) -> Result<Option<Vec<ShardFigures>>, redis::RedisError> {
    // The shards lie in different slots: on a cluster, not one pipeline.
    let mut commands = Vec::new();
    for shard in 0..shards::COUNT {
        commands.push(redis::Cmd::get(keys::shard_stock(coupon_id, shard)));
        commands.push(redis::Cmd::scard(keys::shard_issued(coupon_id, shard)));
    }
    // Stock, then reservations, for each shard in turn.
    let replies: Vec<Option<u64>> =
        redis::from_redis_value(redis::Value::Array(redis.clone().each(commands).await?))?;
    let read: Vec<(Option<u64>, u64)> = replies
        .chunks(2)
        .map(|pair| (pair[0], pair.get(1).copied().flatten().unwrap_or(0)))
        .collect();
    if read
        .iter()
        .all(|&(stock, reserved)| stock.is_none() && reserved == 0)
    {
        return Ok(None);
    }
    let mut issued = vec![0; shards::COUNT as usize];
    for &member in issued_members {
        issued[shards::of(member) as usize] += 1;
    }
    Ok(Some(
        (0..shards::COUNT)
            .zip(read)
            .zip(issued)
            .map(|((shard, (stock, reserved)), issued)| ShardFigures {
                shard,
                stock,
                reserved,
                issued,
                remaining: stock.map(|stock| stock.saturating_sub(reserved)),
            })
            .collect(),
    ))
}
