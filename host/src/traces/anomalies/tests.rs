use std::collections::BTreeMap;

use super::*;

/// A call `start_us` after its request's start, lasting `duration_us`.
fn call(op: &'static str, target: &str, start_us: u64, duration_us: u64) -> TracedCall {
    TracedCall {
        capability: if target.starts_with("coupon:") {
            "redis"
        } else {
            "sql"
        },
        op: op.into(),
        target: (!target.is_empty()).then(|| target.into()),
        transaction: (!target.starts_with("coupon:")).then_some(1),
        isolation: (!target.starts_with("coupon:")).then_some("READ COMMITTED"),
        rows: None,
        read: BTreeMap::new(),
        reply: "ok".into(),
        start_us,
        duration_us,
        phase: None,
    }
}

fn reading(mut call: TracedCall, name: &'static str, value: i64) -> TracedCall {
    call.read.insert(name.into(), value);
    call
}

fn rows(mut call: TracedCall, rows: u64) -> TracedCall {
    call.rows = Some(rows);
    call
}

fn request(
    id: u64,
    member: u64,
    started_us: u64,
    outcome: &str,
    calls: Vec<TracedCall>,
) -> RequestTrace {
    RequestTrace {
        id,
        coupon_id: 1,
        member_id: member,
        method: "READ_COMMITTED".into(),
        sequence: Some(id),
        arrived_us: started_us,
        started_us,
        duration_us: 100,
        outcome: outcome.into(),
        kept: if outcome == "ISSUED" {
            Kept::Served
        } else {
            Kept::Sample
        },
        calls,
        calls_dropped: 0,
    }
}

/// A READ COMMITTED issue: reads `issued_count = count` at +10 µs,
/// inserts, updates, commits at +`commit_at` µs.
fn issued(id: u64, started_us: u64, count: i64, commit_at: u64) -> RequestTrace {
    let select = reading(call("SELECT", "coupons", 10, 5), "issued_count", count);
    let calls = vec![
        call("BEGIN", "", 0, 5),
        reading(select, "total_count", 1),
        rows(call("INSERT", "coupon_issues", 20, 5), 1),
        rows(call("UPDATE", "coupons", 30, 5), 1),
        call("COMMIT", "", commit_at, 5),
    ];
    request(id, id, started_us, "ISSUED", calls)
}

fn facts<'a>(members: &'a BTreeSet<u64>) -> Facts<'a> {
    Facts {
        total: 1,
        issued_members: members,
        stranded_members: &[],
        reservation_key: "coupon:issued:{1}",
    }
}

#[test]
fn two_overlapping_commits_of_the_same_count_are_a_lost_update() {
    let members = BTreeSet::from([1, 2]);
    // Both read 0 of 1 before either committed.
    let (a, b) = (issued(1, 1000, 0, 40), issued(2, 1005, 0, 60));
    let found = find(&[&a, &b], &facts(&members));
    assert_eq!(found.len(), 1, "{found:?}");
    let anomaly = &found[0];
    assert_eq!(
        (anomaly.kind, anomaly.taxonomy),
        ("lost-update", Some("G-single"))
    );
    let roles: Vec<(u64, &str)> = anomaly
        .witnesses
        .iter()
        .map(|w| (w.trace_id, w.role))
        .collect();
    assert_eq!(roles, [(2, "stale-read"), (1, "committed-between")]);
    assert_eq!(anomaly.witnesses[0].read["issued_count"], 0);
    assert!(anomaly.witnesses[1].wrote_at_us > anomaly.witnesses[0].read_at_us);
}

#[test]
fn commits_one_after_the_other_are_no_anomaly() {
    let members = BTreeSet::from([1]);
    // The second read 1 of 1: it was refused, and wrote nothing.
    let a = issued(1, 1000, 0, 40);
    let select = reading(call("SELECT", "coupons", 10, 5), "issued_count", 1);
    let b = request(
        2,
        2,
        2000,
        "SOLD_OUT",
        vec![select, call("ROLLBACK", "", 20, 5)],
    );
    assert!(find(&[&a, &b], &facts(&members)).is_empty());
}

#[test]
fn scard_and_sadd_interleaved_over_reserve() {
    let key = "coupon:issued:{1}";
    let reserve = |id, started_us, sadd_at| {
        let calls = vec![
            reading(call("SCARD", key, 0, 5), "reply", 0),
            reading(call("SADD", key, sadd_at, 5), "reply", 1),
        ];
        request(id, id, started_us, "ISSUED", calls)
    };
    let (a, b) = (reserve(1, 1000, 20), reserve(2, 1002, 30));
    let members = BTreeSet::from([1]);
    let found = find(&[&a, &b], &facts(&members));
    let kinds: Vec<&str> = found.iter().map(|a| a.kind).collect();
    assert!(kinds.contains(&"check-then-act"), "{found:?}");
    // One served without a row: answered ISSUED, missing.
    assert!(kinds.contains(&"acked-lost"));
}

#[test]
fn a_member_served_after_an_earlier_refusal_is_out_of_turn() {
    let members = BTreeSet::from([2]);
    let mut refused = request(1, 1, 1000, "SOLD_OUT", Vec::new());
    refused.kept = Kept::FirstRefusal;
    let served = issued(2, 1500, 0, 40);
    let found = find(&[&refused, &served], &facts(&members));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].kind, "out-of-turn");
    let roles: Vec<&str> = found[0].witnesses.iter().map(|w| w.role).collect();
    assert_eq!(roles, ["refused-earlier", "served-later"]);
}

#[test]
fn a_stranded_member_is_explained_by_its_last_call() {
    let members = BTreeSet::new();
    let mut failed = request(
        1,
        9,
        1000,
        "DEADLINE_EXCEEDED",
        vec![call("EVALSHA", "coupon:issued:{1}", 0, 5)],
    );
    failed.kept = Kept::Failed;
    let stranded = [9, 10];
    let facts = Facts {
        stranded_members: &stranded,
        ..facts(&members)
    };
    let found = find(&[&failed], &facts);
    assert_eq!(found.len(), 2);
    assert_eq!(found[0].witnesses[0].trace_id, 1);
    assert!(found[0].explanation.contains("EVALSHA"));
    assert!(found[1].witnesses.is_empty());
}
