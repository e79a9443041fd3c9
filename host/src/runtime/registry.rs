//! The strategies a server can run, by method name, and the files it refused.
//!
//! The map sits behind an [`ArcSwap`]: a request clones the `Arc` of the
//! strategy it runs, so replacing or removing a method never disturbs a call
//! already in flight, and readers take no lock. Changes are made one file at
//! a time: [`Registry::examine`] loads and checks a changed file, and the
//! caller (the canary) publishes the candidate or refuses it, each a new
//! map stored at once. Components on trial serve only their canary's scratch
//! coupons ([`Registry::owner`]); the methods they name are known but not
//! served ([`Registry::unserved`]), so a request for one is told why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use super::engine::Runtime;
use super::loaded::{FileStamp, Strategy};
use super::trials::Trials;
use crate::runtime::canary_report::CanaryReport;

/// A new or changed component that passed every check of its file and has
/// served nothing yet: the caller publishes or refuses it.
pub struct Candidate(pub Arc<Strategy>);

/// A file that could not be loaded, and why.
#[derive(Debug, Clone)]
pub struct Rejection {
    pub file: PathBuf,
    pub sha256: Option<String>,
    stamp: Option<FileStamp>,
    pub reason: String,
    pub at: DateTime<Utc>,
    /// The canary that refused it, when one did.
    pub canary: Option<CanaryReport>,
}

/// A method a file names whose component does not serve it.
#[derive(Debug, Clone)]
pub struct Unserved {
    pub file: PathBuf,
    pub why: Unready,
    /// When asking again may find it serving; `None` when nothing changes
    /// until its file does.
    pub retry_after: Option<Duration>,
}

/// Why a component does not serve the method it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unready {
    /// Its canary runs, or waits its turn.
    OnTrial,
    /// Its canary reached no verdict, for this reason; it runs again.
    NoVerdict(String),
    /// Its canary refused it, for this reason.
    Refused(String),
}

#[derive(Default)]
pub struct Registry {
    strategies: ArcSwap<BTreeMap<String, Arc<Strategy>>>,
    /// The latest rejection of each file that is currently refused.
    rejections: ArcSwap<BTreeMap<PathBuf, Rejection>>,
    /// Components on trial, by the scratch coupons their canaries run on.
    pub trials: Trials,
    /// Methods known but not served, each with the file that names it.
    unserved: ArcSwap<BTreeMap<String, Unserved>>,
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

    /// Why `method`, which no component serves, is not served, when a file
    /// names it.
    pub fn unserved(&self, method: &str) -> Option<Unserved> {
        self.unserved.load().get(method).cloned()
    }

    /// Records why `method`, named by `file`, does not serve, in place of
    /// whatever was recorded of `file` before (it may have named another).
    pub fn not_serving(&self, method: &str, unserved: Unserved) {
        self.unserved.rcu(|methods| {
            let mut methods = (**methods).clone();
            methods.retain(|_, known| known.file != unserved.file);
            methods.insert(method.to_string(), unserved.clone());
            methods
        });
    }

    /// Forgets what was recorded of `file`'s method: it serves, was removed,
    /// or names no method any more.
    fn forget_unserved(&self, file: &Path) {
        if self
            .unserved
            .load()
            .values()
            .any(|known| known.file == file)
        {
            self.unserved.rcu(|methods| {
                let mut methods = (**methods).clone();
                methods.retain(|_, known| known.file != file);
                methods
            });
        }
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

        let stamp = match tokio::fs::metadata(file).await {
            Ok(metadata) => FileStamp::of(&metadata),
            Err(err) => return self.unreadable(runtime, file, served, &current, err),
        };
        // Size and modification time first: reading and hashing a 20 MB
        // interpreter component again for every event would cost more than
        // all the rest of an idle server.
        let rejected_stamp = self.rejections.load().get(file).and_then(|r| r.stamp);
        if served.as_ref().is_some_and(|s| s.stamp == stamp) || rejected_stamp == Some(stamp) {
            return None;
        }
        let bytes = match tokio::fs::read(file).await {
            Ok(bytes) => bytes,
            Err(err) => return self.unreadable(runtime, file, served, &current, err),
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

        let strategy = match runtime.load(file, bytes, &sha256, stamp).await {
            Ok(strategy) => strategy,
            Err(reason) => {
                self.reject(runtime, file, Some(sha256), Some(stamp), reason, None);
                return None;
            }
        };
        if let Some(reason) = self.served_elsewhere(&strategy) {
            self.reject(runtime, file, Some(sha256), Some(stamp), reason, None);
            return None;
        }
        Some(Candidate(Arc::new(strategy)))
    }

    /// Why `strategy` may not serve its method: another file serves it.
    fn served_elsewhere(&self, strategy: &Strategy) -> Option<String> {
        let current = self.strategies.load();
        let owner = current
            .get(&*strategy.method)
            .filter(|owner| owner.file != strategy.file)?;
        Some(format!(
            "method {} is already served by {}",
            strategy.method,
            owner.file.display()
        ))
    }

    /// A file that could not be read: unloaded when it was removed,
    /// rejected otherwise.
    fn unreadable(
        &self,
        runtime: &Runtime,
        file: &Path,
        served: Option<Arc<Strategy>>,
        current: &BTreeMap<String, Arc<Strategy>>,
        err: std::io::Error,
    ) -> Option<Candidate> {
        if err.kind() == std::io::ErrorKind::NotFound {
            self.unload(runtime, file, served, current);
        } else {
            let reason = format!("cannot read it: {err}");
            self.reject(runtime, file, None, None, reason, None);
        }
        None
    }

    /// Forgets a removed file: the method it served is unloaded.
    fn unload(
        &self,
        runtime: &Runtime,
        file: &Path,
        served: Option<Arc<Strategy>>,
        current: &BTreeMap<String, Arc<Strategy>>,
    ) {
        self.forget_rejection(file);
        self.forget_unserved(file);
        if let Some(old) = served {
            let mut map = current.clone();
            map.remove(&*old.method);
            self.strategies.store(Arc::new(map));
            tracing::info!(method = %old.method, file = %file.display(), "strategy unloaded: its file was removed");
            runtime.count_change(&old.method, "unloaded");
        }
    }

    /// Serves `candidate`'s method with it, in place of whatever its file
    /// served before, with what its canary found (`None`: not run).
    pub fn publish(
        &self,
        runtime: &Runtime,
        Candidate(strategy): Candidate,
        canary: Option<CanaryReport>,
    ) {
        // Canaries run side by side: another file may have taken the method
        // while this one was on trial.
        if let Some(reason) = self.served_elsewhere(&strategy) {
            let (sha256, stamp) = (Some(strategy.sha256.clone()), Some(strategy.stamp));
            return self.reject(runtime, &strategy.file, sha256, stamp, reason, canary);
        }
        if let Some(report) = canary {
            let _ = strategy.canary.set(report);
        }
        strategy.mark_serving();
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
        self.forget_unserved(&file);
        let change = if served.is_some() {
            "replaced"
        } else {
            "loaded"
        };
        tracing::info!(%method, file = %file.display(), sha256 = %&sha256[..12], "strategy {change}");
        runtime.count_change(&method, change);
    }

    /// Refuses `candidate` for what its canary found; whatever its file
    /// served before keeps serving, and a request for its method is told
    /// why, until its file changes.
    pub fn refuse(
        &self,
        runtime: &Runtime,
        Candidate(strategy): Candidate,
        reason: String,
        canary: CanaryReport,
    ) {
        let (sha256, stamp) = (Some(strategy.sha256.clone()), Some(strategy.stamp));
        let file = strategy.file.clone();
        let refused = Unserved {
            file: file.clone(),
            why: Unready::Refused(reason.clone()),
            retry_after: None,
        };
        self.reject(runtime, &file, sha256, stamp, reason, Some(canary));
        self.not_serving(&strategy.method, refused);
    }

    fn reject(
        &self,
        runtime: &Runtime,
        file: &Path,
        sha256: Option<String>,
        stamp: Option<FileStamp>,
        reason: String,
        canary: Option<CanaryReport>,
    ) {
        tracing::warn!(file = %file.display(), %reason, "strategy file rejected");
        // What the file named before is not what it names now: a refusal
        // by its canary says so again once recorded.
        self.forget_unserved(file);
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
                stamp,
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
    let unreadable = |err: std::io::Error| format!("cannot read it: {err}");
    let stamp = FileStamp::of(&tokio::fs::metadata(file).await.map_err(unreadable)?);
    let bytes = tokio::fs::read(file).await.map_err(unreadable)?;
    let sha256 = hex::encode(Sha256::digest(&bytes));
    let strategy = runtime.load(file, bytes, &sha256, stamp).await?;
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
