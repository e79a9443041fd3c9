//! The strategies in Python and JavaScript: the same methods as the Rust
//! ones, over the same WIT, keep the same promises under real concurrency;
//! a strategy that raises or throws fails its own request with its
//! language's message; a new build replaces the served one under load.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::canary::{deploy_new_version, keep_issuing};
use crate::common::{ServerProcess, Setup, outcome, with_call_deadline_ms};

/// Each method with its component.
const METHODS: [(&str, &str); 6] = [
    ("PY_REDIS_LUA", "py_redis_lua"),
    ("PY_PESSIMISTIC", "py_pessimistic"),
    ("PY_REDIS_STREAM_ATOMIC", "py_redis_stream_atomic"),
    ("JS_REDIS_LUA", "js_redis_lua"),
    ("JS_PESSIMISTIC", "js_pessimistic"),
    ("JS_REDIS_STREAM_ATOMIC", "js_redis_stream_atomic"),
];

/// 400 members at once on a total of 80: exactly 80 issued, one per
/// member, every 2xx a row; a method that reserves in Redis ends with its
/// set equal to the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_language_issues_exactly_the_total_to_400_members_at_once() {
    let components: Vec<&str> = METHODS.iter().map(|(_, c)| *c).collect();
    let lab = Setup::with(&components).own_redis_db().start().await;
    for (method, _) in METHODS {
        let members = lab.members(400).await;
        let coupon = lab.coupon(80).await;
        let replies = lab.issue_all(coupon, &members, method).await;
        let mut told = BTreeSet::new();
        for (member, reply) in members.iter().zip(&replies) {
            match reply.status.as_u16() {
                200 | 202 => {
                    told.insert(*member);
                }
                409 => {}
                other => panic!("{method}: {other} {}", reply.body),
            }
        }
        let accepted = replies.iter().filter(|r| r.status == 202).count() as u64;
        let result = if accepted > 0 {
            lab.drained(coupon, accepted).await
        } else {
            lab.result(coupon).await
        };
        let issued: BTreeSet<u64> = lab.issued_members(coupon).await.into_iter().collect();
        assert_eq!(issued.len(), 80, "{method}: {result}");
        assert_eq!(issued, told, "{method}: the rows are the 2xx");
        assert_eq!(result["duplicateMembers"], json!(0), "{method}: {result}");
        if !method.ends_with("PESSIMISTIC") {
            let reserved: BTreeSet<u64> = lab.reserved_members(coupon).await.into_iter().collect();
            assert_eq!(reserved, issued, "{method}: the reservation set");
        }
    }
    lab.finish().await;
}

/// An exception that escapes `issue` ends the call: 500 with the
/// language's own report of it (Python's type and text; JavaScript's text
/// and the stack line in `app.js`), and the next call of the same
/// component, in a fresh instance, fails the same way, not worse; the other
/// methods serve on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_raise_and_a_javascript_throw_fail_their_own_request_with_their_message() {
    let lab = Setup::with(&["test_py_raise", "test_js_throw", "py_redis_lua"])
        .start()
        .await;
    let (members, coupon) = lab.members_and_coupon(2, 10).await;
    for (method, said) in [
        ("TEST_PY_RAISE", "RuntimeError: no stock table for coupon"),
        ("TEST_JS_THROW", "no stock table for coupon"),
    ] {
        for _ in 0..2 {
            let reply = lab.issue(coupon, members[0], method).await;
            let message = reply.fails_with(500);
            assert!(message.contains(said), "{method}: {message}");
            if method == "TEST_JS_THROW" {
                assert!(message.contains("app.js:"), "the stack: {message}");
            }
        }
    }
    assert!(lab.issued_members(coupon).await.is_empty());
    let reply = lab.issue(coupon, members[1], "PY_REDIS_LUA").await;
    assert_eq!(reply.status.as_u16(), 200, "{}", reply.body);
    lab.finish().await;
}

/// A new build of the Python component written over the served one while
/// requests keep coming: the server compiles it (seconds, for an
/// interpreter) while the old one serves, swaps, and no request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_the_python_component_under_load_fails_no_request() {
    let lab = Arc::new(Setup::with(&["py_redis_lua"]).start().await);
    let (members, coupon) = lab.members_and_coupon(20_000, 100_000).await;
    let stop = Arc::new(AtomicBool::new(false));
    let load = keep_issuing(&lab, "PY_REDIS_LUA", coupon, members, &stop);

    deploy_new_version(&lab, "py_redis_lua", "PY_REDIS_LUA").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let told = load.await.unwrap();
    let failed: Vec<_> = told.iter().filter(|(status, ..)| *status != 200).collect();
    assert!(told.len() > 100, "the load ran: {} requests", told.len());
    assert!(
        failed.is_empty(),
        "{} of {} failed: {:?}",
        failed.len(),
        told.len(),
        &failed[..failed.len().min(5)]
    );
    Arc::try_unwrap(lab)
        .ok()
        .expect("the load is done")
        .finish()
        .await;
}

/// A call that reserved and then ran into its deadline is compensated by
/// its own language's sdk: the host calls `compensate` in a fresh
/// instance, and the reservation goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_ended_at_its_deadline_is_compensated_in_each_language() {
    let lab = with_call_deadline_ms(&["test_py_stall", "test_js_stall"], 1_000).await;
    for method in ["TEST_PY_STALL", "TEST_JS_STALL"] {
        let (members, coupon) = lab.members_and_coupon(1, 10).await;
        let reply = lab.issue(coupon, members[0], method).await;
        let message = reply.fails_with(504);
        assert!(
            message.contains("compensated: the reservation was removed"),
            "{method}: {message}"
        );
        assert!(lab.reserved_members(coupon).await.is_empty(), "{method}");
        let result = lab.result(coupon).await;
        assert_eq!(
            result["requests"]["byMethod"][method]["compensations"],
            json!(1),
            "{method}: {result}"
        );
    }
    lab.finish().await;
}

/// A pool slot is reset in place between calls: every page the last call
/// dirtied is found and rewritten from the component's initial memory. An
/// interpreter's heap dirties hundreds of separate runs of pages; a reset
/// that gave up after a few dozen runs (the released wasmtime 48 stops at
/// 32) hands the rest back to the kernel, and every call faults them in
/// again — 141 to 255 page faults a Python call where this asks under 20.
/// Counted on a server process of its own, at one request at a time, so
/// each call finds the slot its previous call left warm.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_call_does_not_fault_its_interpreter_heap_in_again() {
    const CALLS: u64 = 100;
    let lab = Setup::with(&["py_redis_lua"]).start().await;
    let ServerProcess {
        process: server,
        base,
    } = lab
        .serve_process(
            &[("COUPONLAB_WATCH", "false")],
            Stdio::null,
            Duration::from_secs(60),
        )
        .await;
    let pid = server.id().expect("the server runs");
    let members = lab.members(CALLS + 20).await;
    let coupon = lab.coupon(1).await;
    let path = format!("/lab/coupons/{coupon}/issue");
    let issue = |member: u64| {
        let body = json!({ "memberId": member, "method": "PY_REDIS_LUA" }).to_string();
        let (lab, base, path) = (&lab, &base, &path);
        async move { lab.request_at(base, Method::POST, path, Some(&body)).await }
    };

    // The first call issues the one coupon; the others warm the slot.
    let (warming, counted) = members.split_at(20);
    assert_eq!(outcome(&issue(warming[0]).await), "ISSUED");
    for &member in &warming[1..] {
        assert_eq!(outcome(&issue(member).await), "SOLD_OUT");
    }
    let before = minor_faults(pid);
    for &member in counted {
        assert_eq!(outcome(&issue(member).await), "SOLD_OUT");
    }
    let per_call = (minor_faults(pid) - before) as f64 / CALLS as f64;
    assert!(
        per_call < 20.0,
        "{per_call:.1} page faults a sold-out Python call"
    );
    drop(server);
    lab.finish().await;
}

/// Minor page faults of process `pid` so far (`/proc/PID/stat`, field 10).
fn minor_faults(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the process runs");
    // The fields after the command name, which is in parentheses and may
    // hold spaces: state is field 3, minflt field 10.
    let after_name = &stat[stat.rfind(')').expect("a stat line") + 2..];
    after_name
        .split(' ')
        .nth(7)
        .and_then(|field| field.parse().ok())
        .expect("minflt in /proc/PID/stat")
}
