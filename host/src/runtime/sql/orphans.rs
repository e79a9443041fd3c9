//! Sessions whose connection the host lost while they may still hold
//! something on the server: a transaction's row locks, or a COMMIT in
//! flight. Across a cut link or a lost answer the server keeps the session
//! until its own timeouts (hours by default), and with it every lock the
//! transaction took, so the next request on the coupon waits for a lock
//! nobody will release. The host knows each transaction's session (its
//! `CONNECTION_ID()` or `pg_backend_pid()`, read with BEGIN) and ends it
//! with `KILL CONNECTION` (PostgreSQL: `pg_terminate_backend`) through the
//! server's own pool, again every quarter second until the
//! database answers. Once it is gone, nothing that session sent can still
//! commit: only then does the host read what a lost COMMIT did.
//!
//! A KILL only marks a session, and the server may answer it before the
//! session ends: on a Galera node a session whose COMMIT waits for the
//! cluster (certification stalled by a dead or paused node) stays, listed
//! as `Killed`, until that COMMIT is done — and it commits then
//! (docs/learning/19-past-one-node.md). So a session is gone only once the
//! server no longer lists it.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus::IntCounter;
use sqlx::mysql::MySqlDatabaseError;
use tokio::sync::Notify;

use crate::db_target::Pool;

/// How often sessions not ended yet are tried again.
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// How long one KILL may take before it is tried again.
const KILL_LIMIT: Duration = Duration::from_secs(2);

/// ER_NO_SUCH_THREAD: the session is gone already.
const ER_NO_SUCH_THREAD: u16 = 1094;

pub struct Orphans {
    /// The server's own pool: its user may end and list any session.
    admin: Pool,
    /// Each session not gone yet, and whether a KILL reached it.
    sessions: Mutex<BTreeMap<u64, bool>>,
    /// Wakes the reaper for a new session, and the callers waiting for
    /// none to be left.
    changed: Notify,
    /// Sessions ended with KILL or `pg_terminate_backend` (not those found
    /// gone already).
    ended: IntCounter,
}

impl Orphans {
    /// The set of orphans and the task that ends them, for as long as the
    /// set lives.
    pub fn start(admin: Pool, ended: IntCounter) -> Arc<Orphans> {
        let orphans = Arc::new(Orphans {
            admin,
            sessions: Mutex::new(BTreeMap::new()),
            changed: Notify::new(),
            ended,
        });
        tokio::spawn(reap(Arc::downgrade(&orphans)));
        orphans
    }

    /// Ends `session` on the server as soon as it answers.
    pub fn end(&self, session: u64) {
        self.sessions.lock().entry(session).or_insert(false);
        self.changed.notify_waiters();
    }

    /// Sessions not ended yet.
    pub fn left(&self) -> usize {
        self.sessions.lock().len()
    }

    /// Waits until every session handed over so far is ended, `limit` at
    /// most; whether none is left.
    pub async fn until_none(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let changed = self.changed.notified();
            if self.left() == 0 {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            let _ = tokio::time::timeout(deadline - now, changed).await;
        }
    }

    /// One round: KILL each session; those the server no longer lists
    /// leave the set.
    async fn round(&self) {
        let sessions: Vec<u64> = self.sessions.lock().keys().copied().collect();
        for session in sessions {
            let gone = match tokio::time::timeout(KILL_LIMIT, self.end_session(session)).await {
                Ok(Ok(gone)) => gone,
                // The database does not answer yet: next round.
                Ok(Err(_)) | Err(_) => false,
            };
            if gone && let Some(killed) = self.sessions.lock().remove(&session) {
                if killed {
                    self.ended.inc();
                    tracing::warn!(
                        session,
                        "ended a database session whose connection was lost"
                    );
                }
                self.changed.notify_waiters();
            }
        }
    }

    /// KILLs `session` unless it is gone already; whether the server no
    /// longer lists it.
    async fn end_session(&self, session: u64) -> Result<bool, sqlx::Error> {
        let killed = match self.kill(session).await {
            Ok(killed) => killed,
            Err(sqlx::Error::Database(err))
                if err
                    .try_downcast_ref::<MySqlDatabaseError>()
                    .is_some_and(|err| err.number() == ER_NO_SUCH_THREAD) =>
            {
                false
            }
            Err(err) => return Err(err),
        };
        if killed && let Some(reached) = self.sessions.lock().get_mut(&session) {
            *reached = true;
        }
        Ok(!self.listed(session).await?)
    }

    /// Ends `session`: whether it was there to end (MySQL answers an error
    /// when it is gone, PostgreSQL `false`).
    async fn kill(&self, session: u64) -> Result<bool, sqlx::Error> {
        match &self.admin {
            Pool::MySql(admin) => {
                let statement = format!("KILL CONNECTION {session}");
                sqlx::query(&statement).execute(admin).await.map(|_| true)
            }
            Pool::Postgres(admin) => {
                sqlx::query_scalar("SELECT pg_terminate_backend($1)")
                    .bind(pid(session))
                    .fetch_one(admin)
                    .await
            }
        }
    }

    /// Whether the server still lists `session`, killed or not. A user
    /// without MySQL's PROCESS privilege is shown its own sessions only, so
    /// to it every other session looks gone.
    async fn listed(&self, session: u64) -> Result<bool, sqlx::Error> {
        let listed: i64 = match &self.admin {
            Pool::MySql(admin) => {
                sqlx::query_scalar(
                    "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?",
                )
                .bind(session)
                .fetch_one(admin)
                .await?
            }
            Pool::Postgres(admin) => {
                sqlx::query_scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1")
                    .bind(pid(session))
                    .fetch_one(admin)
                    .await?
            }
        };
        Ok(listed > 0)
    }
}

/// A PostgreSQL backend's pid, as the host keeps it.
fn pid(session: u64) -> i32 {
    i32::try_from(session).unwrap_or(i32::MAX)
}

/// Ends the orphans as they come, until the set is dropped (the task holds
/// it only for a round or a wait of at most a second).
async fn reap(orphans: Weak<Orphans>) {
    loop {
        let Some(orphans) = orphans.upgrade() else {
            return;
        };
        if orphans.left() > 0 {
            orphans.round().await;
        }
        // Made before the check: a session handed over after it still wakes
        // this wait.
        let changed = orphans.changed.notified();
        if orphans.left() == 0 {
            let _ = tokio::time::timeout(Duration::from_secs(1), changed).await;
        } else {
            tokio::time::sleep(RETRY_EVERY).await;
        }
    }
}
