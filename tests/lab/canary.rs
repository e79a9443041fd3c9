//! The canary: a new or changed component proves its claims on a scratch
//! coupon before it serves, against the real MariaDB and Redis; what fails
//! is refused naming the broken claim, what passes is remembered; and
//! nothing of it reaches what users read.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use couponlab::config::CanaryMode;
use serde_json::{Value, json};

use crate::common::{Setup, TestLab, component, pubsub_turn, until};

/// The components `cargo xtask strategies` installs, by file name.
fn installed() -> Vec<&'static str> {
    let dist = Path::new(env!("CARGO_MANIFEST_DIR")).join("../strategies/dist");
    let mut names: Vec<&'static str> = std::fs::read_dir(&dist)
        .expect("strategies/dist: run `cargo xtask strategies`")
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            if path.extension()? != "wasm" {
                return None;
            }
            Some(&*String::leak(path.file_stem()?.to_str()?.to_string()))
        })
        .collect();
    names.sort();
    names
}

fn with_canary(components: &[&'static str]) -> Setup {
    Setup::with(components).tune(|config| config.canary = CanaryMode::Changed)
}

pub(crate) fn served<'a>(strategies: &'a Value, method: &str) -> Option<&'a Value> {
    strategies["strategies"]
        .as_array()?
        .iter()
        .find(|s| s["method"] == method)
}

fn refusal<'a>(strategies: &'a Value, file: &str) -> &'a Value {
    strategies["rejected"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["file"].as_str().unwrap().ends_with(file))
        .unwrap_or_else(|| panic!("{file} is not refused: {strategies}"))
}

/// Writes `bytes` into the strategy directory as `name` at once (a rename),
/// as a deploy would.
fn drop_in(lab: &TestLab, name: &str, bytes: &[u8]) {
    let partial = lab.strategy_dir.join(format!("{name}.partial"));
    std::fs::write(&partial, bytes).unwrap();
    std::fs::rename(&partial, lab.strategy_dir.join(name)).unwrap();
}

/// `file`'s component with a custom section appended: the same behaviour,
/// another sha256 — a new version to the server.
fn new_version(file: &PathBuf) -> Vec<u8> {
    let mut bytes = std::fs::read(file).unwrap();
    let name = b"couponlab-test-version";
    // Never the same twice: no compile cache holds a build of it, so it is
    // compiled while the old version serves, as a real deploy is.
    let payload = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        .to_string();
    let payload = payload.as_bytes();
    bytes.push(0); // a custom section
    bytes.push((1 + name.len() + payload.len()) as u8);
    bytes.push(name.len() as u8);
    bytes.extend_from_slice(name);
    bytes.extend_from_slice(payload);
    bytes
}

/// Writes a new version of component `name` over the one that serves
/// `method`, as a deploy would, and waits until the new one serves.
pub(crate) async fn deploy_new_version(lab: &TestLab, name: &str, method: &str) {
    let listed = lab.get("/lab/strategies").await.expect_ok().clone();
    let old_sha = served(&listed, method).unwrap()["sha256"].clone();
    drop_in(lab, &format!("{name}.wasm"), &new_version(&component(name)));
    until_listed(lab, "the new version serves", |now| {
        served(now, method).is_some_and(|s| s["sha256"] != old_sha)
    })
    .await;
}

/// Waits until `GET /lab/strategies` answers what `holds` accepts.
pub(crate) async fn until_listed(lab: &TestLab, what: &str, holds: impl Fn(&Value) -> bool) {
    until(what, Duration::from_secs(60), || async {
        holds(lab.get("/lab/strategies").await.expect_ok())
    })
    .await;
}

fn on_trial(strategies: &Value) -> bool {
    strategies["onTrial"]
        .as_array()
        .is_some_and(|t| !t.is_empty())
}

/// What the lab's database and Redis still hold of canaries.
async fn leftovers(lab: &TestLab) -> (i64, i64, Vec<String>) {
    let coupons = lab
        .number("SELECT COUNT(*) FROM coupons WHERE scratch")
        .await;
    let members = lab
        .number("SELECT COUNT(*) FROM members WHERE name LIKE 'couponlab canary%'")
        .await;
    let keys: Vec<String> = lab.redis_query(redis::cmd("KEYS").arg("coupon:*")).await;
    (coupons, members, keys)
}

/// Every installed method passes its canary, in what time per world; a
/// restart serves them at once from what the database remembers; and the
/// README's `claims` column says what the components claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_installed_method_passes_its_canary_once() {
    // REDIS_PUBSUB's channel is one for the whole Redis server.
    let _turn = pubsub_turn().await;
    let components = installed();
    let mut lab = with_canary(&components).own_redis_db().start().await;
    let strategies = lab.proved().await;
    assert_eq!(strategies["rejected"], json!([]), "{strategies}");
    let loaded = strategies["strategies"].as_array().unwrap();
    assert_eq!(loaded.len(), components.len());
    for s in loaded {
        let canary = &s["canary"];
        assert_eq!(canary["passed"], true, "{s}");
        assert_eq!(canary["remembered"], false, "{s}");
        println!(
            "canary {:<26} {:<20} {:>5} ms, p50 {:.2} ms, {} requests",
            s["method"].as_str().unwrap(),
            s["world"].as_str().unwrap(),
            canary["tookMs"],
            canary["p50Ms"].as_f64().unwrap(),
            canary["figures"]["requests"]
        );
    }
    assert_eq!(
        leftovers(&lab).await,
        (0, 0, vec![]),
        "a canary left something behind"
    );
    readme_states_the_claims_of(loaded);

    lab.restart().await;
    let at_once = lab.get("/lab/strategies").await.expect_ok().clone();
    assert_eq!(at_once["awaiting"], json!([]), "{at_once}");
    for s in at_once["strategies"].as_array().unwrap() {
        assert_eq!(s["canary"]["remembered"], true, "{s}");
    }
    lab.finish().await;
}

/// A pass holds for the engine settings it ran under: the same file on a
/// lab whose components' sessions turn snapshot isolation on proves itself
/// again, and is remembered for those settings from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_is_remembered_per_engine_settings() {
    use couponlab::runtime::sql::user::Switch;
    let remembered = |strategies: &Value| {
        let pessimistic = served(strategies, "PESSIMISTIC").expect("PESSIMISTIC serves");
        pessimistic["canary"]["remembered"].clone()
    };
    let mut lab = with_canary(&["pessimistic"])
        .tune(|config| config.capabilities.sql.snapshot_isolation = Some(Switch::Off))
        .start()
        .await;
    assert_eq!(remembered(&lab.proved().await), false);

    lab.config.capabilities.sql.snapshot_isolation = Some(Switch::On);
    lab.restart().await;
    let under_snapshot_isolation = lab.proved().await;
    assert_eq!(
        under_snapshot_isolation["engine"]["settings"]["innodb_snapshot_isolation"],
        "ON"
    );
    assert_eq!(remembered(&under_snapshot_isolation), false, "proved again");

    lab.restart().await;
    let at_once = lab.get("/lab/strategies").await.expect_ok().clone();
    assert_eq!(at_once["awaiting"], json!([]), "{at_once}");
    assert_eq!(remembered(&at_once), true);
    lab.finish().await;
}

/// The README's methods table has a `claims` column: it says what each
/// component's descriptor claims.
fn readme_states_the_claims_of(loaded: &[Value]) {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let mut table = readme
        .lines()
        .skip_while(|line| !line.starts_with("| method | what it does |"))
        .take_while(|line| line.starts_with('|'));
    let header: Vec<&str> = table
        .next()
        .expect("the methods table")
        .split('|')
        .map(str::trim)
        .collect();
    let at = header
        .iter()
        .position(|c| *c == "claims")
        .expect("a claims column");
    let mut stated = std::collections::BTreeMap::new();
    for line in table.skip(1) {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        stated.insert(
            cells[1].trim_matches('`').to_string(),
            cells[at].to_string(),
        );
    }
    for s in loaded {
        let method = s["method"].as_str().unwrap();
        let claims: Vec<&str> = s["claims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        assert_eq!(
            stated.get(method).map(String::as_str),
            Some(claims.join(" ").as_str()),
            "README's claims for {method}"
        );
    }
    assert_eq!(
        stated.len(),
        loaded.len(),
        "the README lists methods no component serves"
    );
}

/// Each fixture breaks one thing; the canary refuses each, naming it, with
/// one request that shows it; a good component beside them serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_component_that_breaks_what_it_claims_is_refused_with_the_check_it_failed() {
    let fixtures = [
        ("test_unguarded.wasm", "claims `total`"),
        ("test_phantom.wasm", "claims `acked`"),
        (
            "test_misnamer.wasm",
            "an unknown member is told UNKNOWN_MEMBER",
        ),
        ("test_lua_trap.wasm", "no call trapped"),
    ];
    let lab = with_canary(&[
        "pessimistic",
        "test_unguarded",
        "test_phantom",
        "test_misnamer",
        "test_lua_trap",
    ])
    .own_redis_db()
    .start()
    .await;
    let strategies = lab.proved().await;
    for (file, check) in fixtures {
        let refused = refusal(&strategies, file);
        let reason = refused["reason"].as_str().unwrap();
        assert!(reason.contains(check), "{file}: {reason}");
        let failure = &refused["canary"]["failure"];
        assert!(failure["figure"].as_u64().unwrap() > 0, "{refused}");
        assert!(
            failure["example"]
                .as_str()
                .is_some_and(|e| e.starts_with("member ")),
            "{refused}"
        );
        println!("{file}: {reason}");
    }
    assert_eq!(
        strategies["strategies"].as_array().unwrap().len(),
        1,
        "{strategies}"
    );
    assert_eq!(
        served(&strategies, "PESSIMISTIC").unwrap()["canary"]["passed"],
        true
    );
    assert_eq!(
        leftovers(&lab).await,
        (0, 0, vec![]),
        "a canary left something behind"
    );
    lab.finish().await;
}

/// Requests a stream of members on one coupon through `method` until
/// stopped; answers every status it got, with when it got it.
pub(crate) fn keep_issuing(
    lab: &Arc<TestLab>,
    method: &'static str,
    coupon: u64,
    members: Vec<u64>,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(u16, String, Instant)>> {
    let (lab, stop) = (lab.clone(), stop.clone());
    tokio::spawn(async move {
        let mut told = Vec::new();
        for chunk in members.chunks(4) {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            let replies = lab.issue_all(coupon, chunk, method).await;
            told.extend(
                replies
                    .into_iter()
                    .map(|r| (r.status.as_u16(), r.body.to_string(), Instant::now())),
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        told
    })
}

/// Under load, a good new version of REDIS_LUA replaces the old one and a
/// broken one is refused while the good one serves on: no request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_a_good_version_replaces_the_old_and_a_broken_one_leaves_it_serving() {
    let lab = Arc::new(with_canary(&["redis_lua"]).own_redis_db().start().await);
    lab.proved().await;
    let (members, coupon) = lab.members_and_coupon(4_000, 100_000).await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = keep_issuing(&lab, "REDIS_LUA", coupon, members, &stop);

    let dropped = Instant::now();
    deploy_new_version(&lab, "redis_lua", "REDIS_LUA").await;
    let good_sha = served(
        &lab.get("/lab/strategies").await.expect_ok().clone(),
        "REDIS_LUA",
    )
    .unwrap()["sha256"]
        .clone();

    drop_in(
        &lab,
        "redis_lua.wasm",
        &std::fs::read(component("test_lua_trap")).unwrap(),
    );
    until_listed(&lab, "the broken version is refused", |now| {
        now["rejected"].as_array().is_some_and(|r| !r.is_empty())
    })
    .await;
    let refused = Instant::now();
    let after = lab.get("/lab/strategies").await.expect_ok().clone();
    let serving = served(&after, "REDIS_LUA").unwrap();
    assert_eq!(
        serving["sha256"], good_sha,
        "the good version serves on: {after}"
    );
    assert!(
        serving["lastError"].as_str().unwrap().contains("trapped"),
        "{after}"
    );

    stop.store(true, Ordering::Relaxed);
    let told = load.await.unwrap();
    let failed: Vec<_> = told.iter().filter(|(status, ..)| *status != 200).collect();
    // Answered between the first drop and the second's refusal: the load
    // ran through both (how long they take depends on the canaries and on
    // whether the compile cache already holds the builds).
    let under_drops = told
        .iter()
        .filter(|(.., at)| (dropped..refused).contains(at))
        .count();
    println!(
        "{} requests, {under_drops} answered under the two drops, {} failed",
        told.len(),
        failed.len()
    );
    assert!(
        under_drops >= 20,
        "the load ran under the drops: {under_drops} requests"
    );
    assert!(
        failed.is_empty(),
        "failed requests: {:?}",
        &failed[..failed.len().min(5)]
    );
    Arc::into_inner(lab).unwrap().finish().await;
}

/// A burst on a real coupon while a canary runs reports exactly its own
/// requests, and the coupon list and `/metrics` show nothing of the
/// canary; `DELETE /lab/data` in the middle of a canary leaves nothing
/// behind, and the canary, tried again, still decides.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_trace_of_a_canary_reaches_what_users_read() {
    let lab = with_canary(&["pessimistic"]).own_redis_db().start().await;
    lab.proved().await;
    let (members, coupon) = lab.members_and_coupon(50, 20).await;

    drop_in(
        &lab,
        "redis_stream_atomic.wasm",
        &std::fs::read(component("redis_stream_atomic")).unwrap(),
    );
    until_listed(&lab, "a canary is running", on_trial).await;
    let replies = lab.issue_all(coupon, &members, "PESSIMISTIC").await;
    assert_eq!(replies.len(), 50);
    let result = lab.result(coupon).await;
    assert_eq!(result["requests"]["total"], 50, "{result}");
    let listed = lab.get("/lab/coupons").await.expect_ok().clone();
    assert_eq!(listed["count"], 1, "{listed}");
    let metrics = lab.get_text("/metrics").await;
    let issue_requests: f64 = metrics
        .lines()
        .filter(|line| line.starts_with("couponlab_issue_requests_total{"))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(issue_requests, 50.0, "{metrics}");
    let strategies = lab.proved().await;
    assert_eq!(
        served(&strategies, "REDIS_STREAM_ATOMIC").unwrap()["canary"]["passed"],
        true
    );

    drop_in(
        &lab,
        "redis_lua.wasm",
        &std::fs::read(component("redis_lua")).unwrap(),
    );
    until_listed(&lab, "a second canary is running", on_trial).await;
    lab.request(reqwest::Method::DELETE, "/lab/data", None)
        .await
        .expect_ok();
    let strategies = lab.proved().await;
    assert_eq!(
        served(&strategies, "REDIS_LUA").unwrap()["canary"]["passed"],
        true,
        "{strategies}"
    );
    assert_eq!(
        leftovers(&lab).await,
        (0, 0, vec![]),
        "a canary left something behind"
    );
    lab.finish().await;
}

/// `couponlab check FILE.wasm` runs the same canary and says so in its exit
/// code: 0 for a good component, 1 for a broken one, with the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn couponlab_check_prints_the_report_and_exits_by_the_verdict() {
    let lab = Setup::with(&["pessimistic"]).own_redis_db().start().await;
    for (name, passes, says) in [
        ("redis_lua", true, "\"verdict\": \"passed\""),
        ("test_phantom", false, "claims `acked`"),
    ] {
        let file = component(name);
        let check = lab.process(
            &["check", file.to_str().unwrap()],
            &[],
            std::process::Stdio::piped(),
        );
        let output = tokio::time::timeout(Duration::from_secs(120), check.wait_with_output())
            .await
            .expect("couponlab check ends")
            .unwrap();
        let printed = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.success(), passes, "{name}: {printed}");
        assert!(printed.contains(says), "{name}: {printed}");
        assert!(printed.contains("\"tookMs\""), "{name}: {printed}");
    }
    assert_eq!(
        leftovers(&lab).await,
        (0, 0, vec![]),
        "a canary left something behind"
    );
    lab.finish().await;
}
