//! REDIS_WRITE_BEHIND (stage 9): Redis is the source of truth. The member
//! check runs in a read-only transaction (what a read-only `@Transactional`
//! costs: SET TRANSACTION and BEGIN, the SELECT, COMMIT); then one EVALSHA
//! does duplicate → stock → XADD `coupon:wb:stream:{couponId}` → SADD, and the answer
//! is 202. No database write on the request path: the host's loader hands
//! the entries back here in batches, and reconcile repairs what it missed.

use couponlab_sdk::sql::{self, IsolationLevel};
use couponlab_sdk::write_behind;
use couponlab_sdk::{IssueResult, Step, compensate, params, settle};

couponlab_sdk::world!("write-behind-issuer");

use exports::couponlab::strategy::{strategy, write_behind as loader};

couponlab_sdk::write_behind_loader!(RedisWriteBehind: loader::Guest);

const METHOD: &str = "REDIS_WRITE_BEHIND";

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    let tx = sql::begin_read_only(IsolationLevel::RepeatableRead)?;
    let member = tx.query("SELECT id FROM members WHERE id = ?", &params![member_id])?;
    tx.commit()?;
    write_behind::accept(&member, coupon_id, member_id, METHOD)
}

couponlab_sdk::strategy! {
    struct RedisWriteBehind: strategy::Guest { method: METHOD, claims: [Total, Member, Acked], summary: "member check in a read-only transaction, one Lua script reserves and XADDs, 202; the loader writes the DB in batches", reservation_set: true }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
    fn compensate(_request) { compensate::carried_by_entry() }
}
