//! The claims in force for a component on the lab's engine: its
//! descriptor's entry for that engine (`engine-claims`), else its
//! `claims`. A guarantee that rests on the engine may not hold on another
//! (`GET_LOCK` is each Galera node's own), so the canary judges, and
//! `GET /lab/strategies` shows, what the component promises where it runs.

use super::bindings::types::{Claim, EngineClaims};
use super::loaded::{Strategy, claim_word};

/// What a component promises on one engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InForce<'a> {
    pub claims: &'a [Claim],
    /// Why they differ from the component's `claims`, when an entry for
    /// the engine applies.
    pub why: Option<&'a str>,
}

impl InForce<'_> {
    /// The claims in the words of the README's `claims` column.
    pub fn words(&self) -> Vec<&'static str> {
        self.claims.iter().map(|claim| claim_word(*claim)).collect()
    }
}

impl Strategy {
    /// The claims in force on the engine named `engine` (`sql.engine()`'s
    /// name: `galera` on a Galera node).
    pub fn claims_on(&self, engine: &str) -> InForce<'_> {
        in_force(&self.claims, &self.engine_claims, engine)
    }
}

/// Of `claims` and the per-engine `entries`, those in force on `engine`:
/// the first entry that names it, else `claims`.
fn in_force<'a>(claims: &'a [Claim], entries: &'a [EngineClaims], engine: &str) -> InForce<'a> {
    match entries.iter().find(|entry| entry.engine == engine) {
        Some(entry) => InForce {
            claims: &entry.claims,
            why: Some(&entry.why),
        },
        None => InForce { claims, why: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_for_the_engine_is_in_force_there_and_claims_elsewhere() {
        let claims = [Claim::Total, Claim::Member, Claim::Acked];
        let entries = [
            EngineClaims {
                engine: "galera".into(),
                claims: vec![Claim::Member, Claim::Acked],
                why: "GET_LOCK is per node".into(),
            },
            EngineClaims {
                engine: "galera".into(),
                claims: vec![],
                why: "a second entry for the engine is not read".into(),
            },
        ];
        let on_galera = in_force(&claims, &entries, "galera");
        assert_eq!(on_galera.words(), ["member", "acked"]);
        assert_eq!(on_galera.why, Some("GET_LOCK is per node"));
        let on_mariadb = in_force(&claims, &entries, "mariadb");
        assert_eq!(on_mariadb.words(), ["total", "member", "acked"]);
        assert_eq!(on_mariadb.why, None);
    }
}
