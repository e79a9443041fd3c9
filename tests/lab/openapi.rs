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
pub(crate) async fn document(lab: &TestLab) -> Value {
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

    // A coupon's name: whitespace alone is no name (Schemathesis sent
    // "\n"), and the length is the name's as sent.
    let name = strict(
        document["components"]["schemas"]["CreateCoupon"]["properties"]["name"].clone(),
        &document,
    );
    let padded = format!(" {} ", "n".repeat(99));
    for (sent, accepted) in [
        ("\n", false),
        ("\u{85}\u{3000}", false),
        (" \u{feff} ", true),
        (" x ", true),
        ("a\u{0}b", false),
        (&padded[1..], true),
        (&padded, false),
    ] {
        let schema_takes = jsonschema::is_valid(&name, &json!(sent));
        assert_eq!(schema_takes, accepted, "the schema and {sent:?}");
        let reply = lab
            .post("/lab/coupons", json!({ "name": sent, "totalCount": 1 }))
            .await;
        assert_eq!(
            reply.status.is_success(),
            accepted,
            "{sent:?}: {}",
            reply.body
        );
    }
    // The pattern's whitespace is the server's, character by character,
    // and so is its NUL, which the database cannot store.
    let name = jsonschema::validator_for(&name).unwrap();
    for c in (0..=0x10_FFFF).filter_map(char::from_u32) {
        let schema_takes = name.is_valid(&json!(c.to_string()));
        assert_eq!(schema_takes, !c.is_whitespace() && c != '\0', "{c:?}");
    }
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
    let first = reply.expect_ok()["firstId"].as_u64().unwrap();
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
    let coupon = reply.expect_ok()["id"].as_u64().unwrap();
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
        (999_999_999, "REDIS_LUA", 422),
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
    let result = reply.expect_ok();
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
    reply.expect_ok();
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
    reply.expect_ok();
    check(Method::POST, SEED, &reply);
    let reply = lab.seed_drop(drop, 0).await;
    reply.fails_with(400);
    check(Method::POST, SEED, &reply);
    let reply = lab.cancel_drop(drop, members[3], "k").await;
    reply.expect_ok();
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
            reply.expect_ok()["rejected"]
                .as_array()
                .is_some_and(|r| !r.is_empty())
        },
    )
    .await;
    let reply = lab.get("/lab/strategies").await;
    check(Method::GET, "/lab/strategies", &reply);

    // DELETE /lab/data, on this test's own Redis database.
    let reply = lab.request(Method::DELETE, "/lab/data", None).await;
    reply.expect_ok();
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
        reply.expect_ok()["redis"]["readable"],
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

/// An idempotency key is as long as its characters, for the document's
/// `maxLength` (JSON Schema counts characters) and for the server alike: a
/// key of 128 three-byte characters (384 bytes) is taken by the issue and
/// the cancel, one of 129 is a 400 that says the limit and its unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotency_key_is_counted_in_characters_by_the_document_and_the_server() {
    let lab = Setup::with(&["redis_lua_gate"]).start().await;
    let document = document(&lab).await;
    let longest = "가".repeat(128);
    let over = "가".repeat(129);
    for body in ["IssueBody", "CancelBody"] {
        let key = &document["components"]["schemas"][body]["properties"]["idempotencyKey"];
        let key = strict(key.clone(), &document);
        assert!(jsonschema::is_valid(&key, &json!(longest)), "{body}: {key}");
        assert!(!jsonschema::is_valid(&key, &json!(over)), "{body}: {key}");
    }

    let (members, coupon) = lab.members_and_coupon(1, 5).await;
    lab.seed_drop(coupon, 5).await.expect_ok();
    let refused = "idempotencyKey must be 1 to 128 characters";
    let reply = lab
        .issue_keyed(coupon, members[0], "REDIS_LUA_GATE", &over)
        .await;
    assert_eq!(reply.fails_with(400), refused);
    let reply = lab
        .issue_keyed(coupon, members[0], "REDIS_LUA_GATE", &longest)
        .await;
    assert_eq!(
        reply.expect_ok()["outcome"],
        json!("ISSUED"),
        "{}",
        reply.body
    );
    let reply = lab.cancel_drop(coupon, members[0], &over).await;
    assert_eq!(reply.fails_with(400), refused);
    let reply = lab.cancel_drop(coupon, members[0], &longest).await;
    assert_eq!(
        reply.expect_ok()["cancelled"],
        json!(true),
        "{}",
        reply.body
    );
    lab.finish().await;
}

/// An unknown member (a 422 of `/issue`) and an unknown coupon (its 404)
/// each carry `error.outcome`, which the document requires under each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_tells_an_unknown_member_from_an_unknown_coupon() {
    let lab = Setup::with(&["redis_lua"]).start().await;
    let document = document(&lab).await;
    let (members, coupon) = lab.members_and_coupon(1, 5).await;
    const ISSUE: &str = "/lab/coupons/{couponId}/issue";
    for (coupon, member, status, outcome) in [
        (coupon, 999_999_999, 422, "UNKNOWN_MEMBER"),
        (coupon + 999_999, members[0], 404, "UNKNOWN_COUPON"),
    ] {
        let reply = lab.issue(coupon, member, "REDIS_LUA").await;
        reply.fails_as(status, outcome);
        assert_eq!(reply.body["error"]["outcome"], json!(outcome));
        conforms(&document, "POST", ISSUE, &reply);
        // Without the field the refusal no longer says what it is: the
        // document refuses it.
        let schema = &document["paths"][ISSUE]["post"]["responses"][status.to_string()]["content"]
            ["application/json"]["schema"];
        let mut untold = reply.body.clone();
        untold["error"].as_object_mut().unwrap().remove("outcome");
        let schema = strict(schema.clone(), &document);
        assert!(!jsonschema::is_valid(&schema, &untold), "{schema}");
    }
    // Errors that are no issue's refusal carry no outcome.
    let reply = lab
        .get(&format!("/lab/coupons/{}/result", coupon + 999_999))
        .await;
    reply.fails_with(404);
    assert!(
        reply.body["error"].get("outcome").is_none(),
        "{}",
        reply.body
    );
    lab.finish().await;
}

/// Each kind of report file is answered with a content type the document
/// lists for it, and a body its schema there takes: text for the text
/// kinds, and for `results.json`, served as JSON, no claim that it is text
/// (the document once said every file was a string).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_describes_each_kind_of_report_file_as_served() {
    let reports = std::env::temp_dir().join(format!("couponlab-openapi-{}", std::process::id()));
    let dir = reports.clone();
    let lab = Setup::with(&[])
        .tune(move |config| config.reports_dir = dir)
        .start()
        .await;
    let document = document(&lab).await;
    let run = "2026-01-01T00-00-00Z";
    std::fs::create_dir_all(reports.join(run)).unwrap();
    let results = json!({ "title": "a run", "methods": { "REDIS_LUA": { "issued": 100 } } });
    for (file, body) in [
        (
            "report.html",
            "<!doctype html><title>a run</title>".to_string(),
        ),
        ("report.md", "# a run\n".to_string()),
        (
            "chart.svg",
            "<svg xmlns=\"http://www.w3.org/2000/svg\"/>".to_string(),
        ),
        ("results.json", results.to_string()),
        ("k6.log", "done\n".to_string()),
    ] {
        std::fs::write(reports.join(run).join(file), body).unwrap();
    }
    let served =
        &document["paths"]["/lab/reports/{run}/{file}"]["get"]["responses"]["200"]["content"];
    for (file, media) in [
        ("report.html", "text/html"),
        ("report.md", "text/markdown"),
        ("chart.svg", "image/svg+xml"),
        ("results.json", "application/json"),
        ("k6.log", "text/plain"),
    ] {
        let url = format!("{}/lab/reports/{run}/{file}", lab.base);
        let response = lab.client.get(url).send().await.unwrap();
        assert_eq!(response.status(), 200, "{file}");
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_string();
        assert_eq!(content_type.split(';').next(), Some(media), "{file}");
        assert!(
            served[media].is_object(),
            "{file}: {media} is not documented: {served}"
        );
        let text = response.text().await.unwrap();
        let body = match media {
            "application/json" => serde_json::from_str(&text).unwrap(),
            _ => Value::String(text),
        };
        // No schema: any body.
        let schema = served[media].get("schema").cloned().unwrap_or(json!({}));
        let schema = strict(schema, &document);
        assert!(
            jsonschema::is_valid(&schema, &body),
            "{file}: {schema} against {body}"
        );
    }
    lab.finish().await;
    std::fs::remove_dir_all(&reports).ok();
}

/// Asserts that `reply` is a status `method path` documents, and that its
/// body validates against the schema documented for it.
pub(crate) fn conforms(document: &Value, method: &str, path: &str, reply: &Reply) {
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
