//! The join after the drain: what every client was told (k6's records)
//! against what the database and Redis hold, read directly.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::records::Record;

/// What k6's script calls an answer that says the outcome is unknown.
const OUTCOME_UNKNOWN: &str = "OUTCOME_UNKNOWN";

/// What the database and Redis hold for one coupon once nothing moves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Truth {
    pub total: u64,
    /// Member → issue rows.
    pub rows: BTreeMap<u64, u64>,
    /// How many more coupons Redis would still sell, where the method keeps
    /// its stock in Redis (`None` for the database methods).
    pub sellable_in_redis: Option<u64>,
    /// The members Redis holds a reservation for (the coupon's set, its
    /// shards', or the drop gate's buyers' counts), read from the primary
    /// after the drain; `None` where the method keeps none there.
    pub reserved_in_redis: Option<BTreeSet<u64>>,
}

/// A guarantee a method claims: its component's descriptor says which
/// (`GET /lab/strategies`, `claims`), and the README's methods table shows
/// the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Claim {
    /// Never more issued than the total.
    Total,
    /// At most one coupon per member.
    OnePerMember,
    /// Every client told 2xx has its row once the method has drained, even
    /// across a crash of the server.
    Acked,
}

impl Claim {
    /// The claim's word, as the server and the README spell it.
    pub fn word(self) -> &'static str {
        match self {
            Claim::Total => "total",
            Claim::OnePerMember => "member",
            Claim::Acked => "acked",
        }
    }

    pub fn from_word(word: &str) -> Option<Claim> {
        [Claim::Total, Claim::OnePerMember, Claim::Acked]
            .into_iter()
            .find(|claim| claim.word() == word)
    }
}

/// The verification figures of one method's run, as results.json names them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    /// Told 2xx, no issue row after the drain.
    pub acked_but_lost: u64,
    /// Has a row, but was told a failure, timed out or got no answer.
    pub issued_but_refused: u64,
    /// Told the outcome is unknown (OUTCOME_UNKNOWN: the answer to its
    /// COMMIT or its script was lost, the server settles it later) and
    /// told nothing firmer since; not a refusal.
    pub outcome_unknown: u64,
    /// Of those, the members that hold a row after the drain.
    pub outcome_unknown_issued: u64,
    /// Stock no one can buy any more: the coupon answered SOLD_OUT, and once
    /// nothing moves Redis holds reservations no call will confirm — the
    /// total less the rows less what Redis would still sell.
    pub stranded_stock: u64,
    /// Units Redis would still sell that the rows already hold: the rows
    /// plus what Redis would sell, less the total — a failover lost
    /// reservations whose rows are written (stranded stock, its opposite,
    /// stops at 0).
    #[serde(default)]
    pub sellable_twice: u64,
    pub over_issued: u64,
    pub duplicates: u64,
    /// Members served after an earlier arrival was refused as sold out (the
    /// server's fairness figure).
    pub out_of_turn: u64,
    /// Told 2xx (issued or accepted), and Redis holds no reservation for
    /// them after the drain: a failover promoted a replica the reservation
    /// had not reached (0 where the method keeps no reservations in Redis).
    #[serde(default)]
    pub reservations_lost: u64,
    /// Told 2xx, and later passed Redis's check again (a second 2xx, or a
    /// refusal only the database's guard gives): Redis had forgotten them.
    #[serde(default)]
    pub re_reserved: u64,
    /// The guarantees that held in this run, in words.
    pub verdict: String,
}

impl Verification {
    /// Joins the records with the truth read after the drain.
    pub fn join(records: &[Record], truth: &Truth, out_of_turn: u64) -> Verification {
        let rows = |member: &u64| truth.rows.get(member).copied().unwrap_or(0);
        let told_success: BTreeSet<u64> = records
            .iter()
            .filter(|r| r.told_success())
            .map(|r| r.member)
            .collect();
        let acked_but_lost = told_success.iter().filter(|m| rows(m) == 0).count() as u64;
        let told_unknown: BTreeSet<u64> = records
            .iter()
            .filter(|r| r.outcome == OUTCOME_UNKNOWN)
            .map(|r| r.member)
            .filter(|m| !told_success.contains(m))
            .collect();
        let refused: BTreeSet<u64> = records
            .iter()
            .map(|r| r.member)
            .filter(|m| !told_success.contains(m) && !told_unknown.contains(m))
            .collect();
        let issued_but_refused = refused.iter().filter(|m| rows(m) > 0).count() as u64;
        let outcome_unknown_issued = told_unknown.iter().filter(|m| rows(m) > 0).count() as u64;
        let row_count: u64 = truth.rows.values().sum();
        let sold_out = records.iter().any(|r| r.outcome.starts_with("SOLD_OUT"));
        let stranded_stock = match truth.sellable_in_redis {
            Some(sellable) if sold_out => truth.total.saturating_sub(row_count + sellable),
            _ => 0,
        };
        let sellable_twice = truth.sellable_in_redis.map_or(0, |sellable| {
            (row_count + sellable).saturating_sub(truth.total)
        });
        let over_issued = row_count.saturating_sub(truth.total);
        let duplicates = truth.rows.values().map(|n| n.saturating_sub(1)).sum();
        let reservations_lost = truth.reserved_in_redis.as_ref().map_or(0, |reserved| {
            told_success.difference(reserved).count() as u64
        });
        let mut verification = Verification {
            acked_but_lost,
            issued_but_refused,
            outcome_unknown: told_unknown.len() as u64,
            outcome_unknown_issued,
            stranded_stock,
            sellable_twice,
            over_issued,
            duplicates,
            out_of_turn,
            reservations_lost,
            re_reserved: re_reserved(records),
            verdict: String::new(),
        };
        verification.verdict = verification.words();
        verification
    }

    /// The figure that breaks `claim` in this run (0: it held).
    pub fn breaking(&self, claim: Claim) -> u64 {
        match claim {
            Claim::Total => self.over_issued,
            Claim::OnePerMember => self.duplicates,
            Claim::Acked => self.acked_but_lost,
        }
    }

    /// The `claims` of the method this run broke.
    pub fn broken_claims(&self, claims: &[Claim]) -> Vec<Claim> {
        claims
            .iter()
            .copied()
            .filter(|claim| self.breaking(*claim) > 0)
            .collect()
    }

    fn words(&self) -> String {
        let guarantees = [
            ("never more than the total", self.over_issued, "over"),
            ("one per member", self.duplicates, "duplicates"),
            ("every 2xx issued", self.acked_but_lost, "told 2xx, no row"),
            (
                "no refusal issued",
                self.issued_but_refused,
                "refused or unanswered, with a row",
            ),
            ("no stock stranded", self.stranded_stock, "stranded"),
            (
                "no unit sellable twice",
                self.sellable_twice,
                "sold in the rows, for sale in Redis",
            ),
            ("first come, first served", self.out_of_turn, "out of turn"),
        ];
        let held: Vec<&str> = guarantees
            .iter()
            .filter(|(_, n, _)| *n == 0)
            .map(|(name, _, _)| *name)
            .collect();
        let broken: Vec<String> = guarantees
            .iter()
            .filter(|(_, n, _)| *n > 0)
            .map(|(name, n, what)| format!("{name} ({n} {what})"))
            .collect();
        match (held.is_empty(), broken.is_empty()) {
            (_, true) => format!("held: {}", held.join(", ")),
            (true, _) => format!("broken: {}", broken.join(", ")),
            _ => format!("held: {}; broken: {}", held.join(", "), broken.join(", ")),
        }
    }
}

/// Members told 2xx who passed Redis's check once more: answered 2xx again,
/// or refused by the database's guard (`SOLD_OUT_AT_DB`), which only a
/// request Redis reserved for reaches.
fn re_reserved(records: &[Record]) -> u64 {
    let mut passed: BTreeMap<u64, (u64, bool)> = BTreeMap::new();
    for record in records {
        let (successes, refused_past_redis) = passed.entry(record.member).or_default();
        if record.told_success() {
            *successes += 1;
        } else if record.outcome == "SOLD_OUT_AT_DB" {
            *refused_past_redis = true;
        }
    }
    passed
        .values()
        .filter(|(successes, refused_past_redis)| {
            *successes > 1 || (*successes == 1 && *refused_past_redis)
        })
        .count() as u64
}

#[cfg(test)]
mod tests {
    use std::ops::RangeInclusive;

    use super::*;

    const ALL: &[Claim] = &[Claim::Total, Claim::OnePerMember, Claim::Acked];

    fn told(member: u64, status: u16, outcome: &str) -> Record {
        Record {
            member,
            status,
            outcome: outcome.to_string(),
            latency_ms: 1.0,
            time: String::new(),
            message: String::new(),
        }
    }

    /// Each of `members` asked once and was told `status` and `outcome`.
    fn told_each(members: RangeInclusive<u64>, status: u16, outcome: &str) -> Vec<Record> {
        members
            .map(|member| told(member, status, outcome))
            .collect()
    }

    /// A method that keeps its stock in Redis, which would sell `sellable` more.
    fn truth(total: u64, rows: &[(u64, u64)], sellable: u64) -> Truth {
        Truth {
            total,
            rows: rows.iter().copied().collect(),
            sellable_in_redis: Some(sellable),
            reserved_in_redis: None,
        }
    }

    #[test]
    fn a_2xx_the_promoted_primary_has_no_reservation_for_is_a_reservation_lost() {
        // Members 1-4 told 2xx; a failover lost the reservations of 3 and 4,
        // and 4 asked again: reserved anew, refused by the database's guard.
        let mut records = told_each(1..=2, 200, "ISSUED");
        records.extend(told_each(3..=4, 202, "ACCEPTED"));
        records.push(told(4, 409, "SOLD_OUT_AT_DB"));
        records.push(told(5, 409, "SOLD_OUT"));
        let after_failover = Truth {
            reserved_in_redis: Some([1, 2, 4].into_iter().collect()),
            ..truth(4, &[(1, 1), (2, 1), (3, 1), (4, 1)], 0)
        };
        let v = Verification::join(&records, &after_failover, 0);
        assert_eq!((v.reservations_lost, v.re_reserved), (1, 1));
        assert_eq!(v.acked_but_lost, 0);
        // Where the method keeps no reservation in Redis, none is lost.
        let unreserved = Verification::join(&records, &truth(4, &[(1, 1)], 0), 0);
        assert_eq!(unreserved.reservations_lost, 0);
    }

    #[test]
    fn a_2xx_without_a_row_is_acked_but_lost() {
        // Members 1–3 accepted; the process died before 2 and 3 were confirmed.
        let mut records = told_each(1..=3, 202, "ACCEPTED");
        records.push(told(4, 409, "SOLD_OUT"));
        // Three reserved, one row: Redis would sell none of the other two.
        let v = Verification::join(&records, &truth(3, &[(1, 1)], 0), 0);
        assert_eq!(v.acked_but_lost, 2);
        assert_eq!(v.issued_but_refused, 0);
        assert_eq!(v.stranded_stock, 2);
        assert_eq!(v.broken_claims(&[Claim::Total, Claim::OnePerMember]), []);
        assert_eq!(v.broken_claims(ALL), [Claim::Acked]);
        assert!(
            v.verdict.contains("every 2xx issued (2 told 2xx, no row)"),
            "{}",
            v.verdict
        );
    }

    #[test]
    fn a_row_after_a_timeout_or_an_error_is_issued_but_refused() {
        let mut records = vec![told(1, 200, "ISSUED")];
        // A client that gave up, or never heard back, saw no status.
        records.extend([told(2, 0, "TIMED_OUT"), told(3, 0, "NO_ANSWER")]);
        records.extend(told_each(4..=5, 503, "UNAVAILABLE"));
        let v = Verification::join(
            &records,
            &truth(10, &[(1, 1), (2, 1), (3, 1), (4, 1)], 5),
            0,
        );
        assert_eq!(v.issued_but_refused, 3);
        assert_eq!(v.acked_but_lost, 0);
        // Nobody was told SOLD_OUT: what is left can still be sold.
        assert_eq!(v.stranded_stock, 0);
        assert!(v.broken_claims(ALL).is_empty());
    }

    #[test]
    fn an_unknown_outcome_is_its_own_class_not_a_refusal() {
        let mut records = told_each(1..=3, 503, "OUTCOME_UNKNOWN");
        // Member 3 asked again and was told yes: a success, not an unknown.
        records.push(told(3, 200, "ISSUED"));
        let v = Verification::join(&records, &truth(10, &[(1, 1), (3, 1)], 8), 0);
        assert_eq!(v.outcome_unknown, 2);
        assert_eq!(v.outcome_unknown_issued, 1);
        assert_eq!(v.issued_but_refused, 0);
        assert_eq!(v.acked_but_lost, 0);
    }

    #[test]
    fn stranded_stock_is_held_in_redis_after_a_sold_out() {
        let sold_out = [told(1, 200, "ISSUED"), told(2, 409, "SOLD_OUT")];
        // Total 5, one row, Redis would sell one more: three are held.
        let v = Verification::join(&sold_out, &truth(5, &[(1, 1)], 1), 0);
        assert_eq!(v.stranded_stock, 3);
        // What a failed confirm gave back after the spike is for sale again.
        assert_eq!(
            Verification::join(&sold_out, &truth(5, &[(1, 1)], 4), 0).stranded_stock,
            0
        );
        // Refused at the database's guard: the same count.
        let at_db = [told(1, 200, "ISSUED"), told(2, 409, "SOLD_OUT_AT_DB")];
        assert_eq!(
            Verification::join(&at_db, &truth(3, &[(1, 1)], 0), 0).stranded_stock,
            2
        );
        // Never told SOLD_OUT: nothing is stranded.
        let open = [told(1, 200, "ISSUED"), told(2, 503, "UNAVAILABLE")];
        assert_eq!(
            Verification::join(&open, &truth(5, &[(1, 1)], 0), 0).stranded_stock,
            0
        );
        // Redis would sell units the rows hold: not stranded, sellable twice.
        let lost = Verification::join(&sold_out, &truth(5, &[(1, 1), (2, 1)], 6), 0);
        assert_eq!((lost.stranded_stock, lost.sellable_twice), (0, 3));
        // The database methods keep no stock in Redis.
        let db = Truth {
            sellable_in_redis: None,
            ..truth(5, &[(1, 1)], 0)
        };
        assert_eq!(Verification::join(&sold_out, &db, 0).stranded_stock, 0);
    }

    #[test]
    fn over_issue_and_duplicates_break_the_claims_that_forbid_them() {
        let records = [told(1, 200, "ISSUED"), told(2, 200, "ISSUED")];
        let v = Verification::join(&records, &truth(1, &[(1, 2), (2, 1)], 0), 4);
        assert_eq!((v.over_issued, v.duplicates, v.out_of_turn), (2, 1, 4));
        assert_eq!(v.broken_claims(ALL), [Claim::Total, Claim::OnePerMember]);
        // READ_COMMITTED does not claim the total: only the duplicate breaks a claim.
        let read_committed = [Claim::OnePerMember, Claim::Acked];
        assert_eq!(v.broken_claims(&read_committed), [Claim::OnePerMember]);
        assert!(
            v.verdict.starts_with("held: every 2xx issued"),
            "{}",
            v.verdict
        );
    }
}
