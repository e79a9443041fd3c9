//! The strategies a server can run, by method name, and the files it refused.
//!
//! The map sits behind an [`ArcSwap`]: a request clones the `Arc` of the
//! strategy it runs, so replacing or removing a method never disturbs a call
//! already in flight, and readers take no lock. Changes are made one file at
//! a time: [`Registry::examine`] loads and checks a changed file, and the
//! caller (`crate::canary`) publishes the candidate or refuses it, each a new
//! map stored at once. Components on trial serve only their canary's scratch
//! coupons ([`Registry::owner`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use wasmtime::component::InstancePre;

use super::bindings::strategy;
use super::bindings::types::{Claim, Descriptor, ResultLabel};
use super::engine::Runtime;
use super::store::HostState;
use super::trials::Trials;
use super::world::World;
use crate::canary::CanaryReport;

/// A loaded, checked component, ready to instantiate per call.
pub struct Strategy {
    pub method: Arc<str>,
    pub summary: String,
    /// What the method promises, as its descriptor says.
    pub claims: Vec<Claim>,
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
    pub loaded_at: DateTime<Utc>,
    pub(super) pre: InstancePre<HostState>,
    pub(super) strategy_export: strategy::GuestIndices,
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

    /// Its claims in the words of the README's `claims` column.
    pub fn claim_words(&self) -> Vec<&'static str> {
        self.claims.iter().map(|claim| claim_word(*claim)).collect()
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

/// A new or changed component that passed every check of its file and has
/// served nothing yet: the caller publishes or refuses it.
pub struct Candidate(pub Arc<Strategy>);

/// A component that passed every check.
pub(super) struct Prepared {
    pub pre: InstancePre<HostState>,
    pub strategy_export: strategy::GuestIndices,
    pub world: World,
    pub descriptor: Descriptor,
}

/// A file that could not be loaded, and why.
#[derive(Debug, Clone)]
pub struct Rejection {
    pub file: PathBuf,
    pub sha256: Option<String>,
    pub reason: String,
    pub at: DateTime<Utc>,
    /// The canary that refused it, when one did.
    pub canary: Option<CanaryReport>,
}

#[derive(Default)]
pub struct Registry {
    strategies: ArcSwap<BTreeMap<String, Arc<Strategy>>>,
    /// The latest rejection of each file that is currently refused.
    rejections: ArcSwap<BTreeMap<PathBuf, Rejection>>,
    /// Components on trial, by the scratch coupons their canaries run on.
    pub trials: Trials,
    /// Reloads are read-modify-write of the maps: one at a time.
    reloading: tokio::sync::Mutex<()>,
}

impl Registry {
    /// The strategy serving `method` now.
    pub fn get(&self, method: &str) -> Option<Arc<Strategy>> {
        self.strategies.load().get(method).cloned()
    }

    /// The strategy that confirms `method`'s work on `coupon_id`: the
    /// component on trial there (a canary's scratch coupon), else the one
    /// serving `method`.
    pub fn owner(&self, coupon_id: u64, method: &str) -> Option<Arc<Strategy>> {
        match self.trials.on(coupon_id) {
            Some(on_trial) if &*on_trial.method == method => Some(on_trial),
            _ => self.get(method),
        }
    }

    /// Every loaded strategy, by method name.
    pub fn strategies(&self) -> Arc<BTreeMap<String, Arc<Strategy>>> {
        self.strategies.load_full()
    }

    /// Files currently refused, by path.
    pub fn rejections(&self) -> Arc<BTreeMap<PathBuf, Rejection>> {
        self.rejections.load_full()
    }

    /// Held while one file is examined and its component published or
    /// rejected: each is a read-modify-write of the maps.
    pub async fn one_at_a_time(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.reloading.lock().await
    }

    /// Compares `file` as it is now on disk with what is served, under
    /// [`Registry::one_at_a_time`]: unloads the method of a removed file,
    /// rejects a file that fails a check (whatever it served before keeps
    /// serving), and answers a new or changed component that passed every
    /// check as a [`Candidate`] for the caller to publish or reject. A file
    /// whose content hash is unchanged, or was already rejected, is left be.
    pub async fn examine(&self, runtime: &Runtime, file: &Path) -> Option<Candidate> {
        let current = self.strategies.load_full();
        let served = current.values().find(|s| s.file == file).cloned();

        let bytes = match tokio::fs::read(file).await {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                self.forget_rejection(file);
                if let Some(old) = served {
                    let mut map = (*current).clone();
                    map.remove(&*old.method);
                    self.strategies.store(Arc::new(map));
                    tracing::info!(method = %old.method, file = %file.display(), "strategy unloaded: its file was removed");
                    runtime.count_change(&old.method, "unloaded");
                }
                return None;
            }
            Err(err) => {
                self.reject(runtime, file, None, format!("cannot read it: {err}"), None);
                return None;
            }
        };

        let sha256 = hex::encode(Sha256::digest(&bytes));
        let already_rejected = self
            .rejections
            .load()
            .get(file)
            .is_some_and(|r| r.sha256.as_deref() == Some(&sha256));
        if served.as_ref().is_some_and(|s| s.sha256 == sha256) || already_rejected {
            return None;
        }

        let strategy = match load(runtime, file, bytes, &sha256).await {
            Ok(strategy) => strategy,
            Err(reason) => {
                self.reject(runtime, file, Some(sha256), reason, None);
                return None;
            }
        };
        if let Some(owner) = current
            .get(&*strategy.method)
            .filter(|owner| owner.file != file)
        {
            let reason = format!(
                "method {} is already served by {}",
                strategy.method,
                owner.file.display()
            );
            self.reject(runtime, file, Some(sha256), reason, None);
            return None;
        }
        Some(Candidate(Arc::new(strategy)))
    }

    /// Serves `candidate`'s method with it, in place of whatever its file
    /// served before, with what its canary found (`None`: not run).
    pub fn publish(
        &self,
        runtime: &Runtime,
        Candidate(strategy): Candidate,
        canary: Option<CanaryReport>,
    ) {
        if let Some(report) = canary {
            let _ = strategy.canary.set(report);
        }
        strategy.serving.store(true, Ordering::Relaxed);
        let current = self.strategies.load_full();
        let served = current.values().find(|s| s.file == strategy.file).cloned();
        let method = strategy.method.to_string();
        let mut map = (*current).clone();
        if let Some(old) = &served {
            map.remove(&*old.method);
        }
        let (file, sha256) = (strategy.file.clone(), strategy.sha256.clone());
        map.insert(method.clone(), strategy);
        self.strategies.store(Arc::new(map));
        self.forget_rejection(&file);
        let change = if served.is_some() {
            "replaced"
        } else {
            "loaded"
        };
        tracing::info!(%method, file = %file.display(), sha256 = %&sha256[..12], "strategy {change}");
        runtime.count_change(&method, change);
    }

    /// Refuses `candidate` for what its canary found; whatever its file
    /// served before keeps serving.
    pub fn refuse(
        &self,
        runtime: &Runtime,
        Candidate(strategy): Candidate,
        reason: String,
        canary: CanaryReport,
    ) {
        let sha256 = Some(strategy.sha256.clone());
        self.reject(runtime, &strategy.file, sha256, reason, Some(canary));
    }

    fn reject(
        &self,
        runtime: &Runtime,
        file: &Path,
        sha256: Option<String>,
        reason: String,
        canary: Option<CanaryReport>,
    ) {
        tracing::warn!(file = %file.display(), %reason, "strategy file rejected");
        // A rejected file's method is the one it served before, if any: a
        // file that never loaded never said its method.
        let method = self
            .strategies
            .load()
            .values()
            .find(|s| s.file == file)
            .map_or_else(|| "unknown".to_string(), |s| s.method.to_string());
        runtime.count_change(&method, "rejected");
        let mut rejections = (*self.rejections.load_full()).clone();
        rejections.insert(
            file.to_path_buf(),
            Rejection {
                file: file.to_path_buf(),
                sha256,
                reason,
                at: Utc::now(),
                canary,
            },
        );
        self.rejections.store(Arc::new(rejections));
    }

    fn forget_rejection(&self, file: &Path) {
        if self.rejections.load().contains_key(file) {
            let mut rejections = (*self.rejections.load_full()).clone();
            rejections.remove(file);
            self.rejections.store(Arc::new(rejections));
        }
    }
}

/// Loads and checks `file` as a candidate of its own, whatever is served
/// (`couponlab check`).
pub async fn candidate(runtime: &Runtime, file: &Path) -> Result<Candidate, String> {
    let bytes = tokio::fs::read(file)
        .await
        .map_err(|err| format!("cannot read it: {err}"))?;
    let sha256 = hex::encode(Sha256::digest(&bytes));
    let strategy = load(runtime, file, bytes, &sha256).await?;
    Ok(Candidate(Arc::new(strategy)))
}

/// Every `*.wasm` in `dir`, in file-name order, so when two files claim one
/// method the first name wins.
pub fn components_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if is_component(&path) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Whether the registry cares about `path`: `*.wasm`, not the `*.wasm.partial`
/// of a write in progress.
pub fn is_component(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext == "wasm")
}

/// Compiles, checks and describes one component.
async fn load(
    runtime: &Runtime,
    file: &Path,
    bytes: Vec<u8>,
    sha256: &str,
) -> Result<Strategy, String> {
    let component = runtime
        .compile(bytes, sha256)
        .await
        .map_err(|err| format!("not a valid WebAssembly component: {err:#}"))?;
    runtime.fits_pool(&component)?;
    let Prepared {
        pre,
        strategy_export,
        world,
        descriptor,
    } = runtime
        .prepare(&component)
        .await
        .map_err(|err| format!("{err:#}"))?;
    let method = descriptor.method.trim().to_ascii_uppercase();
    if method.is_empty() {
        return Err("describe() returned an empty method name".into());
    }
    Ok(Strategy {
        method: Arc::from(method),
        summary: descriptor.summary,
        claims: descriptor.claims,
        world,
        reservation_set: descriptor.reservation_set,
        result_labels: descriptor.result_labels,
        file: file.to_path_buf(),
        sha256: sha256.to_string(),
        loaded_at: Utc::now(),
        pre,
        strategy_export,
        quarantine: OnceLock::new(),
        canary: OnceLock::new(),
        serving: AtomicBool::new(false),
    })
}
