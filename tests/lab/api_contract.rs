//! The HTTP contract: statuses, the envelope on every route, bad input.

use reqwest::Method;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::common::{REDIS, Setup, component};

const METHODS: [&str; 2] = ["PESSIMISTIC", "REDIS_LUA"];

/// A NUL character, which PostgreSQL cannot store in a text column (it
/// once answered 503, as if the database were down), is a 400 that says so
/// on every route that takes text, before the text reaches the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nul_character_in_any_text_is_a_400_on_postgres() {
    let lab = Setup::with(&["redis_lua_gate"]).on_postgres().start().await;
    let (members, coupon) = lab.members_and_coupon(1, 5).await;
    let nul = "a\u{0}b";
    let issue = format!("/lab/coupons/{coupon}/issue");
    let cancel = format!("/lab/drop/coupons/{coupon}/cancel");
    for (path, body, field) in [
        (
            "/lab/coupons",
            json!({ "name": nul, "totalCount": 1 }),
            "name",
        ),
        (
            &issue,
            json!({ "memberId": members[0], "method": "REDIS_LUA_GATE", "idempotencyKey": nul }),
            "idempotencyKey",
        ),
        (
            &issue,
            json!({ "memberId": members[0], "method": "REDIS_LUA_GATE\u{0}" }),
            "method",
        ),
        (
            &cancel,
            json!({ "memberId": members[0], "idempotencyKey": nul }),
            "idempotencyKey",
        ),
    ] {
        let reply = lab.post(path, body).await;
        let message = reply.fails_with(400);
        assert!(
            message.starts_with(&format!("{field} must not hold a NUL character")),
            "{path}: {message}"
        );
    }
    for filter in ["outcome", "method"] {
        let reply = lab
            .get(&format!("/lab/coupons/{coupon}/traces?{filter}=a%00b"))
            .await;
        assert!(reply.fails_with(400).contains("NUL"), "{}", reply.body);
    }
    assert_eq!(lab.issue_rows(coupon).await, 0);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_member_twice_gets_409_the_second_time() {
    let lab = Setup::with(&["pessimistic", "redis_lua"]).start().await;
    let members = lab.members(1).await;
    for method in METHODS {
        let coupon = lab.coupon(10).await;
        lab.issue(coupon, members[0], method).await.expect_ok();
        let again = lab.issue(coupon, members[0], method).await;
        again.fails_as(409, "DUPLICATE");
        assert_eq!(lab.issued_members(coupon).await, members, "{method}");
    }
    lab.finish().await;
}

/// The member is the body's, so an unknown one is a 422 (the URL's coupon
/// is there); the coupon is the URL's, so an unknown one is a 404. Either
/// is told by its id, never in the database's words (PESSIMISTIC's foreign
/// key once told the database's and the constraint's names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_members_get_422_and_unknown_coupons_404() {
    let lab = Setup::with(&["pessimistic", "redis_lua"]).start().await;
    let (members, coupon) = lab.members_and_coupon(1, 10).await;
    for method in METHODS {
        let reply = lab.issue(coupon, 999_999_999, method).await;
        let message = reply.fails_as(422, "UNKNOWN_MEMBER");
        assert_eq!(message, "UNKNOWN_MEMBER: member 999999999 does not exist");
        let unknown = coupon + 999_999;
        let reply = lab.issue(unknown, members[0], method).await;
        let message = reply.fails_as(404, "UNKNOWN_COUPON");
        assert_eq!(
            message,
            format!("UNKNOWN_COUPON: coupon {unknown} does not exist")
        );
    }
    // Nothing was issued, and the failed reservation was compensated.
    assert!(lab.issued_members(coupon).await.is_empty());
    assert!(lab.reserved_members(coupon).await.is_empty());
    lab.get(&format!("/lab/coupons/{}/result", coupon + 999_999))
        .await
        .fails_with(404);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_400_in_the_envelope() {
    let lab = Setup::with(&["pessimistic"]).start().await;
    let (members, coupon) = lab.members_and_coupon(1, 10).await;
    let issue = format!("/lab/coupons/{coupon}/issue");
    let member = members[0];
    let cases: Vec<(&str, String, String)> = vec![
        ("malformed JSON", issue.clone(), "{\"memberId\": 1,".into()),
        ("not an object", issue.clone(), "[1, 2]".into()),
        (
            "unknown method",
            issue.clone(),
            json!({"memberId": member, "method": "NO_SUCH"}).to_string(),
        ),
        (
            "missing method",
            issue.clone(),
            json!({"memberId": member}).to_string(),
        ),
        (
            "missing memberId",
            issue.clone(),
            json!({"method": "PESSIMISTIC"}).to_string(),
        ),
        (
            "mistyped memberId",
            issue.clone(),
            json!({"memberId": "one", "method": "PESSIMISTIC"}).to_string(),
        ),
        (
            "mistyped duplicateCheck",
            issue.clone(),
            json!({"memberId": member, "method": "PESSIMISTIC", "duplicateCheck": "no"})
                .to_string(),
        ),
        (
            "zero memberId",
            issue.clone(),
            json!({"memberId": 0, "method": "PESSIMISTIC"}).to_string(),
        ),
        (
            "negative memberId",
            issue.clone(),
            json!({"memberId": -3, "method": "PESSIMISTIC"}).to_string(),
        ),
        (
            "zero quantity",
            issue.clone(),
            json!({"memberId": member, "method": "PESSIMISTIC", "quantity": 0}).to_string(),
        ),
        (
            "non-numeric coupon id",
            "/lab/coupons/abc/issue".into(),
            json!({"memberId": member, "method": "PESSIMISTIC"}).to_string(),
        ),
        (
            "zero coupon id",
            "/lab/coupons/0/issue".into(),
            json!({"memberId": member, "method": "PESSIMISTIC"}).to_string(),
        ),
        (
            "zero members",
            "/lab/members".into(),
            json!({"count": 0}).to_string(),
        ),
        (
            "negative members",
            "/lab/members".into(),
            json!({"count": -5}).to_string(),
        ),
        (
            "fractional members",
            "/lab/members".into(),
            json!({"count": 1.5}).to_string(),
        ),
        (
            "too many members",
            "/lab/members".into(),
            json!({"count": 1_000_001}).to_string(),
        ),
        (
            "zero total",
            "/lab/coupons".into(),
            json!({"name": "x", "totalCount": 0}).to_string(),
        ),
        (
            "negative total",
            "/lab/coupons".into(),
            json!({"name": "x", "totalCount": -1}).to_string(),
        ),
        (
            "empty name",
            "/lab/coupons".into(),
            json!({"name": " ", "totalCount": 5}).to_string(),
        ),
        (
            "missing totalCount",
            "/lab/coupons".into(),
            json!({"name": "x"}).to_string(),
        ),
    ];
    for (case, path, body) in cases {
        let reply = lab.request(Method::POST, &path, Some(&body)).await;
        assert_eq!(reply.status.as_u16(), 400, "{case}: {}", reply.body);
        reply.fails_with(400);
    }
    // Nothing above created anything.
    assert!(lab.issued_members(coupon).await.is_empty());
    assert_eq!(lab.number("SELECT COUNT(*) FROM coupons").await, 1);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_paths_get_404_and_wrong_verbs_405_in_the_envelope() {
    let lab = Setup::with(&["pessimistic"]).start().await;
    lab.get("/no/such/path").await.fails_with(404);
    lab.request(Method::POST, "/lab/nothing", Some("{}"))
        .await
        .fails_with(404);
    lab.get("/lab/members").await.fails_with(405);
    lab.request(Method::PUT, "/lab/data", None)
        .await
        .fails_with(405);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strategies_lists_each_component_with_its_hash() {
    let lab = Setup::with(&["pessimistic", "redis_lua"]).start().await;
    let reply = lab.get("/lab/strategies").await;
    let listed = reply.expect_ok()["strategies"].as_array().unwrap().clone();
    let methods: Vec<&str> = listed
        .iter()
        .map(|s| s["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods, ["PESSIMISTIC", "REDIS_LUA"]);
    for (entry, file) in listed.iter().zip(["pessimistic", "redis_lua"]) {
        let sha = hex::encode(Sha256::digest(std::fs::read(component(file)).unwrap()));
        assert_eq!(entry["sha256"], json!(sha));
        assert_eq!(entry["world"], json!("issuer"));
        assert!(
            entry["file"]
                .as_str()
                .unwrap()
                .ends_with(&format!("{file}.wasm"))
        );
    }
    assert_eq!(reply.expect_ok()["rejected"], json!([]));
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_data_truncates_the_tables_and_the_coupon_keys() {
    // Its own Redis database: it deletes every coupon:* key there.
    let lab = Setup::with(&["redis_lua"])
        .redis_url(format!("{REDIS}/15"))
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(3, 5).await;
    lab.issue(coupon, members[0], "REDIS_LUA").await.expect_ok();
    let _: () = lab
        .redis_query(redis::cmd("SET").arg("unrelated:key").arg(1))
        .await;

    let reply = lab.request(Method::DELETE, "/lab/data", None).await;
    assert_eq!(
        reply.expect_ok()["deletedRedisKeys"],
        json!(2),
        "{}",
        reply.body
    );

    for table in ["members", "coupons", "coupon_issues"] {
        let rows = lab.number(&format!("SELECT COUNT(*) FROM {table}")).await;
        assert_eq!(rows, 0, "{table}");
    }
    let left: Vec<String> = lab.redis_query(redis::cmd("KEYS").arg("coupon:*")).await;
    assert!(left.is_empty(), "{left:?}");
    let unrelated: Option<i64> = lab
        .redis_query(redis::cmd("GET").arg("unrelated:key"))
        .await;
    assert_eq!(unrelated, Some(1));
    let _: () = lab
        .redis_query(redis::cmd("DEL").arg("unrelated:key"))
        .await;
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_gets_503_and_the_server_keeps_answering() {
    // Nothing listens on port 1.
    let lab = Setup::with(&["pessimistic", "redis_lua"])
        .redis_url("redis://127.0.0.1:1/0")
        .start()
        .await;
    let members = lab.members(2).await;
    let created = lab
        .post("/lab/coupons", json!({"name": "no redis", "totalCount": 5}))
        .await;
    assert_eq!(created.expect_ok()["warmed"], json!(false));
    let coupon = created.expect_ok()["id"].as_u64().unwrap();

    let message = lab
        .issue(coupon, members[0], "REDIS_LUA")
        .await
        .fails_with(503)
        .to_string();
    assert!(message.contains("Redis"), "{message}");
    lab.issue(coupon, members[1], "PESSIMISTIC")
        .await
        .expect_ok();
    assert_eq!(lab.result(coupon).await["issueRows"], json!(1));
    lab.finish().await;
}
