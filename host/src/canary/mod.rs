//! The canary: a component that is new or changed proves what it claims
//! before it serves.
//!
//! When a file is loaded ([`reload`], each file by a prover of its own:
//! [`provers`]) and passes the registry's checks, its
//! component is put on trial on a scratch coupon of its own
//! ([`scratch`]): an unknown member, an unknown coupon, a burst of
//! [`MEMBERS`] members on a total of [`TOTAL`] (the first [`TOTAL`] asking
//! twice), then members one at a time until it says sold out; a method
//! that answers 202 is waited for until its own consumers confirmed what
//! it accepted ([`requests`]). The answers and the rows are judged
//! ([`judge`]): every claim in force on the lab's engine (its
//! descriptor's entry for the engine, else its claims), each outcome against what
//! the database holds, no trap and no deadline. One that passes serves,
//! with its report; one that fails is refused with the first failing check
//! and a request that shows it, and whatever its method served before
//! keeps serving; one that reached no verdict (a dependency down) awaits,
//! and runs again. Meanwhile a request for its method is told which of
//! these it is (`Registry::unserved`). A canary stops asking and waiting
//! at [`LIMIT`], so it ends within that and one request's timeout. The
//! whole runs off the request path, and nothing of it reaches a listing,
//! a result, the recorder or `/metrics`. Nothing of it touches Redis
//! unless the component does: a component that never does is proved while
//! Redis is down.
//!
//! A passed file is remembered by its sha256 in the database ([`passes`]),
//! so `--canary changed` (the default) runs it once per file; `always`
//! runs it at every load, `off` never.

pub mod judge;
mod passes;
mod provers;

mod requests;
mod scratch;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;

use self::judge::Verdict;
use self::provers::{Provers, Turn};
use self::scratch::Scratch;
use crate::config::CanaryMode;
use crate::db_target;
use crate::lab::Lab;
use crate::runtime::Strategy;
use crate::runtime::canary_report::{CanaryReport, Failure};
use crate::runtime::registry::{self, Candidate, Unready, Unserved, components_in};
use crate::runtime::watcher::{self, DirectoryWatcher};

/// The scratch coupon's total.
pub const TOTAL: u64 = 16;
/// The members of the burst: three for each coupon.
pub const MEMBERS: usize = 48;
/// How long a canary asks and waits for confirmations: one whose 202s are
/// not confirmed by then is refused.
pub const LIMIT: Duration = Duration::from_secs(10);
/// Tries of `couponlab check`'s canary that a failing dependency, or
/// `DELETE /lab/data`, left without a verdict; and the pause between two.
const TRIES: u32 = 3;
const RETRY_PAUSE: Duration = Duration::from_secs(2);
/// How long the record of passed canaries is waited for before the
/// component is proved again instead.
const PASSES_LIMIT: Duration = Duration::from_secs(5);

/// This server's canaries: a prover for each file on trial, and the
/// watcher that hands them the files that change. Dropping it stops the
/// watching; the provers end with the lab.
pub struct Canaries {
    _watcher: Option<DirectoryWatcher>,
}

/// Loads the strategy directory — what needs no canary serves at once, the
/// files left to prove are handed to their provers — and, unless the
/// configuration says otherwise, watches it. Called once the server's
/// consumer roles run: the canary of a method that answers 202 waits for
/// its confirmations.
pub async fn start(lab: &Lab) -> anyhow::Result<Canaries> {
    let dir = &lab.config.strategy_dir;
    let provers = Arc::new(Provers::default());
    load_dir(lab, &provers)
        .await
        .with_context(|| format!("cannot read {}", dir.display()))?;
    if lab.registry.strategies().is_empty() && provers.is_idle() {
        tracing::warn!(dir = %dir.display(), "no strategy loaded; run `cargo xtask strategies`");
    }
    if !lab.config.watch {
        return Ok(Canaries { _watcher: None });
    }
    let owner = lab.downgrade();
    let watcher = watcher::watch(dir, move |files| {
        let Some(lab) = owner.upgrade() else {
            return false;
        };
        for file in files {
            provers::schedule(&provers, &lab, file);
        }
        true
    })?;
    tracing::info!(dir = %dir.display(), "watching for strategy changes");
    Ok(Canaries {
        _watcher: Some(watcher),
    })
}

/// Loads the strategy directory. What needs no canary serves at once; the
/// files left to prove are handed to their provers.
async fn load_dir(lab: &Lab, provers: &Arc<Provers>) -> anyhow::Result<()> {
    for file in components_in(&lab.config.strategy_dir)? {
        let candidate = {
            let _one_at_a_time = lab.registry.one_at_a_time().await;
            lab.registry.examine(&lab.runtime, &file).await
        };
        let Some(candidate) = candidate else {
            continue;
        };
        match known(lab, &candidate).await {
            Some(report) => lab.registry.publish(&lab.runtime, candidate, report),
            None => {
                not_serving(lab, &candidate.0, Unready::OnTrial);
                provers::schedule(provers, lab, file);
            }
        }
    }
    Ok(())
}

/// Brings the registry in line with `file` as it is on disk; a new or
/// changed component serves only once its canary passed. Only one prover
/// looks at a file at a time ([`provers`]); the registry's maps are changed
/// one file at a time, but canaries run side by side.
async fn reload(lab: &Lab, file: &Path) -> Turn {
    let candidate = {
        let _one_at_a_time = lab.registry.one_at_a_time().await;
        lab.registry.examine(&lab.runtime, file).await
    };
    let Some(candidate) = candidate else {
        return Turn::Settled;
    };
    if let Some(report) = known(lab, &candidate).await {
        // Served from its first request: a 202 answered before the
        // subscriber listens would publish into nothing.
        let strategy = candidate.0.clone();
        requests::until_subscribed_for(lab, &strategy).await;
        let _one_at_a_time = lab.registry.one_at_a_time().await;
        lab.registry.publish(&lab.runtime, candidate, report);
        requests::no_longer_subscribed_for(lab, &strategy);
        return Turn::Settled;
    }
    let strategy = candidate.0.clone();
    tracing::info!(method = %strategy.method, file = %file.display(), "canary: proving a new component before it serves");
    // A canary run again after one without a verdict keeps that one's
    // reason until it has a verdict of its own: it is what the method
    // waits for.
    let again = lab
        .registry
        .unserved(&strategy.method)
        .is_some_and(|known| {
            known.file == strategy.file && matches!(known.why, Unready::NoVerdict(_))
        });
    if !again {
        not_serving(lab, &strategy, Unready::OnTrial);
    }
    let (report, verdict) = match once(lab, &strategy).await {
        Ok(judged) => judged,
        Err(err) => return no_verdict(lab, &strategy, format!("{err:#}")),
    };
    let _one_at_a_time = lab.registry.one_at_a_time().await;
    match verdict {
        Verdict::Passed => {
            tracing::info!(method = %strategy.method, took_ms = report.took_ms, p50_ms = report.p50_ms, "canary passed");
            let settings = lab.runtime.sql_engine().settings_text();
            let proved = (strategy.sha256.as_str(), settings.as_str());
            if let Err(err) = passes::remember(lab.db(), proved, &strategy.method, &report).await {
                tracing::warn!(method = %strategy.method, error = %err, "could not remember a passed canary; it runs again at the next start");
            }
            lab.registry.publish(&lab.runtime, candidate, Some(report));
        }
        Verdict::Failed(failure) => {
            lab.registry
                .refuse(&lab.runtime, candidate, failure.to_string(), report);
        }
        Verdict::Inconclusive(reason) => return no_verdict(lab, &strategy, reason),
    }
    Turn::Settled
}

/// Records why `strategy`'s method does not serve, for a request that asks
/// for it, unless another file serves that method already.
fn not_serving(lab: &Lab, strategy: &Strategy, why: Unready) {
    let retry_after = match why {
        Unready::OnTrial | Unready::NoVerdict(_) => Some(provers::RETRY_AFTER),
        Unready::Refused(_) => None,
    };
    let unserved = Unserved {
        file: strategy.file.clone(),
        why,
        retry_after,
    };
    lab.registry.not_serving(&strategy.method, unserved);
}

/// A canary of `strategy` that reached no verdict, for `reason`: its method
/// awaits the next one.
fn no_verdict(lab: &Lab, strategy: &Strategy, reason: String) -> Turn {
    not_serving(lab, strategy, Unready::NoVerdict(reason.clone()));
    Turn::Inconclusive(reason)
}

/// `couponlab check`: the canary of `file`, whatever the directory serves.
/// Answers the verdict in words and the report to print.
pub async fn check(lab: &Lab, file: &Path) -> (String, serde_json::Value) {
    let strategy = match registry::candidate(&lab.runtime, file).await {
        Ok(Candidate(strategy)) => strategy,
        Err(reason) => {
            let verdict = format!("refused: {reason}");
            let answer = serde_json::json!({ "file": file, "verdict": verdict });
            return (verdict, answer);
        }
    };
    let (report, verdict) = prove(lab, &strategy).await;
    let verdict = match verdict {
        Verdict::Passed => "passed".to_string(),
        Verdict::Failed(failure) => format!("refused: {failure}"),
        Verdict::Inconclusive(reason) => format!("no verdict: {reason}"),
    };
    let claims = strategy.claims_on(lab.runtime.sql_engine().name);
    let answer = serde_json::json!({
        "method": &*strategy.method,
        "claims": claims.words(),
        "claimsWhy": claims.why,
        "file": file,
        "sha256": strategy.sha256,
        "verdict": verdict,
        "canary": report,
    });
    (verdict, answer)
}

/// What is known of `candidate` without running its canary: `Some(None)`
/// with the canary off, `Some(report)` for a file that passed before
/// (under `changed`); `None` when it is to be proved.
async fn known(lab: &Lab, candidate: &Candidate) -> Option<Option<CanaryReport>> {
    match lab.config.canary {
        CanaryMode::Off => Some(None),
        CanaryMode::Always => None,
        CanaryMode::Changed => match db_target::answered(
            "reading the passed canaries",
            PASSES_LIMIT,
            passes::remembered(
                lab.db(),
                &candidate.0.sha256,
                &lab.runtime.sql_engine().settings_text(),
            ),
        )
        .await
        {
            Ok(report) => report.map(Some),
            Err(err) => {
                tracing::warn!(error = %err, "cannot read the passed canaries; proving the component again");
                None
            }
        },
    }
}

/// Runs the canary of `strategy`, again after a pause when it reached no
/// verdict, [`TRIES`] times at most.
async fn prove(lab: &Lab, strategy: &Arc<Strategy>) -> (CanaryReport, Verdict) {
    let mut tried = 0;
    loop {
        tried += 1;
        let (report, verdict) = match once(lab, strategy).await {
            Ok(judged) => judged,
            Err(err) => (unfinished(), Verdict::Inconclusive(format!("{err:#}"))),
        };
        match verdict {
            Verdict::Inconclusive(reason) if tried < TRIES => {
                tracing::warn!(method = %strategy.method, %reason, "canary reached no verdict; trying again");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            verdict => return (report, verdict),
        }
    }
}

/// One canary: a scratch coupon made, the requests, the verdict, the
/// scratch coupon removed whatever happened.
async fn once(lab: &Lab, strategy: &Arc<Strategy>) -> anyhow::Result<(CanaryReport, Verdict)> {
    if let Err(err) = scratch::sweep_abandoned(lab).await {
        tracing::warn!(error = %err, "could not remove the scratch coupons of canaries that did not finish");
    }
    let ran_at = Utc::now();
    let started = Instant::now();
    let scratch = Scratch::create(lab.db(), TOTAL, MEMBERS).await?;
    lab.registry.trials.begin(&scratch.coupons(), strategy);
    let ran = requests::run(lab, strategy, &scratch, started + LIMIT).await;
    let intact = scratch.intact(lab.db()).await;
    lab.registry.trials.end(&scratch.coupons());
    if let Err(err) = scratch.remove(lab).await {
        tracing::warn!(coupon = scratch.coupon, error = %err, "could not remove a canary's scratch coupon; a later canary will");
    }
    let (asked, truth) = ran?;
    // Judged by what it promises on the lab's engine.
    let claims = strategy.claims_on(lab.runtime.sql_engine().name);
    let (figures, mut verdict) = judge::judge(claims.claims, &asked, &truth);
    if let Some(quarantine) = strategy.quarantined() {
        verdict = Verdict::Failed(Failure {
            check: "no script is left running, unkillable, past its call".into(),
            figure: 1,
            example: Some(quarantine.reason.clone()),
        });
    }
    if !intact? {
        verdict = Verdict::Inconclusive(
            "its scratch coupon was deleted while it ran (DELETE /lab/data)".into(),
        );
    }
    let mut took: Vec<f64> = asked
        .iter()
        .map(|a| a.took.as_secs_f64() * 1000.0)
        .collect();
    took.sort_by(f64::total_cmp);
    let report = CanaryReport {
        passed: matches!(verdict, Verdict::Passed),
        ran_at,
        took_ms: started.elapsed().as_millis() as u64,
        figures,
        p50_ms: took.get(took.len() / 2).copied().unwrap_or(0.0),
        failure: match &verdict {
            Verdict::Failed(failure) => Some(failure.clone()),
            _ => None,
        },
        remembered: false,
    };
    Ok((report, verdict))
}

/// The report of a canary that could not run its requests.
fn unfinished() -> CanaryReport {
    CanaryReport {
        passed: false,
        ran_at: Utc::now(),
        took_ms: 0,
        figures: Default::default(),
        p50_ms: 0.0,
        failure: None,
        remembered: false,
    }
}
