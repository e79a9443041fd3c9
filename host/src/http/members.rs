//! `POST /lab/members`: create members in bulk.

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use serde::{Deserialize, Serialize};
use sqlx::{MySql, QueryBuilder};

use super::envelope::{Answer, ApiError, AppJson, positive_up_to};
use crate::lab::Lab;

/// Most members one request may create.
const MAX_MEMBERS: u64 = 1_000_000;
/// Rows per INSERT statement.
const CHUNK: u64 = 1_000;

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/members", post(create))
}

#[derive(Deserialize)]
struct CreateMembers {
    count: i64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Created {
    count: u64,
    /// Members get consecutive ids unless another client inserts members at
    /// the same moment.
    first_id: u64,
    last_id: u64,
}

async fn create(
    State(lab): State<Lab>,
    AppJson(body): AppJson<CreateMembers>,
) -> Result<Answer<Created>, ApiError> {
    let count = positive_up_to("count", body.count, MAX_MEMBERS)?;
    let mut tx = lab.db().begin().await?;
    let mut first_id = None;
    let mut last_id = 0;
    let mut left = count;
    while left > 0 {
        let rows = left.min(CHUNK);
        let mut insert = QueryBuilder::<MySql>::new("INSERT INTO members (name) ");
        insert.push_values(0..rows, |mut row, _| {
            row.push_bind("lab member");
        });
        let done = insert.build().execute(&mut *tx).await?;
        // LAST_INSERT_ID() is the first id of a multi-row INSERT.
        first_id.get_or_insert(done.last_insert_id());
        last_id = done.last_insert_id() + rows - 1;
        left -= rows;
    }
    tx.commit().await?;
    Ok(Answer(
        StatusCode::CREATED,
        Created {
            count,
            first_id: first_id.unwrap_or_default(),
            last_id,
        },
    ))
}
