//! `GET /lab/openapi.json`: an OpenAPI 3.1 document that lists every route
//! of the README's table, and whose schemas accept what the routes really
//! answer, successes and errors alike.

use std::collections::BTreeSet;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::{Reply, Setup, TestLab, until};

const DOCUMENT: &str = "/lab/openapi.json";

/// `(method, path)` of every row of the README's API table: its lines
/// `| POST | `/lab/...` | ...`.
fn readme_routes() -> BTreeSet<(String, String)> {
    let readme = include_str!("../../README.md");
    let routes: BTreeSet<(String, String)> = readme
        .lines()
        .filter_map(|line| {
            let mut cells = line.split('|').map(str::trim).skip(1);
            let method = cells.next()?;
            let path = cells.next()?.strip_prefix('`')?.strip_suffix('`')?;
            let is_method = ["GET", "POST", "PUT", "PATCH", "DELETE"].contains(&method);
            (is_method && path.starts_with("/lab/")).then(|| (method.to_string(), path.to_string()))
        })
        .collect();
    assert!(
        routes.len() >= 10,
        "the README's table was not found: {routes:?}"
    );
    routes
}

/// The document, answered as plain JSON (no envelope).
async fn document(lab: &TestLab) -> Value {
    let reply = lab.get(DOCUMENT).await;
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert!(reply.body.get("success").is_none(), "not in the envelope");
    reply.body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_is_openapi_3_1_and_lists_every_route_of_the_readme() {
    let lab = Setup::with(&[]).start().await;
    let document = document(&lab).await;
    let version = document["openapi"].as_str().unwrap_or_default();
    assert!(version.starts_with("3.1."), "openapi is {version:?}");
    let parsed: utoipa::openapi::OpenApi =
        serde_json::from_value(document.clone()).expect("an OpenAPI document");
    assert!(!parsed.paths.paths.is_empty());

    let mut documented = BTreeSet::new();
    for (path, item) in document["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().unwrap() {
            documented.insert((method.to_uppercase(), path.clone()));
            // Each `{name}` of the path is a documented path parameter.
            let parameters: BTreeSet<&str> = operation["parameters"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| p["in"] == "path" && p["required"] == true)
                .filter_map(|p| p["name"].as_str())
                .collect();
            let named: BTreeSet<&str> = path
                .split('{')
                .skip(1)
                .filter_map(|rest| rest.split_once('}').map(|(name, _)| name))
                .collect();
            assert_eq!(parameters, named, "{method} {path}");
            assert!(
                operation["responses"]
                    .as_object()
                    .is_some_and(|r| !r.is_empty()),
                "{method} {path} documents no response"
            );
        }
    }
    assert_eq!(
        documented,
        readme_routes(),
        "the document against the README"
    );
    lab.finish().await;
}

/// What the document allows, the server accepts, and the reverse, where
/// Schemathesis found them apart: ids of 0 and below, report names that
/// are not one plain name, integers written as `4349.0`, methods not loaded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_says_exactly_what_the_server_accepts() {
    let lab = Setup::with(&["redis_lua", "pessimistic"]).start().await;
    let document = document(&lab).await;
    let method = &document["components"]["schemas"]["IssueBody"]["properties"]["method"];
    assert_eq!(
        method["enum"],
        json!(["PESSIMISTIC", "REDIS_LUA"]),
        "{method}"
    );
    let coupon_id = &document["paths"]["/lab/coupons/{couponId}/result"]["get"]["parameters"][0];
    assert_eq!(coupon_id["schema"]["minimum"], json!(1), "{coupon_id}");
    let run = &document["paths"]["/lab/reports/{run}/{file}"]["get"]["parameters"][0];
    let name = &run["schema"];
    assert!(
        name["pattern"].is_string(),
        "a pattern for report names: {run}"
    );
    for plain in ["report.md", "2026-01-01T00-00-00Z-compare", "k6 run.json"] {
        assert!(jsonschema::is_valid(name, &json!(plain)), "{plain}");
    }
    for not_plain in ["..", ".hidden", "a/b", "a\\b", "a\0b"] {
        assert!(
            !jsonschema::is_valid(name, &json!(not_plain)),
            "{not_plain:?}"
        );
    }

    // An integer is an integer however JSON spells it; a fraction is not.
    let members = lab.post("/lab/members", json!({ "count": 3.0 })).await;
    assert_eq!(members.status, 201, "{}", members.body);
    let coupon = lab
        .post(
            "/lab/coupons",
            json!({ "name": "exact", "totalCount": 2e0 }),
        )
        .await;
    assert_eq!(coupon.status, 201, "{}", coupon.body);
    let id = coupon.body["response"]["id"].as_u64().unwrap();
    let first = members.body["response"]["firstId"].as_f64().unwrap();
    let issued = lab
        .post(
            &format!("/lab/coupons/{id}/issue"),
            json!({ "memberId": first, "method": " redis_lua ", "quantity": 1.0 }),
        )
        .await;
    assert_eq!(issued.status, 200, "{}", issued.body);
    let fraction = lab.post("/lab/members", json!({ "count": 1.5 })).await;
    assert_eq!(fraction.status, 400, "{}", fraction.body);
    let unloaded = lab
        .post(
            &format!("/lab/coupons/{id}/issue"),
            json!({ "memberId": first, "method": "REDIS_WATCH" }),
        )
        .await;
    assert_eq!(unloaded.status, 400, "{}", unloaded.body);
    lab.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schemas_accept_what_every_route_answers() {
    let lab = Setup::with(&[
        "redis_lua",
        "redis_lua_sharded",
        "redis_write_behind",
        "redis_lua_gate",
        "test_spin",
        "test_hog",
    ])
    .tune(|c| {
        c.request_timeout_ms = 1_000;
        c.strategy_memory_mib = 32;
    })
    .own_redis_db()
    .start()
    .await;
    let document = document(&lab).await;
    let check = |method: Method, path: &'static str, reply: &Reply| {
        conforms(&document, method.as_str(), path, reply);
    };

    // Members and coupons.
    let reply = lab.post("/lab/members", json!({ "count": 4 })).await;
    check(Method::POST, "/lab/members", &reply);
    let first = reply.ok()["firstId"].as_u64().unwrap();
    let members: Vec<u64> = (first..first + 4).collect();
    let reply = lab.post("/lab/members", json!({ "count": 0 })).await;
    reply.fails_with(400);
    check(Method::POST, "/lab/members", &reply);

    let reply = lab
        .post(
            "/lab/coupons",
            json!({ "name": "openapi", "totalCount": 10 }),
        )
        .await;
    check(Method::POST, "/lab/coupons", &reply);
    let coupon = reply.ok()["id"].as_u64().unwrap();
    let reply = lab
        .post("/lab/coupons", json!({ "name": " ", "totalCount": 2 }))
        .await;
    reply.fails_with(400);
    check(Method::POST, "/lab/coupons", &reply);

    // Issue: 200, 202, and each kind of refusal.
    const ISSUE: &str = "/lab/coupons/{couponId}/issue";
    let issue = |member: u64, method: &str| {
        let (lab, member, method) = (&lab, member, method.to_string());
        async move {
            lab.post(
                &format!("/lab/coupons/{coupon}/issue"),
                json!({ "memberId": member, "method": method, "idempotencyKey": "k" }),
            )
            .await
        }
    };
    for (member, method, status) in [
        (members[0], "REDIS_LUA", 200),
        (members[3], "REDIS_LUA_SHARDED", 200),
        (members[1], "REDIS_WRITE_BEHIND", 202),
        (members[0], "REDIS_LUA", 409),
        (999_999_999, "REDIS_LUA", 404),
        (members[2], "NO_SUCH_METHOD", 400),
        (members[2], "TEST_HOG", 500),
        (members[2], "TEST_SPIN", 504),
    ] {
        let reply = issue(member, method).await;
        assert_eq!(reply.status, status, "{method}: {}", reply.body);
        check(Method::POST, ISSUE, &reply);
    }

    // The result, once the 202 is confirmed: Redis, shards, confirmations,
    // stream.
    const RESULT: &str = "/lab/coupons/{couponId}/result";
    lab.drained(coupon, 1).await;
    let reply = lab.get(&format!("/lab/coupons/{coupon}/result")).await;
    let result = reply.ok();
    for section in ["redis", "shards", "accepted", "stream"] {
        assert!(result.get(section).is_some(), "no {section}: {result}");
    }
    check(Method::GET, RESULT, &reply);
    let reply = lab
        .get(&format!("/lab/coupons/{}/result", coupon + 999_999))
        .await;
    reply.fails_with(404);
    check(Method::GET, RESULT, &reply);
    let reply = lab.get("/lab/coupons/0/result").await;
    reply.fails_with(400);
    check(Method::GET, RESULT, &reply);

    // Reconcile.
    const RECONCILE: &str = "/lab/write-behind/coupons/{couponId}/reconcile";
    let reply = lab
        .post(
            &format!("/lab/write-behind/coupons/{coupon}/reconcile"),
            json!({}),
        )
        .await;
    reply.ok();
    check(Method::POST, RECONCILE, &reply);
    let reply = lab
        .post(
            &format!("/lab/write-behind/coupons/{}/reconcile", coupon + 999_999),
            json!({}),
        )
        .await;
    reply.fails_with(404);
    check(Method::POST, RECONCILE, &reply);

    // The drop's seed and cancel.
    const SEED: &str = "/lab/drop/coupons/{couponId}/seed";
    const CANCEL: &str = "/lab/drop/coupons/{couponId}/cancel";
    let drop = lab.coupon(5).await;
    let reply = lab.seed_drop(drop, 5).await;
    reply.ok();
    check(Method::POST, SEED, &reply);
    let reply = lab.seed_drop(drop, 0).await;
    reply.fails_with(400);
    check(Method::POST, SEED, &reply);
    let reply = lab.cancel_drop(drop, members[3], "k").await;
    reply.ok();
    check(Method::POST, CANCEL, &reply);
    let reply = lab.cancel_drop(drop + 999_999, members[3], "k").await;
    reply.fails_with(404);
    check(Method::POST, CANCEL, &reply);

    // Strategies, with a rejected file among them. The route answers no
    // error of its own (only a 500 if its handler panicked).
    std::fs::write(lab.strategy_dir.join("broken.wasm"), b"not a component").unwrap();
    until(
        "the broken file is rejected",
        Duration::from_secs(10),
        || async {
            let reply = lab.get("/lab/strategies").await;
            reply.ok()["rejected"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        },
    )
    .await;
    let reply = lab.get("/lab/strategies").await;
    check(Method::GET, "/lab/strategies", &reply);

    // DELETE /lab/data, on this test's own Redis database.
    let reply = lab.request(Method::DELETE, "/lab/data", None).await;
    reply.ok();
    check(Method::DELETE, "/lab/data", &reply);
    lab.finish().await;
}

/// With Redis down: the 503s, and a result whose Redis section says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schemas_accept_what_the_routes_answer_with_redis_down() {
    let lab = Setup::with(&["redis_lua"])
        .redis_url("redis://127.0.0.1:1/0")
        .start()
        .await;
    let document = document(&lab).await;
    let (members, coupon) = lab.members_and_coupon(1, 5).await;

    let reply = lab.issue(coupon, members[0], "REDIS_LUA").await;
    reply.fails_with(503);
    conforms(&document, "POST", "/lab/coupons/{couponId}/issue", &reply);
    let reply = lab.get(&format!("/lab/coupons/{coupon}/result")).await;
    assert_eq!(
        reply.ok()["redis"]["readable"],
        json!(false),
        "{}",
        reply.body
    );
    conforms(&document, "GET", "/lab/coupons/{couponId}/result", &reply);
    let reply = lab.request(Method::DELETE, "/lab/data", None).await;
    reply.fails_with(503);
    conforms(&document, "DELETE", "/lab/data", &reply);
    lab.finish().await;
}

/// Asserts that `reply` is a status `method path` documents, and that its
/// body validates against the schema documented for it.
fn conforms(document: &Value, method: &str, path: &str, reply: &Reply) {
    let status = reply.status.as_u16().to_string();
    let operation = &document["paths"][path][method.to_lowercase()];
    assert!(operation.is_object(), "{method} {path} is not documented");
    let schema =
        operation["responses"].get(&status).unwrap_or_else(|| {
            panic!("{method} {path} does not document {status}: {}", reply.body)
        })["content"]["application/json"]["schema"]
            .clone();
    assert!(
        schema.is_object(),
        "{method} {path} {status} has no JSON schema"
    );
    let validator = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(&strict(schema, document))
        .unwrap_or_else(|err| panic!("the schema of {method} {path} {status}: {err}"));
    let errors = validator.iter_errors(&reply.body).into_errors();
    assert!(
        errors.is_empty(),
        "{method} {path} {status}: the body does not match the document:\n{errors}\nbody: {:#}",
        reply.body
    );
}

/// `schema` as a document of its own, whose `$ref`s
/// (`#/components/schemas/...`) resolve into a copy of the document's
/// components.
fn strict(schema: Value, document: &Value) -> Value {
    let mut root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": document["components"],
    });
    root.as_object_mut()
        .unwrap()
        .extend(schema.as_object().unwrap().clone());
    root
}
