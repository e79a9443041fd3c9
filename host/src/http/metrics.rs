//! `GET /metrics`: the server's metrics in the Prometheus text format (not
//! the envelope: Prometheus reads this route). The gauges of what a run
//! exhausts are read now, from the pools, the queue, the gates and the
//! streams; on a Galera node, its conflict counters.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use couponlab_contract::{ISSUE_STREAM, WRITE_BEHIND_STREAM};

use crate::announcements;
use crate::db_target::Pool;
use crate::lab::Lab;
use crate::results::stream_summary;
use crate::runtime::SqlCluster as Cluster;

/// The streams whose figures `/metrics` sums: those that took entries this
/// long ago at most (a stream older than that owes nothing: its entries
/// were confirmed or dead-lettered long since).
const STREAMS_SUMMED_OVER: Duration = Duration::from_secs(60 * 60);

pub fn router() -> Router<Lab> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(lab): State<Lab>) -> impl IntoResponse {
    let metrics = lab.runtime.metrics();
    lab.runtime.set_gauges();
    metrics.set_db_connections("server", lab.db().open_and_idle());
    if lab.runtime.sql_engine().cluster.is_some()
        && let Pool::MySql(db) = lab.db()
        && let Ok(mut conn) = db.acquire().await
        && let Ok(cluster) = Cluster::read(&mut conn).await
    {
        for (kind, count) in [
            ("cert_failures", cluster.cert_failures),
            ("bf_aborts", cluster.bf_aborts),
        ] {
            let count = i64::try_from(count).unwrap_or(i64::MAX);
            metrics
                .galera_conflicts
                .with_label_values(&[kind])
                .set(count);
        }
    }
    metrics
        .settlements_pending
        .set(lab.settlements.pending() as i64);
    let recorded = lab.recorder.coupons();
    for (state, count) in [("live", recorded.live), ("dormant", recorded.dormant)] {
        metrics
            .recorded_coupons
            .with_label_values(&[state])
            .set(count as i64);
    }
    metrics.traces_held.set(lab.traces.count() as i64);
    // Summed over the streams that took entries in the last hour, not over
    // every coupon's: a scrape of a lab at rest costs the same whatever
    // its number of coupons. Redis being down leaves the stream figures
    // out, not the scrape.
    for kind in [ISSUE_STREAM, WRITE_BEHIND_STREAM] {
        let coupons =
            announcements::announced_within(&mut lab.redis().clone(), kind, STREAMS_SUMMED_OVER)
                .await
                .unwrap_or_default();
        let (mut pending, mut dead_letters) = (0, 0);
        for &coupon in &coupons {
            if let Ok(Some(summary)) = stream_summary(lab.redis(), kind, coupon).await {
                pending += summary.pending;
                dead_letters += summary.dead_letters;
            }
        }
        let label = [kind.prefix.trim_end_matches(':')];
        metrics
            .stream_pending
            .with_label_values(&label)
            .set(pending as i64);
        metrics
            .stream_dead_letters
            .with_label_values(&label)
            .set(dead_letters as i64);
    }
    ([(CONTENT_TYPE, prometheus::TEXT_FORMAT)], metrics.render())
}
