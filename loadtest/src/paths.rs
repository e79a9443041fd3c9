//! Where things are: the repository, cargo's target directory with the
//! release binaries `cargo xtask` built beside this one, the installed
//! components, and a new report's directory.

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The repository root (the parent of `loadtest/`).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the load runner lives in the repository")
        .to_path_buf()
}

/// Where cargo builds, as xtask reads it: `CARGO_TARGET_DIR` when set,
/// else `target/`.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root().join("target"), PathBuf::from)
}

/// A release binary of the workspace (`couponlab`, `native-twin`).
pub fn release_binary(name: &str) -> PathBuf {
    target_dir().join("release").join(name)
}

/// The same binary built with line tables (the root `Cargo.toml`'s
/// `profiling` profile), which `cargo xtask bench --instructions` builds:
/// callgrind's counts are split by each line's source file.
pub fn profiling_binary(name: &str) -> PathBuf {
    target_dir().join("profiling").join(name)
}

/// Where the components are installed: `COUPONLAB_STRATEGY_DIR`, as the
/// server reads it, or `strategies/dist`.
pub fn strategy_dir() -> PathBuf {
    root().join(
        std::env::var_os("COUPONLAB_STRATEGY_DIR").unwrap_or_else(|| "strategies/dist".into()),
    )
}

/// `loadtest/reports/<UTC time><suffix>/`, where the console lists a run.
pub fn new_report_dir(suffix: &str) -> PathBuf {
    root()
        .join("loadtest")
        .join("reports")
        .join(format!("{}{suffix}", timestamp()))
}

/// `2026-11-29T10-15-00Z`: UTC, sortable, safe in a path.
fn timestamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}-{:02}-{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}
