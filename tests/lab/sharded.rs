//! REDIS_LUA_SHARDED: the stock split over shards, against real Redis and
//! MariaDB. The invariants under 500 concurrent requests, the shards as the
//! result reports them against what Redis and the rows hold, and the lesson
//! measured: a member refused on a sold-out shard while another shard still
//! has stock, and a later arrival served ahead of the refused one.

use std::collections::BTreeMap;

use couponlab_contract::{keys, shards};
use serde_json::{Value, json};

use crate::common::{Reply, Setup, assert_invariants_hold, outcome};

const METHOD: &str = "REDIS_LUA_SHARDED";
const COMPONENT: &str = "redis_lua_sharded";

/// The result's shards as (stock, reserved, issued, remaining), in order.
fn shard_figures(result: &Value) -> Vec<(u64, u64, u64, u64)> {
    let shards = result["shards"].as_array().expect("a shards section");
    assert_eq!(shards.len(), shards::COUNT as usize, "{result}");
    shards
        .iter()
        .enumerate()
        .map(|(at, shard)| {
            assert_eq!(shard["shard"], json!(at), "{shard}");
            let figure = |name: &str| shard[name].as_u64().expect(name);
            (
                figure("stock"),
                figure("reserved"),
                figure("issued"),
                figure("remaining"),
            )
        })
        .collect()
}

/// How many replies had each outcome.
fn outcomes(replies: &[Reply]) -> BTreeMap<String, usize> {
    let mut tally = BTreeMap::new();
    for reply in replies {
        *tally.entry(outcome(reply)).or_default() += 1;
    }
    tally
}

/// `members` grouped by the shard each reserves on.
fn by_shard(members: &[u64]) -> Vec<Vec<u64>> {
    let mut grouped = vec![Vec::new(); shards::COUNT as usize];
    for &member in members {
        grouped[shards::of(member) as usize].push(member);
    }
    grouped
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn redis_lua_sharded_keeps_both_invariants_under_500_concurrent_requests() {
    let lab = Setup::with(&[COMPONENT]).start().await;
    let (members, coupon) = lab.members_and_coupon(250, 100).await;
    // Every member asks twice at once: duplicates race the shards' stock.
    let requests: Vec<u64> = members.iter().chain(&members).copied().collect();
    let replies = lab.issue_all(coupon, &requests, METHOD).await;

    let mut answered_issued: Vec<u64> = requests
        .iter()
        .zip(&replies)
        .filter(|(_, reply)| reply.status == 200)
        .map(|(&member, _)| member)
        .collect();
    answered_issued.sort_unstable();
    for reply in &replies {
        assert!(matches!(reply.status.as_u16(), 200 | 409), "{}", reply.body);
    }
    // Each shard sells its part to its own members: all of it, as every
    // shard has more members asking than stock.
    let expected: u64 = by_shard(&members)
        .iter()
        .zip(0..)
        .map(|(on_shard, shard)| (on_shard.len() as u64).min(shards::stock(100, shard)))
        .sum();
    assert_eq!(expected, 100);
    // The twin of each issued request finds the member's reservation on
    // its shard; every other request finds its shard sold out.
    assert_eq!(
        outcomes(&replies),
        BTreeMap::from([
            ("DUPLICATE".to_string(), 100),
            ("ISSUED".to_string(), 100),
            ("SOLD_OUT".to_string(), 300),
        ])
    );

    // Every 200 is one row, once per member, and the shards' sets hold
    // exactly the issued members.
    let in_db = lab.issued_members(coupon).await;
    assert_eq!(in_db, answered_issued);
    assert!(in_db.windows(2).all(|w| w[0] < w[1]), "a member twice");
    assert_eq!(lab.reserved_on_shards(coupon).await, in_db);

    let result = lab.result(coupon).await;
    assert_invariants_hold(&result);
    let figures = shard_figures(&result);
    let sum = |pick: fn(&(u64, u64, u64, u64)) -> u64| figures.iter().map(pick).sum::<u64>();
    assert_eq!(
        sum(|f| f.0),
        100,
        "the shards' stock is the total: {figures:?}"
    );
    assert_eq!(sum(|f| f.1), in_db.len() as u64, "{figures:?}");
    assert_eq!(sum(|f| f.2), in_db.len() as u64, "{figures:?}");
    assert_eq!(sum(|f| f.3), 0, "{figures:?}");
    for (shard, &(stock, reserved, issued, _)) in (0..).zip(&figures) {
        assert_eq!(stock, shards::stock(100, shard));
        assert_eq!((reserved, issued), (stock, stock), "shard {shard}");
    }
    // The method keeps no coupon-wide set.
    assert_eq!(result.get("redis"), None, "{result}");
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_shard_with_fewer_members_keeps_stock_while_others_refuse() {
    let lab = Setup::with(&[COMPONENT, "redis_lua"]).start().await;
    let members = lab.members(400).await;
    let grouped = by_shard(&members);
    // Shard 0 gets 3 members, the other shards 30 each, at once; then one
    // more member of shard 1 and, after it, one of shard 0.
    let (few, late) = (&grouped[0][..3], grouped[0][3]);
    let (crowds, refused_late): (Vec<&[u64]>, u64) = (
        grouped[1..]
            .iter()
            .map(|on_shard| &on_shard[..30])
            .collect(),
        grouped[1][30],
    );
    let burst: Vec<u64> = few
        .iter()
        .chain(crowds.iter().flat_map(|crowd| crowd.iter()))
        .copied()
        .collect();
    assert_eq!(burst.len(), 93);

    let mut measured = BTreeMap::new();
    for method in [METHOD, "REDIS_LUA"] {
        let coupon = lab.coupon(40).await;
        let replies = lab.issue_all(coupon, &burst, method).await;
        let after = [
            lab.issue(coupon, refused_late, method).await,
            lab.issue(coupon, late, method).await,
        ];
        let result = lab.result(coupon).await;
        assert_eq!(result["invariants"]["neverOverIssued"], json!(true));
        assert_eq!(result["invariants"]["onePerMember"], json!(true));
        measured.insert(method, (outcomes(&replies), after, result));
    }

    // REDIS_LUA sells the whole coupon and refuses both late members.
    let (lua, lua_after, lua_result) = &measured["REDIS_LUA"];
    assert_eq!(lua["ISSUED"], 40, "{lua:?}");
    assert_eq!(lua_result["issueRows"], json!(40));
    for reply in lua_after {
        reply.fails_as(409, "SOLD_OUT");
    }

    // The sharded stock refuses members of the crowded shards while shard
    // 0, which had fewer members than stock, still has some.
    let (sharded, after, result) = &measured[METHOD];
    assert_eq!(sharded["ISSUED"], 3 + 3 * 10, "{sharded:?}");
    assert_eq!(sharded["SOLD_OUT"], 3 * 20, "{sharded:?}");
    let message = after[0].fails_as(409, "SOLD_OUT");
    assert!(message.contains("shard 1"), "{message}");
    // The member who came later, on the shard with stock, is served.
    assert_eq!(after[1].expect_ok()["outcome"], json!("ISSUED"));
    let figures = shard_figures(result);
    assert_eq!(
        figures,
        [
            (10, 4, 4, 6),
            (10, 10, 10, 0),
            (10, 10, 10, 0),
            (10, 10, 10, 0)
        ]
    );
    assert_eq!(result["issueRows"], json!(34));
    // Stock left unsold while members were refused: the total less the rows.
    let left: u64 = figures.iter().map(|f| f.3).sum();
    assert_eq!(left, 40 - 34);
    // Out of turn: shard 0's late member, and any of the burst whose shard
    // still had stock when an earlier arrival's shard had none.
    let out_of_turn = result["requests"]["fairness"]["servedAfterEarlierSoldOut"]
        .as_u64()
        .unwrap();
    assert!(out_of_turn >= 1, "{result}");
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_confirm_gives_the_shard_its_unit_back_and_lost_keys_are_set_again() {
    let lab = Setup::with(&[COMPONENT]).start().await;
    let (members, coupon) = lab.members_and_coupon(2, 5).await;
    let shard = shards::of(members[0]);
    let set = keys::shard_issued(coupon, shard);

    // The database says sold out while the shard has room: the reservation
    // is taken back; so is one for a member the database does not know.
    lab.assert_database_refuses(coupon, members[0], METHOD)
        .await;
    assert!(lab.reserved_on_shards(coupon).await.is_empty());
    let result = lab.result(coupon).await;
    assert_eq!(
        result["requests"]["byMethod"][METHOD]["compensations"],
        json!(2)
    );
    lab.execute(
        "UPDATE coupons SET issued_count = 0 WHERE id = ?",
        &[coupon],
    )
    .await;

    // Redis loses the coupon's total and every shard's stock: the first
    // request reads the total from the database and splits it again.
    let mut lost = vec![keys::total(coupon)];
    lost.extend((0..shards::COUNT).map(|s| keys::shard_stock(coupon, s)));
    let _: () = lab.redis_query(redis::cmd("DEL").arg(&lost)).await;
    lab.issue(coupon, members[0], METHOD).await.expect_ok();
    let stock: Vec<Option<u64>> = lab.redis_query(redis::cmd("MGET").arg(&lost[1..])).await;
    assert_eq!(stock, [Some(2), Some(1), Some(1), Some(1)]);

    // A shard's stock set again after sales counts them still: its set,
    // not its stock, says what it sold.
    let _: () = lab
        .redis_query(redis::cmd("DEL").arg(keys::shard_stock(coupon, shard)))
        .await;
    lab.issue(coupon, members[0], METHOD)
        .await
        .fails_as(409, "DUPLICATE");
    let figures = shard_figures(&lab.result(coupon).await);
    let (stock, reserved, issued, remaining) = figures[shard as usize];
    assert_eq!((reserved, issued), (1, 1));
    assert_eq!(remaining, stock - 1);
    assert_eq!(
        lab.redis_query::<Vec<u64>>(redis::cmd("SMEMBERS").arg(&set))
            .await,
        [members[0]]
    );
    lab.finish().await;
}
