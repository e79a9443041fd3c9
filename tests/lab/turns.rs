//! What tests share on this machine's servers, taken in turns that hold
//! across processes: file locks (`flock`) under `target/test-locks/`, so
//! the tests take turns alike whether one test binary runs them all
//! (`cargo test`) or a process runs each (`cargo nextest run`). A turn ends
//! when its guard is dropped, or when its process dies.

use std::fs::File;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A turn held: the lock file, open and locked.
pub struct Turn {
    _locked: File,
}

/// Where the lock files and markers are.
fn locks_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/test-locks")
}

fn lock_file(name: &str) -> File {
    let dir = locks_dir();
    std::fs::create_dir_all(&dir).expect("the lock directory can be made");
    File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(name))
        .expect("the lock file opens")
}

/// Waits for a turn at `name` shared with others that share it, none
/// holding it alone.
pub async fn shared(name: &'static str) -> Turn {
    locked(name, File::lock_shared).await
}

/// Waits for a turn at `name` alone.
pub async fn alone(name: &'static str) -> Turn {
    locked(name, File::lock).await
}

/// Waits, on a thread of its own, until `lock` of `name`'s file is granted.
async fn locked(name: &'static str, lock: fn(&File) -> std::io::Result<()>) -> Turn {
    tokio::task::spawn_blocking(move || {
        let file = lock_file(name);
        lock(&file).expect("the lock is granted");
        Turn { _locked: file }
    })
    .await
    .expect("the lock's thread ends")
}

/// The first of `names` free now, taken alone, waiting (at most `within`)
/// until one is.
pub async fn first_free(names: &[String], within: Duration) -> (usize, Turn) {
    let give_up = Instant::now() + within;
    loop {
        for (index, name) in names.iter().enumerate() {
            let file = lock_file(name);
            if file.try_lock().is_ok() {
                return (index, Turn { _locked: file });
            }
        }
        assert!(
            Instant::now() < give_up,
            "none of {names:?} was free within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Marks `name` done now unless it was marked within `within`; answers
/// whether it marked it (the caller is to do the work).
pub fn mark_unless_marked_within(name: &str, within: Duration) -> bool {
    let dir = locks_dir();
    let marker = dir.join(name);
    let recent = std::fs::metadata(&marker)
        .and_then(|meta| meta.modified())
        .is_ok_and(|at| at.elapsed().is_ok_and(|age| age < within));
    if recent {
        return false;
    }
    let _ = std::fs::create_dir_all(&dir);
    let _ = std::fs::write(&marker, b"");
    true
}
