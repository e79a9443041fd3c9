//! What a canary's requests and the database say about a component: its
//! figures, and the first check it failed with one request that shows it.
//! A pure function of the answers and the rows, so each check is tested
//! on its own.

use std::collections::{BTreeMap, BTreeSet};

pub use super::requests::{Asked, Part, Truth};
use crate::outcome::Outcome;
use crate::runtime::bindings::types::Claim;
use crate::runtime::canary_report::{Failure, Figures};

/// How a canary ended.
#[derive(Debug)]
pub enum Verdict {
    /// Every check held.
    Passed,
    /// A check failed: the component must not serve.
    Failed(Failure),
    /// A dependency failed under the canary (UNAVAILABLE, BUSY, an outcome
    /// left to settle): nothing can be said of the component yet.
    Inconclusive(String),
}

/// Judges the answers `asked` and the rows `truth` of a component that
/// claims `claims`.
pub fn judge(claims: &[Claim], asked: &[Asked], truth: &Truth) -> (Figures, Verdict) {
    let rows = |member: &u64| truth.rows.get(member).copied().unwrap_or(0);
    let told_success: BTreeSet<u64> = asked
        .iter()
        .filter(|a| a.part != Part::UnknownCoupon && a.told_success())
        .map(|a| a.member)
        .collect();
    let issued: u64 = truth.rows.values().sum();
    let failed_calls: Vec<&Asked> = asked
        .iter()
        .filter(|a| matches!(a.outcome, Outcome::Failed | Outcome::TimedOut))
        .collect();
    let undecided: Vec<&Asked> = asked
        .iter()
        .filter(|a| a.settle_later || matches!(a.outcome, Outcome::Unavailable | Outcome::Busy))
        .collect();
    let acked_but_lost: Vec<&Asked> = asked
        .iter()
        .filter(|a| a.part != Part::UnknownCoupon && a.part != Part::UnknownMember)
        .filter(|a| a.told_success() && rows(&a.member) == 0)
        .collect();
    // Per member: one of the requests of a member never told 2xx who holds a row.
    let mut refused_but_issued: BTreeMap<u64, &Asked> = BTreeMap::new();
    for a in asked.iter().filter(|a| a.part != Part::UnknownCoupon) {
        if !told_success.contains(&a.member) && rows(&a.member) > 0 {
            refused_but_issued.entry(a.member).or_insert(a);
        }
    }
    let refused_but_issued: Vec<&Asked> = refused_but_issued.into_values().collect();
    let unknown_member_confirmed = truth
        .confirmed
        .get(Outcome::UnknownMember.name())
        .copied()
        .unwrap_or(0);
    let misanswered = |part: Part, expected: Outcome| -> Vec<&Asked> {
        asked
            .iter()
            .filter(|a| a.part == part && a.outcome != expected)
            // A 202 for an unknown member is right when its confirmation
            // found the member unknown.
            .filter(|a| {
                !(part == Part::UnknownMember
                    && a.outcome == Outcome::Accepted
                    && unknown_member_confirmed > 0)
            })
            .collect()
    };
    let unknown_member = misanswered(Part::UnknownMember, Outcome::UnknownMember);
    let unknown_coupon = misanswered(Part::UnknownCoupon, Outcome::UnknownCoupon);
    let sold_out_told = asked
        .iter()
        .any(|a| matches!(a.outcome, Outcome::SoldOut | Outcome::SoldOutAtDb));
    let duplicates: u64 = truth.rows.values().map(|n| n.saturating_sub(1)).sum();
    let over_issued = issued.saturating_sub(truth.total);
    let last_success = asked
        .iter()
        .rev()
        .find(|a| a.told_success() && a.part != Part::UnknownMember);
    let twice = truth
        .rows
        .iter()
        .find(|(_, n)| **n > 1)
        .and_then(|(member, _)| {
            asked
                .iter()
                .find(|a| a.member == *member && a.told_success())
        });

    let accepted = asked.iter().filter(|a| a.outcome == Outcome::Accepted);
    let first_accepted = asked.iter().find(|a| a.outcome == Outcome::Accepted);
    let claimed = |claim: Claim| claims.contains(&claim);
    let count = |requests: &[&Asked]| requests.len() as u64;
    // Each check: whether it applies, its figure's name, what it says, the
    // figure (0: it held) and one request that shows it.
    let checks = [
        (
            true,
            "failedCalls",
            "no call trapped or passed its deadline",
            count(&failed_calls),
            failed_calls.first().copied(),
        ),
        // Before the claims: a 202 not yet confirmed has no row either, and
        // the missing confirmations are the cause to name.
        (
            true,
            "unconfirmed",
            "every 202 is confirmed by the method's own consumers",
            truth.pending,
            first_accepted,
        ),
        (
            claimed(Claim::Total),
            "overIssued",
            "claims `total`: never more issued than the total",
            over_issued,
            last_success,
        ),
        (
            claimed(Claim::Member),
            "duplicates",
            "claims `member`: at most one coupon per member",
            duplicates,
            twice,
        ),
        (
            claimed(Claim::Acked),
            "ackedButLost",
            "claims `acked`: every 2xx has its issue row",
            count(&acked_but_lost),
            acked_but_lost.first().copied(),
        ),
        (
            true,
            "refusedButIssued",
            "no refused request holds a coupon",
            count(&refused_but_issued),
            refused_but_issued.first().copied(),
        ),
        (
            true,
            "unknownMemberMisanswered",
            "an unknown member is told UNKNOWN_MEMBER and issued nothing",
            count(&unknown_member) + truth.unknown_member_rows,
            unknown_member.first().copied(),
        ),
        (
            true,
            "unknownCouponMisanswered",
            "an unknown coupon is told UNKNOWN_COUPON and issued nothing",
            count(&unknown_coupon) + truth.unknown_coupon_rows,
            unknown_coupon.first().copied(),
        ),
        (
            true,
            "neverSoldOut",
            "the coupon is told sold out once its stock is gone",
            u64::from(!sold_out_told),
            asked.last(),
        ),
    ];
    let figures: Figures = [
        ("requests", asked.len() as u64),
        ("issued", issued),
        ("accepted", accepted.count() as u64),
        ("undecided", count(&undecided)),
    ]
    .into_iter()
    .chain(
        checks
            .iter()
            .map(|(_, name, _, figure, _)| (*name, *figure)),
    )
    .map(|(name, figure)| (name.to_string(), figure))
    .collect();
    if let Some(first) = undecided.first() {
        let reason = format!(
            "{} answers left the outcome to a failing dependency, e.g. {}",
            undecided.len(),
            first.example()
        );
        return (figures, Verdict::Inconclusive(reason));
    }
    let failure = checks
        .into_iter()
        .find(|(applies, _, _, figure, _)| *applies && *figure > 0)
        .map(|(_, _, check, figure, example)| Failure {
            check: check.to_string(),
            figure,
            example: example.map(Asked::example),
        });
    let verdict = failure.map_or(Verdict::Passed, Verdict::Failed);
    (figures, verdict)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const ALL: &[Claim] = &[Claim::Total, Claim::Member, Claim::Acked];

    fn asked(part: Part, member: u64, outcome: Outcome) -> Asked {
        Asked {
            part,
            coupon: if part == Part::UnknownCoupon { 99 } else { 7 },
            member,
            outcome,
            detail: None,
            settle_later: false,
            took: Duration::from_millis(1),
            node: None,
        }
    }

    /// A well-behaved run on a total of 2: members 1 and 2 issued, 3 sold
    /// out, 1 asking again told DUPLICATE, the unknowns told so.
    fn good() -> (Vec<Asked>, Truth) {
        let asked = vec![
            asked(Part::UnknownMember, 100, Outcome::UnknownMember),
            asked(Part::UnknownCoupon, 1, Outcome::UnknownCoupon),
            asked(Part::Burst, 1, Outcome::Issued),
            asked(Part::Burst, 2, Outcome::Issued),
            asked(Part::Burst, 1, Outcome::Duplicate),
            asked(Part::Burst, 3, Outcome::SoldOut),
        ];
        let truth = Truth {
            total: 2,
            rows: BTreeMap::from([(1, 1), (2, 1)]),
            ..Truth::default()
        };
        (asked, truth)
    }

    fn failed_check(claims: &[Claim], asked: &[Asked], truth: &Truth) -> Failure {
        match judge(claims, asked, truth).1 {
            Verdict::Failed(failure) => failure,
            other => panic!("expected a failure, got {other:?}"),
        }
    }

    #[test]
    fn a_method_that_keeps_its_claims_passes() {
        let (asked, truth) = good();
        let (figures, verdict) = judge(ALL, &asked, &truth);
        assert!(matches!(verdict, Verdict::Passed), "{verdict:?}");
        assert_eq!(figures["issued"], 2);
        assert_eq!(figures["overIssued"], 0);
    }

    #[test]
    fn over_issue_fails_only_a_method_that_claims_the_total() {
        let (mut asked, mut truth) = good();
        asked.push(asked_again(3, Outcome::Issued));
        truth.rows.insert(3, 1);
        let failure = failed_check(ALL, &asked, &truth);
        assert!(failure.check.contains("`total`"), "{failure}");
        assert_eq!(failure.figure, 1);
        assert!(failure.example.unwrap().contains("member 3"));
        let read_committed = [Claim::Member, Claim::Acked];
        assert!(matches!(
            judge(&read_committed, &asked, &truth).1,
            Verdict::Passed
        ));
    }

    fn asked_again(member: u64, outcome: Outcome) -> Asked {
        asked(Part::UntilSoldOut, member, outcome)
    }

    #[test]
    fn a_2xx_without_a_row_breaks_acked() {
        let (asked, mut truth) = good();
        truth.rows.remove(&2);
        let failure = failed_check(ALL, &asked, &truth);
        assert!(failure.check.contains("`acked`"), "{failure}");
        assert!(failure.example.unwrap().starts_with("member 2"));
    }

    #[test]
    fn a_second_row_breaks_member_and_a_refusal_with_a_row_is_caught() {
        let (asked, mut truth) = good();
        truth.rows.insert(1, 2);
        truth.total = 3;
        assert!(failed_check(ALL, &asked, &truth).check.contains("`member`"));
        let (asked, mut truth) = good();
        truth.rows.insert(3, 1);
        truth.total = 3;
        let failure = failed_check(ALL, &asked, &truth);
        assert!(failure.check.contains("refused"), "{failure}");
    }

    #[test]
    fn a_trap_fails_before_any_claim() {
        let (mut asked, truth) = good();
        asked.push(asked_again(4, Outcome::Failed));
        let failure = failed_check(&[], &asked, &truth);
        assert!(failure.check.contains("trapped"), "{failure}");
    }

    #[test]
    fn the_unknowns_must_be_told_so() {
        // The check that fails when the `index`th request is told `outcome`.
        let failed_when_told = |index: usize, outcome| {
            let (mut asked, truth) = good();
            asked[index].outcome = outcome;
            failed_check(ALL, &asked, &truth).check
        };
        let member = failed_when_told(0, Outcome::SoldOut);
        assert!(member.contains("unknown member"), "{member}");
        let coupon = failed_when_told(1, Outcome::Duplicate);
        assert!(coupon.contains("unknown coupon"), "{coupon}");
        // A 202 for the unknown member is right once its confirmation said so.
        let (mut asked, mut truth) = good();
        asked[0].outcome = Outcome::Accepted;
        truth.confirmed.insert("UNKNOWN_MEMBER".into(), 1);
        assert!(matches!(judge(ALL, &asked, &truth).1, Verdict::Passed));
    }

    #[test]
    fn unconfirmed_202s_and_no_sold_out_fail() {
        let (asked, mut truth) = good();
        truth.pending = 2;
        assert!(failed_check(ALL, &asked, &truth).check.contains("202"));
        let (mut asked, truth) = good();
        asked.pop();
        assert!(failed_check(ALL, &asked, &truth).check.contains("sold out"));
    }

    #[test]
    fn a_failing_dependency_leaves_no_verdict() {
        let (mut asked, truth) = good();
        asked.push(asked_again(4, Outcome::Unavailable));
        assert!(matches!(
            judge(ALL, &asked, &truth).1,
            Verdict::Inconclusive(_)
        ));
    }
}
