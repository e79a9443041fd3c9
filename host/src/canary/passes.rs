//! The components whose canary passed, remembered in the lab's database by
//! the sha256 of their file and the engine settings it ran under, so a
//! restart (or another host sharing the database) with the same settings
//! does not run it again, and one with others does.

use sqlx::MySqlPool;

use crate::runtime::canary_report::CanaryReport;
#[cfg(doc)]
use crate::runtime::sql::engine::Engine;

/// The report of the canary `sha256` passed here before under `settings`
/// ([`Engine::settings_text`]), if it did.
pub async fn remembered(
    db: &MySqlPool,
    sha256: &str,
    settings: &str,
) -> anyhow::Result<Option<CanaryReport>> {
    let report: Option<String> = sqlx::query_scalar(
        "SELECT report FROM canary_passes WHERE sha256 = ? AND engine_settings = ?",
    )
    .bind(sha256)
    .bind(settings)
    .fetch_optional(db)
    .await?;
    let Some(report) = report else {
        return Ok(None);
    };
    let mut report: CanaryReport = serde_json::from_str(&report)?;
    report.remembered = true;
    Ok(Some(report))
}

/// Remembers that `sha256`, serving `method`, passed its canary under
/// `settings`.
pub async fn remember(
    db: &MySqlPool,
    (sha256, settings): (&str, &str),
    method: &str,
    report: &CanaryReport,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO canary_passes (sha256, engine_settings, method, report) VALUES (?, ?, ?, ?) \
         ON DUPLICATE KEY UPDATE method = VALUES(method), report = VALUES(report), passed_at = CURRENT_TIMESTAMP(3)",
    )
    .bind(sha256)
    .bind(settings)
    .bind(method)
    .bind(serde_json::to_string(report)?)
    .execute(db)
    .await?;
    Ok(())
}
