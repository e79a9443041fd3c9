//! Hot reload: watches the strategy directory and hands every changed
//! `*.wasm` to its owner (the lab, which hands each to its canary's
//! prover, and that to [`Registry::examine`](super::Registry::examine)).
//!
//! Only events that can change a file's content or presence count: reading
//! a file (the registry reads each it examines) must not wake the watcher
//! again. Every path is handed over as the watched directory joined with
//! the file's name, the form the first load uses too, so one file is always
//! one path.
//!
//! Events are debounced: a file is reloaded once it has been quiet for
//! [`QUIET`], so a copy in progress is read whole (and a half-written file
//! that slips through is rejected, then reloaded when its last write lands).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use notify::event::{AccessKind, AccessMode, ModifyKind};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};
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

/// Whether `kind` may have changed a file's content or presence: written
/// and closed, created, renamed, removed. Opening, reading and closing a
/// file unwritten, and a change of its metadata alone, may not.
fn may_change_a_file(kind: &EventKind) -> bool {
    match kind {
        EventKind::Create(_) | EventKind::Remove(_) | EventKind::Any | EventKind::Other => true,
        EventKind::Modify(modify) => !matches!(modify, ModifyKind::Metadata(_)),
        EventKind::Access(access) => matches!(access, AccessKind::Close(AccessMode::Write)),
    }
}

/// Watches `dir` (in the form its paths are to take), and calls
/// `changed` with the files that changed once they are quiet. `changed`
/// answers false once its owner is gone (the owner holds the watcher, so
/// the watcher may hold it only weakly), which ends the watch.
pub fn watch(
    dir: &Path,
    changed: impl Fn(Vec<PathBuf>) -> bool + Send + 'static,
) -> anyhow::Result<DirectoryWatcher> {
    let (change, mut changes) = mpsc::unbounded_channel::<PathBuf>();
    let watched = dir.to_path_buf();
    let mut watcher =
        notify::recommended_watcher(move |event: notify::Result<Event>| match event {
            Ok(event) if may_change_a_file(&event.kind) => {
                for path in event.paths.into_iter().filter(|p| is_component(p)) {
                    if let Some(name) = path.file_name() {
                        let _ = change.send(watched.join(name));
                    }
                }
            }
            Ok(_) => {}
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
            if !changed(std::mem::take(&mut pending).into_iter().collect()) {
                return;
            }
        }
    });
    Ok(DirectoryWatcher {
        _watcher: watcher,
        task,
    })
}
