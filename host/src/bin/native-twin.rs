//! `native-twin`: what the lab serves for `REDIS_LUA`, written natively, so
//! `cargo xtask bench` can measure how much of the lab's answer is the
//! method and how much is the lab. It answers
//! `POST /lab/coupons/{couponId}/issue` with the lab's envelope and does the
//! method's work and nothing else: one EVALSHA of `lua/reserve.lua` over one
//! multiplexed connection (`-1` warms the total from the database first),
//! then on a reservation the confirm step in its own transaction — INSERT,
//! guarded UPDATE, COMMIT — and SREM when the confirm fails. No wasm, no
//! recorder, no registry.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::Context;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use clap::Parser;
use couponlab::budget::{self, Stage};
use couponlab_contract::keys;
use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::mysql::{MySqlDatabaseError, MySqlPool, MySqlPoolOptions};
use sqlx::{MySql, Transaction};

const RESERVE: &str = include_str!("../../../lua/reserve.lua");
const ER_DUP_ENTRY: u16 = 1062;

/// Every call allocates its store, its instance's bookkeeping and its
/// replies; mimalloc's thread-local free lists serve that churn from both
/// cores without the contention of glibc's arenas.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(about = "REDIS_LUA done natively: the lab's reference point")]
struct Args {
    #[arg(long, default_value = "127.0.0.1:8090")]
    bind: SocketAddr,
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    #[arg(long, env = "REDIS_URL")]
    redis_url: String,
    #[arg(long, default_value_t = 32)]
    db_pool_size: u32,
}

struct Twin {
    redis: MultiplexedConnection,
    db: MySqlPool,
    sha: String,
    /// The method it serves, as its budget names it.
    method: Arc<str>,
    /// Arrival numbers per coupon, as the lab's answer carries one.
    arrivals: Mutex<HashMap<u64, Arc<AtomicU64>>>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let redis = redis::Client::open(args.redis_url.as_str())?
        .get_multiplexed_async_connection()
        .await
        .context("cannot connect to Redis")?;
    let db = MySqlPoolOptions::new()
        .max_connections(args.db_pool_size)
        .test_before_acquire(false)
        .connect(&args.database_url)
        .await
        .context("cannot connect to MySQL")?;
    let twin = Arc::new(Twin {
        redis,
        db,
        sha: sha1_smol::Sha1::from(RESERVE).digest().to_string(),
        method: Arc::from("REDIS_LUA"),
        arrivals: Mutex::new(HashMap::new()),
    });
    let app = Router::new()
        .route("/lab/coupons/{coupon_id}/issue", post(issue))
        .layer(middleware::from_fn(run_to_end))
        .with_state(twin);
    let listener = tokio::net::TcpListener::bind(args.bind).await?;
    println!("native twin serving on {}", listener.local_addr()?);
    axum::serve(listener, app)
        .with_graceful_shutdown(couponlab::shutdown_signal())
        .await?;
    budget::write()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Body {
    member_id: i64,
    method: String,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Issued {
    coupon_id: u64,
    member_id: u64,
    method: &'static str,
    outcome: &'static str,
    sequence: u64,
    retries: u32,
}

fn failure(status: StatusCode, message: String) -> Response {
    let body = json!({
        "success": false,
        "response": null,
        "error": { "message": message, "status": status.as_u16() },
    });
    (status, Json(body)).into_response()
}

/// Runs every request in a task of its own, as the lab does: a client that
/// hangs up (wrk closing its connections at the end of a run) must not
/// leave a pooled connection inside a half-begun transaction.
async fn run_to_end(request: Request, next: Next) -> Response {
    tokio::spawn(budget::timed(next.run(request)))
        .await
        .unwrap_or_else(|_| {
            failure(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the handler panicked".into(),
            )
        })
}

async fn issue(
    State(twin): State<Arc<Twin>>,
    Path(coupon_id): Path<i64>,
    body: Result<Json<Body>, JsonRejection>,
) -> Response {
    budget::lap(Stage::Extract);
    let Ok(Json(body)) = body else {
        return failure(StatusCode::BAD_REQUEST, "malformed body".into());
    };
    let (Ok(coupon_id), Ok(member_id)) = (u64::try_from(coupon_id), u64::try_from(body.member_id))
    else {
        return failure(StatusCode::BAD_REQUEST, "ids must be positive".into());
    };
    if body.method != "REDIS_LUA" {
        return failure(StatusCode::BAD_REQUEST, "the twin serves REDIS_LUA".into());
    }
    let sequence = {
        let counter = twin.arrivals.lock().entry(coupon_id).or_default().clone();
        counter.fetch_add(1, Ordering::Relaxed) + 1
    };
    budget::call_starts(&twin.method);
    let reserved = twin.reserve_and_confirm(coupon_id, member_id).await;
    budget::lap(Stage::HostCalls);
    let outcome = match reserved {
        Ok(outcome) => outcome,
        Err(err) => {
            return failure(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("UNAVAILABLE: {err:#}"),
            );
        }
    };
    match outcome {
        "ISSUED" => (
            StatusCode::OK,
            Json(json!({
                "success": true,
                "response": Issued {
                    coupon_id,
                    member_id,
                    method: "REDIS_LUA",
                    outcome,
                    sequence,
                    retries: 0,
                },
                "error": null,
            })),
        )
            .into_response(),
        "SOLD_OUT" => failure(
            StatusCode::CONFLICT,
            format!("SOLD_OUT: coupon {coupon_id} is sold out"),
        ),
        "SOLD_OUT_AT_DB" => failure(
            StatusCode::CONFLICT,
            format!(
                "SOLD_OUT_AT_DB: coupon {coupon_id} is sold out (caught by the database guard)"
            ),
        ),
        _ => failure(
            StatusCode::CONFLICT,
            format!("DUPLICATE: member {member_id} already has coupon {coupon_id}"),
        ),
    }
}

impl Twin {
    async fn reserve_and_confirm(
        &self,
        coupon_id: u64,
        member_id: u64,
    ) -> anyhow::Result<&'static str> {
        let issued = keys::issued(coupon_id);
        let total = keys::total(coupon_id);
        let mut verdict = self.reserve(&issued, &total, member_id).await?;
        if verdict == -1 {
            let total_count: i64 =
                sqlx::query_scalar("SELECT total_count FROM coupons WHERE id = ?")
                    .bind(coupon_id)
                    .fetch_one(&self.db)
                    .await?;
            let _: () = redis::cmd("SET")
                .arg(&total)
                .arg(total_count)
                .query_async(&mut self.redis.clone())
                .await?;
            verdict = self.reserve(&issued, &total, member_id).await?;
        }
        match verdict {
            0 => return Ok("SOLD_OUT"),
            2 => return Ok("DUPLICATE"),
            1 => {}
            other => anyhow::bail!("unexpected reservation reply {other}"),
        }
        let confirmed = self.confirm(coupon_id, member_id).await;
        let outcome = match &confirmed {
            Ok(true) => return Ok("ISSUED"),
            Ok(false) => "SOLD_OUT_AT_DB",
            Err(sqlx::Error::Database(db))
                if db
                    .try_downcast_ref::<MySqlDatabaseError>()
                    .is_some_and(|e| e.number() == ER_DUP_ENTRY) =>
            {
                return Ok("DUPLICATE");
            }
            Err(_) => "",
        };
        let _: i64 = redis::cmd("SREM")
            .arg(&issued)
            .arg(member_id)
            .query_async(&mut self.redis.clone())
            .await?;
        match confirmed {
            Err(err) => Err(err.into()),
            Ok(_) => Ok(outcome),
        }
    }

    async fn reserve(&self, issued: &str, total: &str, member_id: u64) -> anyhow::Result<i64> {
        let evalsha = || {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&self.sha)
                .arg(2)
                .arg(issued)
                .arg(total)
                .arg(member_id);
            cmd
        };
        match evalsha().query_async(&mut self.redis.clone()).await {
            Err(err) if err.code() == Some("NOSCRIPT") => {
                let _: String = redis::cmd("SCRIPT")
                    .arg("LOAD")
                    .arg(RESERVE)
                    .query_async(&mut self.redis.clone())
                    .await?;
                Ok(evalsha().query_async(&mut self.redis.clone()).await?)
            }
            other => Ok(other?),
        }
    }

    /// The confirm step: true when issued, false when the database had no
    /// stock left. One round trip opens the transaction, as in the lab.
    async fn confirm(&self, coupon_id: u64, member_id: u64) -> Result<bool, sqlx::Error> {
        let mut tx: Transaction<'_, MySql> = self
            .db
            .begin_with("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ WRITE; BEGIN")
            .await?;
        sqlx::query("INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)")
            .bind(coupon_id)
            .bind(member_id)
            .execute(&mut *tx)
            .await?;
        let updated = sqlx::query(
            "UPDATE coupons SET issued_count = issued_count + 1 WHERE id = ? AND issued_count < total_count",
        )
        .bind(coupon_id)
        .execute(&mut *tx)
        .await?;
        if updated.rows_affected() == 0 {
            tx.rollback().await?;
            return Ok(false);
        }
        tx.commit().await?;
        Ok(true)
    }
}
