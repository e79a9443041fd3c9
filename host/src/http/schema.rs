//! The pieces of the OpenAPI document the handlers' own annotations use:
//! the envelope's two variants ([`Success`], and the schema of every
//! [`ApiError`], narrowed to an issue's refusals by [`refusal`]), the
//! coupon path parameter (also the handlers' extractor of it), the failures
//! of a component call or of the database.

use std::borrow::Cow;
use std::collections::BTreeMap;

use utoipa::openapi::schema::{AllOfBuilder, ObjectBuilder, Schema, Type};
use utoipa::openapi::{Ref, RefOr, Response};
use utoipa::{IntoParams, IntoResponses, PartialSchema, ToSchema};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::envelope::{ApiError, AppPath, ErrorBody, positive};
use crate::outcome::Outcome;

/// The path parameter of every `/coupons/{couponId}/...` route, as the
/// document describes it and as the handlers take it: a positive id, or a
/// 400 in the envelope.
#[derive(IntoParams)]
#[into_params(names("couponId"), parameter_in = Path)]
pub struct CouponPath(
    /// The coupon's id, a positive integer (anything else is a 400).
    #[param(value_type = i64, minimum = 1)]
    pub u64,
);

impl<S: Send + Sync> FromRequestParts<S> for CouponPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        let AppPath(id) = AppPath::<i64>::from_request_parts(parts, state).await?;
        positive("couponId", id).map(CouponPath)
    }
}

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
        failure(Ref::from_schema_name(ErrorBody::name()))
            .description(Some(
                "The envelope of a failed answer; `error.status` is the HTTP status.",
            ))
            .into()
    }
}

/// The envelope of an issue request refused as one of `outcomes` (all of
/// one status): `error.outcome` is there, and names which.
pub fn refusal(outcomes: &[Outcome]) -> RefOr<Schema> {
    let names: Vec<&str> = outcomes.iter().map(|o| o.name()).collect();
    let outcome = ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(names));
    let named = ObjectBuilder::new()
        .property("outcome", outcome)
        .required("outcome");
    let error = AllOfBuilder::new()
        .item(Ref::from_schema_name(ErrorBody::name()))
        .item(named);
    failure(error).into()
}

/// The envelope of an error that is no refusal of an issue request:
/// `error.outcome` is absent.
pub fn no_refusal() -> RefOr<Schema> {
    let absent = ObjectBuilder::new().schema_type(Type::Null);
    let unnamed = ObjectBuilder::new().property("outcome", absent);
    let error = AllOfBuilder::new()
        .item(Ref::from_schema_name(ErrorBody::name()))
        .item(unnamed);
    failure(error).into()
}

/// The error variant of the envelope with `error` as its error.
fn failure(error: impl Into<RefOr<Schema>>) -> ObjectBuilder {
    ObjectBuilder::new()
        .property("success", boolean(false))
        .property("response", null())
        .property("error", error)
        .required("success")
        .required("response")
        .required("error")
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

/// What a route about one coupon answers when no such coupon exists (a
/// canary's scratch coupon included).
#[derive(utoipa::IntoResponses)]
#[expect(
    dead_code,
    reason = "it describes responses in the document; handlers answer ApiError"
)]
pub enum UnknownCoupon {
    /// The coupon does not exist.
    #[response(status = 404)]
    NotFound(ApiError),
}

/// What a route about one coupon whose only input is the id in its path
/// ([`CouponPath`]) answers when that id is refused: not a positive integer
/// (400), or no such coupon ([`UnknownCoupon`]).
pub struct CouponId;

impl IntoResponses for CouponId {
    fn responses() -> BTreeMap<String, RefOr<Response>> {
        let mut responses = NotPositive::responses();
        responses.extend(UnknownCoupon::responses());
        responses
    }
}

/// The 400 of [`CouponId`].
#[derive(IntoResponses)]
#[expect(
    dead_code,
    reason = "it describes responses in the document; handlers answer ApiError"
)]
enum NotPositive {
    #[response(
        status = 400,
        description = "A coupon id that is not a positive integer"
    )]
    CouponId(ApiError),
}

/// What any route may answer: the server failed while answering (its
/// handler panicked, and `run_to_end` answered for it).
#[derive(utoipa::IntoResponses)]
#[expect(
    dead_code,
    reason = "it describes responses in the document; handlers answer ApiError"
)]
pub enum ServerFailed {
    /// The server failed while answering.
    #[response(status = 500)]
    Failed(ApiError),
}

/// What a route of the lab's own tables answers when it cannot: the
/// database unavailable, or the server failing while answering.
#[derive(utoipa::IntoResponses)]
#[expect(
    dead_code,
    reason = "it describes responses in the document; handlers answer ApiError"
)]
pub enum DatabaseFailed {
    /// The database is unavailable.
    #[response(status = 503)]
    Unavailable(ApiError),
    /// The server failed while answering.
    #[response(status = 500)]
    Failed(ApiError),
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
