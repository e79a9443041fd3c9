//! The strategies a server can run, by method name.
//!
//! The map sits behind an [`ArcSwap`]: a request clones the `Arc` of the
//! strategy it runs, so replacing or removing a method never disturbs a call
//! already in flight, and readers take no lock.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

use super::Runtime;
use super::bindings::IssuerPre;
use super::store::HostState;

/// A loaded, checked component, ready to instantiate per call.
pub struct Strategy {
    pub method: Arc<str>,
    pub summary: String,
    /// The WIT world the component implements, which decides its role.
    pub world: &'static str,
    pub file: PathBuf,
    pub sha256: String,
    pub loaded_at: DateTime<Utc>,
    pub(super) pre: IssuerPre<HostState>,
}

/// A file that could not be loaded, and why.
#[derive(Debug, Clone)]
pub struct Rejection {
    pub file: PathBuf,
    pub sha256: Option<String>,
    pub reason: String,
    pub at: DateTime<Utc>,
}

#[derive(Default)]
pub struct Registry {
    strategies: ArcSwap<BTreeMap<String, Arc<Strategy>>>,
    rejections: ArcSwap<Vec<Rejection>>,
}

impl Registry {
    /// The strategy serving `method` now.
    pub fn get(&self, method: &str) -> Option<Arc<Strategy>> {
        self.strategies.load().get(method).cloned()
    }

    /// Every loaded strategy, by method name.
    pub fn strategies(&self) -> Arc<BTreeMap<String, Arc<Strategy>>> {
        self.strategies.load_full()
    }

    pub fn rejections(&self) -> Arc<Vec<Rejection>> {
        self.rejections.load_full()
    }

    /// Loads every `*.wasm` in `dir`, in file-name order. A file that fails,
    /// or claims a method an earlier file already claimed, is rejected with
    /// its reason; the others load.
    pub async fn load_dir(&self, runtime: &Runtime, dir: &Path) -> anyhow::Result<()> {
        let mut files = Vec::new();
        match std::fs::read_dir(dir) {
            Ok(entries) => {
                for entry in entries {
                    let path = entry?.path();
                    if path.extension().is_some_and(|ext| ext == "wasm") {
                        files.push(path);
                    }
                }
            }
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                tracing::warn!(dir = %dir.display(), "the strategy directory does not exist; run `cargo xtask strategies`");
            }
            Err(err) => {
                return Err(
                    anyhow::Error::new(err).context(format!("cannot read {}", dir.display()))
                );
            }
        }
        files.sort();

        let mut strategies = BTreeMap::new();
        let mut rejections = Vec::new();
        for file in files {
            match load_file(runtime, &file).await {
                Ok(strategy) => {
                    if let Some(existing) = strategies.get(&*strategy.method) {
                        let existing: &Arc<Strategy> = existing;
                        rejections.push(reject(
                            &file,
                            Some(strategy.sha256.clone()),
                            format!(
                                "method {} is already served by {}",
                                strategy.method,
                                existing.file.display()
                            ),
                        ));
                    } else {
                        tracing::info!(method = %strategy.method, file = %file.display(), "strategy loaded");
                        strategies.insert(strategy.method.to_string(), Arc::new(strategy));
                    }
                }
                Err(rejection) => rejections.push(rejection),
            }
        }
        self.strategies.store(Arc::new(strategies));
        self.rejections.store(Arc::new(rejections));
        Ok(())
    }
}

/// Reads, compiles, checks and describes one component file.
pub async fn load_file(runtime: &Runtime, file: &Path) -> Result<Strategy, Rejection> {
    let bytes = tokio::fs::read(file)
        .await
        .map_err(|err| reject(file, None, format!("cannot read it: {err}")))?;
    let sha256 = hex::encode(Sha256::digest(&bytes));
    let failed = |err: anyhow::Error| reject(file, Some(sha256.clone()), format!("{err:#}"));
    let component = runtime
        .compile(bytes)
        .await
        .map_err(|err| failed(err.context("not a valid component")))?;
    let (pre, descriptor) = runtime.prepare(&component).await.map_err(failed)?;
    let method = descriptor.method.trim().to_ascii_uppercase();
    if method.is_empty() {
        return Err(failed(anyhow::anyhow!(
            "describe() returned an empty method name"
        )));
    }
    Ok(Strategy {
        method: Arc::from(method),
        summary: descriptor.summary,
        world: "issuer",
        file: file.to_path_buf(),
        sha256,
        loaded_at: Utc::now(),
        pre,
    })
}

fn reject(file: &Path, sha256: Option<String>, reason: String) -> Rejection {
    tracing::warn!(file = %file.display(), %reason, "strategy rejected");
    Rejection {
        file: file.to_path_buf(),
        sha256,
        reason,
        at: Utc::now(),
    }
}
