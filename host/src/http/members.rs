//! `POST /lab/members`: create members in bulk.

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use serde::{Deserialize, Serialize};
use sqlx::{MySql, MySqlPool, PgPool, QueryBuilder};
use utoipa::ToSchema;

use super::envelope::{Answer, ApiError, AppJson, positive_up_to};
use super::integer::integer;
use super::schema::{DatabaseFailed, Success};
use crate::db::signed;
use crate::db_target::Pool;
use crate::lab::Lab;

/// Most members one request may create.
const MAX_MEMBERS: u64 = 1_000_000;
/// Rows per INSERT statement.
const CHUNK: u64 = 1_000;

pub fn router() -> Router<Lab> {
    Router::new().route("/lab/members", post(create))
}

#[derive(Deserialize, ToSchema)]
struct CreateMembers {
    /// How many members to create, 1 to 1,000,000.
    #[schema(minimum = 1, maximum = 1_000_000)]
    #[serde(deserialize_with = "integer")]
    count: i64,
}

#[derive(Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
#[schema(as = CreatedMembers)]
struct Created {
    /// Members created.
    count: u64,
    /// The first member's id. Members get consecutive ids unless another
    /// client inserts members at the same moment.
    first_id: u64,
    /// The last member's id.
    last_id: u64,
}

/// Create members in bulk.
#[utoipa::path(
    post,
    path = "/lab/members",
    operation_id = "createMembers",
    tag = "members",
    request_body = CreateMembers,
    responses(
        (status = 201, description = "The members were created", body = Success<Created>),
        (status = 400, description = "A malformed body, or a count out of range", body = ApiError),
        DatabaseFailed,
    )
)]
async fn create(
    State(lab): State<Lab>,
    AppJson(body): AppJson<CreateMembers>,
) -> Result<Answer<Created>, ApiError> {
    let count = positive_up_to("count", body.count, MAX_MEMBERS)?;
    let (first_id, last_id) = match lab.db() {
        Pool::MySql(db) => insert_mysql(db, count).await?,
        Pool::Postgres(db) => insert_postgres(db, count).await?,
    };
    Ok(Answer::created(Created {
        count,
        first_id,
        last_id,
    }))
}

/// Inserts `count` members, their ids one run: the first and the last.
async fn insert_mysql(db: &MySqlPool, count: u64) -> Result<(u64, u64), sqlx::Error> {
    let mut tx = db.begin().await?;
    // A Galera node hands out ids `wsrep_cluster_size` apart, whatever a
    // session asks, so that nodes inserting at once never take the same
    // one. Clients read the members as the run from the first id to the
    // last: there the ids are given, one apart, after the highest. Another
    // node inserting members at the same moment then fails its COMMIT (a
    // certification conflict, a 503) rather than either handing out ids no
    // member has.
    let step: i64 = sqlx::query_scalar("SELECT CAST(@@auto_increment_increment AS SIGNED)")
        .fetch_one(&mut *tx)
        .await?;
    let mut next_id = if step == 1 {
        None
    } else {
        let highest: Option<i64> =
            sqlx::query_scalar("SELECT id FROM members ORDER BY id DESC LIMIT 1 FOR UPDATE")
                .fetch_optional(&mut *tx)
                .await?;
        Some(highest.map_or(1, |id| id as u64 + 1))
    };
    let mut first_id = None;
    let mut last_id = 0;
    let mut left = count;
    while left > 0 {
        let rows = left.min(CHUNK);
        let first_of_chunk = match next_id.as_mut() {
            None => {
                let mut insert = QueryBuilder::<MySql>::new("INSERT INTO members (name) ");
                insert.push_values(0..rows, |mut row, _| {
                    row.push_bind("lab member");
                });
                // LAST_INSERT_ID() is the first id of a multi-row INSERT.
                insert.build().execute(&mut *tx).await?.last_insert_id()
            }
            Some(next) => {
                let mut insert = QueryBuilder::<MySql>::new("INSERT INTO members (id, name) ");
                insert.push_values(*next..*next + rows, |mut row, id| {
                    row.push_bind(signed(id)).push_bind("lab member");
                });
                insert.build().execute(&mut *tx).await?;
                std::mem::replace(next, *next + rows)
            }
        };
        first_id.get_or_insert(first_of_chunk);
        last_id = first_of_chunk + rows - 1;
        left -= rows;
    }
    tx.commit().await?;
    Ok((first_id.unwrap_or_default(), last_id))
}

/// [`insert_mysql`] for PostgreSQL, whose sequence gives a statement's
/// rows one run of ids only while no other statement takes ids from it:
/// the table is locked against other writers for the insert.
async fn insert_postgres(db: &PgPool, count: u64) -> Result<(u64, u64), sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query("LOCK TABLE members IN EXCLUSIVE MODE")
        .execute(&mut *tx)
        .await?;
    let (first_id, last_id): (i64, i64) = sqlx::query_as(
        "WITH inserted AS (INSERT INTO members (name) \
         SELECT 'lab member' FROM generate_series(1, $1) RETURNING id) \
         SELECT min(id), max(id) FROM inserted",
    )
    .bind(signed(count))
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok((first_id as u64, last_id as u64))
}
