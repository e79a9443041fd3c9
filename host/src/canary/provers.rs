//! Who proves which file, and when: each file that needs a canary gets a
//! prover of its own, and the provers run side by side ([`AT_ONCE`] canaries
//! at a time), so a component on trial never keeps the others waiting
//! longer than one canary's bound. A file that changes while its canary runs
//! is looked at again once that canary ends. A canary that reached no
//! verdict (a dependency down, the scratch coupon deleted) leaves its file
//! awaiting and is run again after [`RETRY_AFTER`], for as long as it takes:
//! a component is never refused because Redis or the database was away.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Semaphore;

use crate::lab::Lab;

/// Canaries that run at once: enough that a slow one holds nobody back,
/// few enough that their bursts do not crowd two cores.
const AT_ONCE: usize = 4;
/// The pause before a canary without a verdict runs again.
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(2);

/// How a file's turn ended.
pub enum Turn {
    /// Served, refused, unchanged or removed: nothing left to do.
    Settled,
    /// No verdict: the canary is to run again, for this reason.
    Inconclusive(String),
}

pub struct Provers {
    /// Files with a prover, each with whether it changed since its prover
    /// last looked at it.
    running: Mutex<HashMap<PathBuf, bool>>,
    slots: Semaphore,
}

impl Default for Provers {
    fn default() -> Self {
        Provers {
            running: Mutex::default(),
            slots: Semaphore::new(AT_ONCE),
        }
    }
}

impl Provers {
    /// Whether no file is being proved or waits to be.
    pub fn is_idle(&self) -> bool {
        self.running.lock().is_empty()
    }

    /// Clears `file`'s mark of a change: its prover is about to look at it
    /// again anyway.
    fn take_change(&self, file: &PathBuf) -> bool {
        self.running
            .lock()
            .get_mut(file)
            .is_some_and(std::mem::take)
    }

    /// Ends `file`'s prover unless the file changed meanwhile (answers
    /// whether it goes on).
    fn finish_unless_changed(&self, file: &PathBuf) -> bool {
        let mut running = self.running.lock();
        match running.get_mut(file) {
            Some(changed) if *changed => {
                *changed = false;
                true
            }
            _ => {
                running.remove(file);
                false
            }
        }
    }
}

/// Brings the registry in line with `file` in the background, beside the
/// other files; a file already being looked at is looked at again when its
/// prover is done.
pub fn schedule(provers: &Arc<Provers>, lab: &Lab, file: PathBuf) {
    {
        let mut running = provers.running.lock();
        if let Some(changed) = running.get_mut(&file) {
            *changed = true;
            return;
        }
        running.insert(file.clone(), false);
    }
    // The prover holds the lab only while it works: a server that stops
    // ends its provers.
    let (owner, provers) = (lab.downgrade(), provers.clone());
    tokio::spawn(async move {
        loop {
            let Some(lab) = owner.upgrade() else {
                return;
            };
            let turn = {
                let Ok(_slot) = provers.slots.acquire().await else {
                    return;
                };
                super::reload(&lab, &file).await
            };
            if let Turn::Inconclusive(reason) = turn {
                tracing::warn!(file = %file.display(), %reason, "the canary reached no verdict; it runs again shortly, the file awaiting meanwhile");
                drop(lab);
                tokio::time::sleep(RETRY_AFTER).await;
                provers.take_change(&file);
                continue;
            }
            if !provers.finish_unless_changed(&file) {
                return;
            }
        }
    });
}
