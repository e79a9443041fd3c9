//! The components whose canary passed, remembered in the lab's database by
//! the sha256 of their file and the engine settings it ran under, so a
//! restart (or another host sharing the database) with the same settings
//! does not run it again, and one with others does.

use crate::db::on_engine;
use crate::db_target::Pool;
#[cfg(doc)]
use crate::runtime::SqlEngine as Engine;
use crate::runtime::canary_report::CanaryReport;

/// The report of the canary `sha256` passed here before under `settings`
/// ([`Engine::settings_text`]), if it did.
pub async fn remembered(
    db: &Pool,
    sha256: &str,
    settings: &str,
) -> anyhow::Result<Option<CanaryReport>> {
    let statement = "SELECT report FROM canary_passes WHERE sha256 = ? AND engine_settings = ?";
    let report: Option<String> = on_engine!(db, statement, |db, sql| {
        sqlx::query_scalar(sql)
            .bind(sha256)
            .bind(settings)
            .fetch_optional(db)
            .await
    })?;
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
    db: &Pool,
    (sha256, settings): (&str, &str),
    method: &str,
    report: &CanaryReport,
) -> anyhow::Result<()> {
    let insert =
        "INSERT INTO canary_passes (sha256, engine_settings, method, report) VALUES (?, ?, ?, ?)";
    let report = serde_json::to_string(report)?;
    on_engine!(
        db,
        mysql: &format!("{insert} ON DUPLICATE KEY UPDATE method = VALUES(method), report = VALUES(report), passed_at = CURRENT_TIMESTAMP(3)"),
        postgres: &format!("{insert} ON CONFLICT (sha256, engine_settings) DO UPDATE SET method = EXCLUDED.method, report = EXCLUDED.report, passed_at = CURRENT_TIMESTAMP(3)"),
        |db, sql| sqlx::query(sql)
            .bind(sha256)
            .bind(settings)
            .bind(method)
            .bind(&report)
            .execute(db)
            .await
            .map(drop)
    )?;
    Ok(())
}
