//! The components whose canary passed, remembered in the lab's database by
//! the sha256 of their file, so a restart (or another host sharing the
//! database) does not run it again.

use sqlx::MySqlPool;

use crate::runtime::canary_report::CanaryReport;

/// The report of the canary `sha256` passed here before, if it did.
pub async fn remembered(db: &MySqlPool, sha256: &str) -> anyhow::Result<Option<CanaryReport>> {
    let report: Option<String> =
        sqlx::query_scalar("SELECT report FROM canary_passes WHERE sha256 = ?")
            .bind(sha256)
            .fetch_optional(db)
            .await?;
    let Some(report) = report else {
        return Ok(None);
    };
    let mut report: CanaryReport = serde_json::from_str(&report)?;
    report.remembered = true;
    Ok(Some(report))
}

/// Remembers that `sha256`, serving `method`, passed its canary.
pub async fn remember(
    db: &MySqlPool,
    sha256: &str,
    method: &str,
    report: &CanaryReport,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO canary_passes (sha256, method, report) VALUES (?, ?, ?) \
         ON DUPLICATE KEY UPDATE method = VALUES(method), report = VALUES(report), passed_at = CURRENT_TIMESTAMP(3)",
    )
    .bind(sha256)
    .bind(method)
    .bind(serde_json::to_string(report)?)
    .execute(db)
    .await?;
    Ok(())
}
