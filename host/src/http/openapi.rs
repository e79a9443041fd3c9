//! `GET /lab/openapi.json`: the OpenAPI 3.1 document of the `/lab` API,
//! generated from the handlers' own request and response types
//! (`#[utoipa::path]` on each handler, `ToSchema` on each type).
//!
//! The document is answered as plain JSON, not inside the envelope: it is
//! the description of the envelope, and tools read it as it is.
//!
//! The envelope is described by its two variants (in [`super::schema`]):
//! `Success`, what an [`Answer`] writes (one schema per route, its answer
//! in `response`), and `ErrorEnvelope`, what every [`ApiError`] becomes.

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use utoipa::OpenApi;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{OpenApi as Document, RefOr};

#[cfg(doc)]
use super::envelope::Answer;
use super::envelope::{ApiError, ErrorBody};
use super::{
    coupons, data, drop, gate, issue, members, reports, results, strategies, traces, write_behind,
};
use crate::lab::Lab;
use crate::recorder::RequestSummary;
use crate::runtime::SqlEngine as Engine;
use crate::traces::anomalies::Anomaly;

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/openapi.json", get(document))
}

/// This document. Plain JSON, not in the envelope: it is what describes the
/// envelope. An issue request's `method` is one of the methods loaded when
/// the document is read (they change as components are dropped in).
#[utoipa::path(
    get,
    path = "/lab/openapi.json",
    operation_id = "openapi",
    tag = "openapi",
    responses(
        (status = 200, description = "This document, as plain JSON (not in the envelope)", body = Object),
    )
)]
async fn document(State(lab): State<Lab>) -> axum::Json<Document> {
    let mut document = ApiDoc::openapi();
    let loaded: Vec<String> = lab.registry.strategies().keys().cloned().collect();
    name_the_methods(&mut document, &loaded);
    axum::Json(document)
}

/// Narrows the issue body's `method` to `methods` (the server also takes
/// them in any case and with spaces around; the document lists each once).
/// With none loaded, every method is refused and the property stays open.
fn name_the_methods(document: &mut Document, methods: &[String]) {
    if methods.is_empty() {
        return;
    }
    let body = document
        .components
        .as_mut()
        .and_then(|components| components.schemas.get_mut("IssueBody"));
    let Some(RefOr::T(Schema::Object(body))) = body else {
        return;
    };
    if let Some(RefOr::T(Schema::Object(method))) = body.properties.get_mut("method") {
        method.enum_values = Some(methods.iter().map(|m| m.as_str().into()).collect());
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "couponlab",
        description = "The lab server's `/lab` API. Every answer but this document is an \
                       envelope: `{\"success\": true, \"response\": {...}, \"error\": null}` or \
                       `{\"success\": false, \"response\": null, \"error\": {\"message\": \"...\", \
                       \"status\": 409}}`."
    ),
    paths(
        members::create,
        coupons::create,
        coupons::list,
        issue::issue,
        results::result,
        traces::traces,
        write_behind::reconcile,
        drop::seed,
        drop::cancel,
        gate::read,
        gate::switch,
        data::reset,
        strategies::list,
        reports::list,
        reports::file,
        document,
    ),
    // The result's parts the host fills in the contract's generic result:
    // utoipa lists a generic type's own fields' schemas, not its arguments'.
    components(schemas(ApiError, ErrorBody, RequestSummary, Engine, Anomaly))
)]
pub struct ApiDoc;
