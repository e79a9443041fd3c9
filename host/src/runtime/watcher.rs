//! Hot reload: watches the strategy directory and hands every changed
//! `*.wasm` to its owner (the lab, which passes each to
//! [`Registry::reload_file`](super::Registry::reload_file)).
//!
//! Events are debounced: a file is reloaded once it has been quiet for
//! [`QUIET`], so a copy in progress is read whole (and a half-written file
//! that slips through is rejected, then reloaded when its last write lands).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use notify::{Event, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::registry::is_component;

/// How long a file must be quiet before it is reloaded.
const QUIET: Duration = Duration::from_millis(50);

/// Stops watching when dropped.
pub struct DirectoryWatcher {
    _watcher: RecommendedWatcher,
    task: JoinHandle<()>,
}

impl Drop for DirectoryWatcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches `dir`, and calls `reload` with the files that changed once they
/// are quiet. `reload` answers `None` once its owner is gone (the owner
/// holds the watcher, so the watcher may hold it only weakly), which ends
/// the watch.
pub fn watch<Reload>(
    dir: &Path,
    reload: impl Fn(Vec<PathBuf>) -> Option<Reload> + Send + 'static,
) -> anyhow::Result<DirectoryWatcher>
where
    Reload: Future<Output = ()> + Send,
{
    let (changed, mut changes) = mpsc::unbounded_channel::<PathBuf>();
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<Event>| match event {
            Ok(event) => {
                for path in event.paths.into_iter().filter(|p| is_component(p)) {
                    let _ = changed.send(path);
                }
            }
            Err(err) => tracing::warn!(error = %err, "strategy directory watch error"),
        })
        .context("cannot create a file watcher")?;
    watcher
        .watch(dir, RecursiveMode::NonRecursive)
        .with_context(|| format!("cannot watch {}", dir.display()))?;

    let task = tokio::spawn(async move {
        let mut pending = BTreeSet::new();
        while let Some(path) = changes.recv().await {
            pending.insert(path);
            while let Ok(Some(path)) = tokio::time::timeout(QUIET, changes.recv()).await {
                pending.insert(path);
            }
            let changed = std::mem::take(&mut pending).into_iter().collect();
            let Some(reloading) = reload(changed) else {
                return;
            };
            reloading.await;
        }
    });
    Ok(DirectoryWatcher {
        _watcher: watcher,
        task,
    })
}
