//! `GET /`: the console, the page a person watches a run on. Plain HTML,
//! CSS and JavaScript compiled into the binary (nothing is built or
//! fetched), reading the same JSON routes as everyone else.

use axum::Router;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::envelope::{ApiError, AppPath};
use crate::lab::Lab;

/// The page and its assets: name, content type, bytes. The charts are
/// uPlot's, vendored once for the console and the load reports.
const ASSETS: [(&str, &str, &str); 5] = [
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/console/console.js"),
    ),
    (
        "console.css",
        "text/css; charset=utf-8",
        include_str!("../../assets/console/console.css"),
    ),
    (
        "outcomes.css",
        "text/css; charset=utf-8",
        include_str!("../../assets/console/outcomes.css"),
    ),
    (
        "uPlot.iife.min.js",
        "text/javascript; charset=utf-8",
        include_str!("../../../vendor/uplot/uPlot.iife.min.js"),
    ),
    (
        "uPlot.min.css",
        "text/css; charset=utf-8",
        include_str!("../../../vendor/uplot/uPlot.min.css"),
    ),
];

const PAGE: &str = include_str!("../../assets/console/index.html");

pub fn router() -> Router<Lab> {
    Router::new()
        .route("/", get(page))
        .route("/console/{asset}", get(asset))
}

async fn page() -> Response {
    serve("text/html; charset=utf-8", PAGE)
}

async fn asset(AppPath(name): AppPath<String>) -> Response {
    match ASSETS.iter().find(|(known, _, _)| *known == name) {
        Some((_, content_type, body)) => serve(content_type, body),
        None => ApiError::not_found(format!("the console has no asset {name:?}")).into_response(),
    }
}

/// A new build of the server may change any asset: the browser asks again
/// each time rather than keep an old script next to a new page.
fn serve(content_type: &'static str, body: &'static str) -> Response {
    (
        [(CONTENT_TYPE, content_type), (CACHE_CONTROL, "no-cache")],
        body,
    )
        .into_response()
}
