//! `GET /lab/reports`: the load test reports in the reports directory
//! (`COUPONLAB_REPORTS_DIR`), one directory a run; `GET
//! /lab/reports/{run}/{file}`: one file of a run as it was written, for the
//! console to open.
//!
//! A run and a file are single names inside that directory: a name that
//! could climb out of it (`..`, a separator, a hidden name) is a 400, and
//! a symbolic link leading out of it is a 404, as if there were nothing.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header::{CONTENT_SECURITY_POLICY, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::{DateTime, Utc};
use serde::Serialize;
use utoipa::ToSchema;

use super::envelope::{Answer, ApiError, AppPath};
use super::schema::Success;
use crate::lab::Lab;

/// The file of a run the console opens.
const HTML: &str = "report.html";
/// The file whose first line (`# title`) names the run.
const MARKDOWN: &str = "report.md";

pub fn router() -> Router<Lab> {
    Router::new()
        .route("/lab/reports", get(list))
        .route("/lab/reports/{run}/{file}", get(file))
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Reports {
    /// The reports directory, as configured.
    directory: String,
    /// Newest first.
    reports: Vec<Report>,
}

/// One run's directory.
#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct Report {
    /// The directory's name (`cargo xtask loadtest` names it by UTC time).
    run: String,
    /// The report's title, from the first line of its report.md.
    title: Option<String>,
    /// `report.html` when the run has one.
    html: Option<String>,
    /// Every file of the run, by name.
    files: Vec<String>,
    modified_at: DateTime<Utc>,
}

/// The load test reports, newest first.
#[utoipa::path(
    get,
    path = "/lab/reports",
    operation_id = "reports",
    tag = "reports",
    responses(
        (status = 200, description = "The runs in the reports directory (none when it does not exist)", body = Success<Reports>),
        (status = 500, description = "The directory could not be read", body = ApiError),
    )
)]
async fn list(State(lab): State<Lab>) -> Result<Answer<Reports>, ApiError> {
    let directory = lab.config.reports_dir.clone();
    let reports = tokio::task::spawn_blocking(move || runs(&directory))
        .await
        .map_err(|err| unreadable(&lab.config.reports_dir, err))?
        .map_err(|err| unreadable(&lab.config.reports_dir, err))?;
    Ok(Answer(
        StatusCode::OK,
        Reports {
            directory: lab.config.reports_dir.display().to_string(),
            reports,
        },
    ))
}

fn unreadable(directory: &Path, err: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("cannot read {}: {err}", directory.display()),
    )
}

/// Every run directory in `directory`; none when it does not exist yet
/// (no load test has run).
fn runs(directory: &Path) -> std::io::Result<Vec<Report>> {
    let entries = match std::fs::read_dir(directory) {
        Ok(entries) => entries,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let mut reports = Vec::new();
    for entry in entries {
        let entry = entry?;
        let Ok(run) = entry.file_name().into_string() else {
            continue;
        };
        if !entry.file_type()?.is_dir() || plain_name(&run).is_err() {
            continue;
        }
        let mut files: Vec<String> = std::fs::read_dir(entry.path())?
            .filter_map(Result::ok)
            .filter(|f| f.file_type().is_ok_and(|t| t.is_file()))
            .filter_map(|f| f.file_name().into_string().ok())
            .filter(|name| plain_name(name).is_ok())
            .collect();
        files.sort();
        let title = std::fs::read_to_string(entry.path().join(MARKDOWN))
            .ok()
            .and_then(|md| Some(md.lines().next()?.strip_prefix("# ")?.to_string()));
        let modified = entry
            .metadata()?
            .modified()
            .unwrap_or(SystemTime::UNIX_EPOCH);
        reports.push(Report {
            run,
            title,
            html: files.iter().any(|f| f == HTML).then(|| HTML.to_string()),
            files,
            modified_at: modified.into(),
        });
    }
    reports.sort_by(|a, b| (b.modified_at, &b.run).cmp(&(a.modified_at, &a.run)));
    Ok(reports)
}

/// One file of a run: report.html, chart.svg, report.md, results.json.
#[utoipa::path(
    get,
    path = "/lab/reports/{run}/{file}",
    operation_id = "reportFile",
    tag = "reports",
    params(
        ("run" = String, Path, pattern = r"^[^./\\\u0000][^/\\\u0000]*$",
            description = "A run's directory name, as the listing gives it: one plain name"),
        ("file" = String, Path, pattern = r"^[^./\\\u0000][^/\\\u0000]*$",
            description = "A file of that run, as the listing gives it: one plain name"),
    ),
    responses(
        // Each kind of file as `content_type` serves it. A `.json` file has
        // no schema: it is whatever the run wrote (an object, or k6's one
        // JSON value a line), and a `.png` is bytes; the rest is text.
        (status = 200, description = "The file as it was written, not in the envelope, typed by its kind: \
            `.html` text/html, `.svg` image/svg+xml, `.md` text/markdown, `.json` application/json \
            (the JSON the run wrote, as it is), `.png` image/png, any other text/plain", content(
            (String = "text/html"), (String = "image/svg+xml"), (String = "text/markdown"),
            ("application/json"), ("image/png"), (String = "text/plain"),
        )),
        (status = 400, description = "A name that is not a single plain name (`..`, a separator, a hidden name)", body = ApiError),
        (status = 404, description = "No such run or file", body = ApiError),
    )
)]
async fn file(
    State(lab): State<Lab>,
    AppPath((run, file)): AppPath<(String, String)>,
) -> Result<Response, ApiError> {
    plain_name(&run)?;
    plain_name(&file)?;
    let missing = || ApiError::not_found(format!("no report file {run}/{file}"));
    let path = inside(&lab.config.reports_dir, &run, &file)
        .await
        .ok_or_else(missing)?;
    let body = tokio::fs::read(&path).await.map_err(|_| missing())?;
    Ok((
        [
            (CONTENT_TYPE, content_type(&file)),
            (X_CONTENT_TYPE_OPTIONS, "nosniff"),
            // A report is a document: it may style itself and show its
            // own images, and run nothing.
            (
                CONTENT_SECURITY_POLICY,
                "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:",
            ),
        ],
        body,
    )
        .into_response())
}

/// Refuses a name that is not one plain entry of a directory.
fn plain_name(name: &str) -> Result<(), ApiError> {
    let plain = !name.is_empty() && !name.starts_with('.') && !name.contains(['/', '\\', '\0']);
    if plain {
        Ok(())
    } else {
        Err(ApiError::bad_request(format!(
            "{name:?} is not a plain file name"
        )))
    }
}

/// `directory/run/file` if it is a file and, links followed, still inside
/// `directory`.
async fn inside(directory: &Path, run: &str, file: &str) -> Option<PathBuf> {
    let root = tokio::fs::canonicalize(directory).await.ok()?;
    let path = tokio::fs::canonicalize(root.join(run).join(file))
        .await
        .ok()?;
    let is_file = tokio::fs::metadata(&path).await.ok()?.is_file();
    (is_file && path.starts_with(&root)).then_some(path)
}

fn content_type(file: &str) -> &'static str {
    match file.rsplit_once('.').map(|(_, extension)| extension) {
        Some("html") => "text/html; charset=utf-8",
        Some("svg") => "image/svg+xml",
        Some("md") => "text/markdown; charset=utf-8",
        Some("json") => "application/json",
        Some("png") => "image/png",
        _ => "text/plain; charset=utf-8",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_single_plain_name_is_accepted() {
        for name in ["report.html", "2026-01-01T10-00-00Z", "k6 run.json"] {
            assert!(plain_name(name).is_ok(), "{name}");
        }
        for name in ["", "..", ".", ".hidden", "a/b", "..\\x", "a\0b"] {
            let err = plain_name(name).unwrap_err();
            assert_eq!(err.status, StatusCode::BAD_REQUEST, "{name}");
        }
    }
}
