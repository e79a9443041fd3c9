//! The `named-lock` capability: MySQL's `GET_LOCK` and `RELEASE_LOCK`, or
//! PostgreSQL's session advisory locks, on a session the call holds from
//! its first `acquire` to its end ([`LockSession`]). A component cannot run `GET_LOCK` itself on a pooled
//! connection and leave it to the next borrower (the statement check closes
//! such a connection): here the host runs both statements, on names it
//! checked, and knows which locks the session holds. When the call ends,
//! however it ends, the session releases them all (`RELEASE_ALL_LOCKS()`,
//! `pg_advisory_unlock_all()`) on the call's clean-up before its connection goes back; a session left
//! mid-statement is closed and, if its link was lost, ended on the server,
//! which releases its locks either way.
//!
//! Where the session's connection comes from is the lesson of
//! MYSQL_NAMED_LOCK: from a pool of its own (`COUPONLAB_LOCK_POOL_SIZE`), or
//! with 0 from the components' pool, where the requests waiting for a lock
//! hold the connections the lock's holder needs for its transaction.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use couponlab_contract::keys::LOCK_PREFIX;
use sha2::{Digest, Sha256};
use sqlx::Row;
use tokio_util::task::TaskTracker;

use super::lent::{Conn, Lent};
use super::statement::Residue;
use super::value::to_wit_error;
use super::{GuestSql, SqlError, SqlView};
use crate::runtime::bindings::named_lock;

/// The longest name MySQL and MariaDB take.
const MAX_NAME: usize = 64;
/// How long before the call's deadline a wait ends, so the component still
/// hears that it did not get the lock.
const WAIT_MARGIN: Duration = Duration::from_millis(100);

/// One call's session for named locks, and the locks it holds.
pub struct LockSession {
    lent: Option<Lent>,
    held: HashSet<String>,
    cleanup: TaskTracker,
}

impl GuestSql {
    /// A connection for a call's lock session: from the lock pool, or the
    /// components' own when there is none.
    async fn lend_for_locks(&self) -> Result<Lent, sqlx::Error> {
        match &self.lock_pool {
            Some(pool) => Lent::borrow(pool, self.orphans.clone()).await,
            None => self.lend().await,
        }
    }
}

impl LockSession {
    async fn open(sql: &GuestSql, cleanup: TaskTracker) -> Result<Self, SqlError> {
        let mut lent = sql.lend_for_locks().await.map_err(to_wit_error)?;
        // The session's id: a session whose link is lost is ended on the
        // server, locks and all.
        lent.identify().await.map_err(to_wit_error)?;
        Ok(Self {
            lent: Some(lent),
            held: HashSet::new(),
            cleanup,
        })
    }

    fn lent(&mut self) -> Result<&mut Lent, SqlError> {
        match self.lent.as_mut() {
            Some(lent) if lent.usable() => Ok(lent),
            _ => Err(SqlError::Connection(
                "the lock session's connection was lost; its locks went with it".into(),
            )),
        }
    }

    /// Takes the lock `name`, waiting `wait` at most: 1 taken, 0 not,
    /// `None` refused. MariaDB and MySQL take a fractional timeout in
    /// seconds. PostgreSQL's advisory locks take a number and no timeout:
    /// the wait is the `lock_timeout` of a transaction around the lock,
    /// which outlives the transaction (a session lock), and a wait that
    /// times out (55P03) leaves the transaction to roll back.
    async fn take(&mut self, name: &str, wait: Duration) -> Result<Option<i64>, SqlError> {
        self.lent()?
            .statement(Residue::None, async |conn| match conn {
                Conn::MySql(conn) => sqlx::query("SELECT GET_LOCK(?, ?)")
                    .bind(name)
                    .bind(wait.as_secs_f64())
                    .fetch_one(&mut **conn)
                    .await?
                    .try_get(0),
                Conn::Postgres(_) => {
                    let take = format!(
                        "BEGIN; SET LOCAL lock_timeout = {}; SELECT pg_advisory_lock({}); COMMIT",
                        wait.as_millis().max(1),
                        advisory_key(name)
                    );
                    let Err(err) = conn.batch(&take).await else {
                        return Ok(Some(1));
                    };
                    // Whatever ended the wait (its timeout, a deadlock
                    // between two calls' locks, a cancelled statement)
                    // left the transaction around it to roll back, before
                    // the session takes anything else.
                    conn.batch("ROLLBACK").await?;
                    if lock_not_available(&err) {
                        Ok(Some(0))
                    } else {
                        Err(err)
                    }
                }
            })
            .await
            .map_err(to_wit_error)
    }

    /// Releases the lock `name`: 1 released, 0 not held, `None` refused.
    async fn give_back(&mut self, name: &str) -> Result<Option<i64>, SqlError> {
        self.lent()?
            .statement(Residue::None, async |conn| match conn {
                Conn::MySql(conn) => sqlx::query("SELECT RELEASE_LOCK(?)")
                    .bind(name)
                    .fetch_one(&mut **conn)
                    .await?
                    .try_get(0),
                Conn::Postgres(conn) => {
                    let released: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
                        .bind(advisory_key(name))
                        .fetch_one(&mut **conn)
                        .await?;
                    Ok(Some(released.into()))
                }
            })
            .await
            .map_err(to_wit_error)
    }

    async fn acquire(&mut self, name: &str, wait: Duration) -> Result<bool, SqlError> {
        if self.held.contains(name) {
            return Ok(true);
        }
        let taken = self.take(name, wait).await?;
        match taken {
            Some(1) => {
                self.held.insert(name.to_string());
                Ok(true)
            }
            Some(_) => Ok(false),
            // NULL: the server refused (out of memory, or killed).
            None => Err(SqlError::Other(format!("locking {name} answered NULL"))),
        }
    }

    async fn release(&mut self, name: &str) -> Result<bool, SqlError> {
        if !self.held.contains(name) {
            return Ok(false);
        }
        let released = self.give_back(name).await?;
        // Kept as held until the server answered: a lock it may still hold
        // is released with the rest at the call's end.
        self.held.remove(name);
        Ok(released == Some(1))
    }
}

impl Drop for LockSession {
    /// The call ended holding locks: they are released on its clean-up,
    /// which the host awaits before acting on the call's end; the
    /// connection goes back only if that succeeded.
    fn drop(&mut self) {
        let Some(mut lent) = self.lent.take() else {
            return;
        };
        if self.held.is_empty() || !lent.usable() {
            return;
        }
        if tokio::runtime::Handle::try_current().is_ok() {
            self.cleanup.spawn(async move {
                let released = lent
                    .statement(Residue::None, async |conn| {
                        let release_all = match conn {
                            Conn::MySql(_) => "SELECT RELEASE_ALL_LOCKS()",
                            Conn::Postgres(_) => "SELECT pg_advisory_unlock_all()",
                        };
                        conn.batch(release_all).await
                    })
                    .await;
                // Refused by the server, the locks may still be held: the
                // connection is closed, which releases them, rather than
                // handed to the next borrower.
                if released.is_err() {
                    lent.abandon();
                }
            });
        } else {
            lent.abandon();
        }
    }
}

/// The number PostgreSQL's advisory lock of `name` takes: the same on every
/// host of a lab (a hash that does not depend on the process).
fn advisory_key(name: &str) -> i64 {
    let digest = Sha256::digest(name.as_bytes());
    i64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
}

/// Whether `err` is PostgreSQL's `lock_not_available`: a lock wait that
/// reached `lock_timeout`.
fn lock_not_available(err: &sqlx::Error) -> bool {
    err.as_database_error()
        .and_then(|err| err.code())
        .is_some_and(|code| code == "55P03")
}

/// Why `name` may not be a lock's name, if it may not.
fn refused_name(name: &str) -> Option<SqlError> {
    (!name.starts_with(LOCK_PREFIX) || name.chars().count() > MAX_NAME).then(|| {
        SqlError::Refused(format!(
            "a named lock's name starts with {LOCK_PREFIX} and has at most {MAX_NAME} characters: {name:.80}"
        ))
    })
}

impl SqlView<'_> {
    /// The call's lock session, opened on first use.
    async fn lock_session(&mut self) -> Result<&mut LockSession, SqlError> {
        let held = &mut self.held.lock_session;
        if held.is_none() {
            *held = Some(LockSession::open(self.sql, self.call.cleanup.clone()).await?);
        }
        Ok(held.as_mut().expect("opened above"))
    }
}

impl named_lock::Host for SqlView<'_> {
    /// Waits no longer than the call's own deadline, less a margin.
    #[tracing::instrument(name = "named_lock.acquire", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn acquire(
        &mut self,
        name: String,
        timeout_ms: u32,
    ) -> wasmtime::Result<Result<bool, SqlError>> {
        if let Some(refused) = refused_name(&name) {
            return Ok(Err(refused));
        }
        let cap = self.sql.args.named_locks_per_call as usize;
        let session = self.held.lock_session.as_ref();
        let held = session.map_or(0, |s| s.held.len());
        let holds_it = session.is_some_and(|s| s.held.contains(&name));
        if held >= cap && !holds_it {
            return Ok(Err(SqlError::Refused(format!(
                "a call holds at most {cap} named locks at once (COUPONLAB_NAMED_LOCKS_PER_CALL)"
            ))));
        }
        let left = self.call.left().saturating_sub(WAIT_MARGIN);
        let wait = Duration::from_millis(timeout_ms.into()).min(left);
        let give_up = Instant::now() + wait;
        // Waiting for a connection counts against the wait: a lock that
        // could not even be asked for in time was not had in time.
        let session = match tokio::time::timeout(wait, Box::pin(self.lock_session())).await {
            Ok(Ok(session)) => session,
            Ok(Err(err)) => return Ok(Err(err)),
            Err(_) => return Ok(Ok(false)),
        };
        let wait = give_up.saturating_duration_since(Instant::now());
        Ok(Box::pin(session.acquire(&name, wait)).await)
    }

    #[tracing::instrument(name = "named_lock.release", level = "debug", skip_all, fields(method = %self.call.method))]
    async fn release(&mut self, name: String) -> wasmtime::Result<Result<bool, SqlError>> {
        Ok(match self.held.lock_session.as_mut() {
            Some(session) => Box::pin(session.release(&name)).await,
            None => Ok(false),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_names_of_the_labs_locks_within_the_servers_limit_are_taken() {
        assert!(refused_name("coupon:lock:{7}").is_none());
        assert!(refused_name("mysql.user").is_some());
        let longest = format!("{LOCK_PREFIX}{}", "x".repeat(MAX_NAME - LOCK_PREFIX.len()));
        assert!(refused_name(&longest).is_none());
        assert!(refused_name(&format!("{longest}x")).is_some());
    }
}
