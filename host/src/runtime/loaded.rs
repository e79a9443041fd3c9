//! A component loaded from its file and checked: what it is, what it
//! claims, and whether it may still serve. The registry keeps these by
//! method name; a call instantiates one.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use chrono::{DateTime, Utc};
use wasmtime::component::InstancePre;

use super::bindings::types::{Claim, Descriptor, EngineClaims, ResultLabel};
use super::exports::StrategyExport;
use super::store::HostState;
use super::world::World;
use crate::runtime::canary_report::CanaryReport;

/// A loaded, checked component, ready to instantiate per call.
pub struct Strategy {
    pub method: Arc<str>,
    pub summary: String,
    /// What the method promises, as its descriptor says.
    pub claims: Vec<Claim>,
    /// What it promises instead on the engines named (`claims_on`).
    pub engine_claims: Vec<EngineClaims>,
    /// What the component does besides answering issue requests, and where
    /// the export that does it is.
    pub world: World,
    /// Whether it reserves members in `coupon:issued:{id}`, as its
    /// descriptor says: the result of a coupon it served compares that set
    /// with the issue rows.
    pub reservation_set: bool,
    /// Labels the result of a coupon it served totals, as its descriptor says.
    pub result_labels: Vec<ResultLabel>,
    pub file: PathBuf,
    pub sha256: String,
    /// The file's size and modification time when it was read.
    pub(super) stamp: FileStamp,
    pub loaded_at: DateTime<Utc>,
    pub(super) pre: InstancePre<HostState>,
    pub(super) strategy_export: StrategyExport,
    /// Set once the component must stop serving; only a new file (a new
    /// `Strategy`) serves its method again.
    quarantine: OnceLock<Quarantine>,
    /// What its canary found, once it passed one here (or passed before,
    /// remembered by its sha256).
    pub canary: OnceLock<CanaryReport>,
    /// Set once it is published: what a component on trial does counts in
    /// no figure a user reads.
    serving: AtomicBool,
}

/// Why a loaded component stopped serving.
#[derive(Debug, Clone)]
pub struct Quarantine {
    pub reason: String,
    pub at: DateTime<Utc>,
}

impl Strategy {
    /// Why this component no longer serves, if it was quarantined.
    pub fn quarantined(&self) -> Option<&Quarantine> {
        self.quarantine.get()
    }

    /// Whether it was published to serve its method (it may have been
    /// replaced since); false while it is on trial.
    pub fn serving(&self) -> bool {
        self.serving.load(Ordering::Relaxed)
    }

    /// Marks it published to serve its method.
    pub(super) fn mark_serving(&self) {
        self.serving.store(true, Ordering::Relaxed);
    }

    /// Stops this component serving; the first reason stays.
    pub fn quarantine(&self, reason: String) {
        let _ = self.quarantine.set(Quarantine {
            reason,
            at: Utc::now(),
        });
    }
}

/// A claim's word, as the README's `claims` column and the load runner spell it.
pub fn claim_word(claim: Claim) -> &'static str {
    match claim {
        Claim::Total => "total",
        Claim::Member => "member",
        Claim::Acked => "acked",
    }
}

/// A component that passed every check.
pub(super) struct Prepared {
    pub pre: InstancePre<HostState>,
    pub strategy_export: StrategyExport,
    pub world: World,
    pub descriptor: Descriptor,
}

/// What a file's metadata says of its content: a file whose stamp is
/// unchanged is not read (and hashed) again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileStamp {
    len: u64,
    modified: Option<SystemTime>,
}

impl FileStamp {
    pub(super) fn of(metadata: &std::fs::Metadata) -> FileStamp {
        FileStamp {
            len: metadata.len(),
            modified: metadata.modified().ok(),
        }
    }
}

impl Strategy {
    /// The component `prepared` from `file`, as its descriptor describes it.
    pub(super) fn new(
        prepared: Prepared,
        file: &Path,
        sha256: &str,
        stamp: FileStamp,
    ) -> Result<Strategy, String> {
        let Prepared {
            pre,
            strategy_export,
            world,
            descriptor,
        } = prepared;
        let method = descriptor.method.trim().to_ascii_uppercase();
        if method.is_empty() {
            return Err("describe() returned an empty method name".into());
        }
        Ok(Strategy {
            method: Arc::from(method),
            summary: descriptor.summary,
            claims: descriptor.claims,
            engine_claims: descriptor.engine_claims,
            world,
            reservation_set: descriptor.reservation_set,
            result_labels: descriptor.result_labels,
            file: file.to_path_buf(),
            sha256: sha256.to_string(),
            stamp,
            loaded_at: Utc::now(),
            pre,
            strategy_export,
            quarantine: OnceLock::new(),
            canary: OnceLock::new(),
            serving: AtomicBool::new(false),
        })
    }
}
