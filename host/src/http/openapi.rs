//! `GET /lab/openapi.json`: the OpenAPI 3.1 document of the `/lab` API,
//! generated from the handlers' own request and response types
//! (`#[utoipa::path]` on each handler, `ToSchema` on each type).
//!
//! The document is answered as plain JSON, not inside the envelope: it is
//! the description of the envelope, and tools read it as it is.
//!
//! The envelope is described by its two variants: [`Success`], what an
//! [`Answer`] writes (one schema per route, its answer in `response`), and
//! `ErrorEnvelope`, what every [`ApiError`] becomes.

use std::borrow::Cow;

use axum::Router;
use axum::routing::get;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{IntoParams, OpenApi, PartialSchema, ToSchema};

#[cfg(doc)]
use super::envelope::Answer;
use super::envelope::{ApiError, ErrorBody};
use super::{coupons, data, drop, issue, members, results, strategies, write_behind};
use crate::lab::Lab;

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/openapi.json", get(document))
}

/// This document. Plain JSON, not in the envelope: it is what describes the
/// envelope.
#[utoipa::path(
    get,
    path = "/lab/openapi.json",
    operation_id = "openapi",
    tag = "openapi",
    responses(
        (status = 200, description = "This document, as plain JSON (not in the envelope)", body = Object),
    )
)]
async fn document() -> axum::Json<utoipa::openapi::OpenApi> {
    axum::Json(ApiDoc::openapi())
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
        issue::issue,
        results::result,
        write_behind::reconcile,
        drop::seed,
        drop::cancel,
        data::reset,
        strategies::list,
        document,
    ),
    components(schemas(ApiError, ErrorBody))
)]
pub struct ApiDoc;

/// The path parameter of every `/coupons/{couponId}/...` route.
#[derive(IntoParams)]
#[into_params(names("couponId"), parameter_in = Path)]
#[allow(dead_code)] // Only its description is used.
pub struct CouponPath(
    /// The coupon's id, a positive integer (anything else is a 400).
    i64,
);

/// The envelope of a successful answer (what `Answer` writes): the route's
/// answer in `response`.
#[derive(ToSchema)]
#[schema(as = Envelope)]
#[allow(dead_code)] // Only its schema is used.
pub struct Success<T> {
    /// Always true.
    #[schema(schema_with = always_true)]
    success: bool,
    response: T,
    /// Always null.
    #[schema(schema_with = null)]
    error: (),
}

/// The error variant of the envelope: `success` false, `response` null,
/// `error` the message and status.
impl PartialSchema for ApiError {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .description(Some(
                "The envelope of a failed answer; `error.status` is the HTTP status.",
            ))
            .property("success", boolean(false))
            .property("response", null())
            .property("error", Ref::from_schema_name(ErrorBody::name()))
            .required("success")
            .required("response")
            .required("error")
            .into()
    }
}

impl ToSchema for ApiError {
    fn name() -> Cow<'static, str> {
        "ErrorEnvelope".into()
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((ErrorBody::name().into_owned(), ErrorBody::schema()));
    }
}

/// What every route that calls a component may answer besides its own
/// refusals: the component's trap (what its compensation undid is in the
/// message) or the server failing while answering, and the component's
/// deadline.
#[derive(utoipa::IntoResponses)]
#[expect(
    dead_code,
    reason = "it describes responses in the document; handlers answer ApiError"
)]
pub enum ComponentFailed {
    /// The component trapped (an issue request's outcome is FAILED, and
    /// what its compensation undid is in the message), or the server
    /// failed while answering.
    #[response(status = 500)]
    Trapped(ApiError),
    /// The component ran past its deadline (an issue request's outcome is
    /// TIMED_OUT).
    #[response(status = 504)]
    TimedOut(ApiError),
}

fn boolean(value: bool) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::Boolean)
        .enum_values(Some([value]))
}

fn always_true() -> ObjectBuilder {
    boolean(true)
}

fn null() -> ObjectBuilder {
    ObjectBuilder::new().schema_type(Type::Null)
}

/// The schema of a `#[serde(flatten)]` `Option<T>` field (`schema_with`):
/// `T`'s fields, each optional, since the whole of `T` is left out when the
/// field is `None`. `T`'s own dependencies are inlined, so nothing it
/// refers to has to be listed elsewhere.
pub(crate) fn optional_fields<T: ToSchema>() -> Schema {
    let mut dependencies = Vec::new();
    T::schemas(&mut dependencies);
    let mut schema = serde_json::to_value(T::schema()).expect("a schema serializes");
    inline(&mut schema, &dependencies);
    if let Some(object) = schema.as_object_mut() {
        object.remove("required");
        let described = object.get("description").and_then(|d| d.as_str());
        let note = format!(
            "{} Left out as a whole when there is none.",
            described.unwrap_or("")
        );
        object.insert("description".into(), note.trim_start().into());
    }
    serde_json::from_value(schema).expect("a schema deserializes")
}

/// Replaces each `$ref` to one of `schemas` in `value` with the schema,
/// keeping what stands beside the `$ref` (its description).
fn inline(value: &mut serde_json::Value, schemas: &[(String, RefOr<Schema>)]) {
    let target = value
        .get("$ref")
        .and_then(|r| r.as_str())
        .and_then(|r| r.strip_prefix("#/components/schemas/"))
        .and_then(|name| schemas.iter().find(|(known, _)| known == name));
    if let Some((_, schema)) = target {
        let mut inlined = serde_json::to_value(schema).expect("a schema serializes");
        if let (Some(inlined), Some(beside)) = (inlined.as_object_mut(), value.as_object()) {
            let beside = beside.iter().filter(|(key, _)| *key != "$ref");
            inlined.extend(beside.map(|(key, v)| (key.clone(), v.clone())));
        }
        *value = inlined;
        inline(value, schemas);
        return;
    }
    match value {
        serde_json::Value::Object(object) => object.values_mut().for_each(|v| inline(v, schemas)),
        serde_json::Value::Array(items) => items.iter_mut().for_each(|v| inline(v, schemas)),
        _ => {}
    }
}
