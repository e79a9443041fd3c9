//! REDIS_WRITE_BEHIND_NO_TX (stage 10): stage 9 with the member check as one
//! autocommit SELECT, without the transaction's set-up statements around it.
//! The rest is REDIS_WRITE_BEHIND: one EVALSHA reserves and XADDs to
//! `coupon:wb:stream:{couponId}`, 202; the same loader and reconcile.

use couponlab_sdk::write_behind;
use couponlab_sdk::{IssueResult, Step, compensate, params, settle, sql};

couponlab_sdk::world!("write-behind-issuer");

use exports::couponlab::strategy::{strategy, write_behind as loader};

couponlab_sdk::write_behind_loader!(RedisWriteBehindNoTx: loader::Guest);

const METHOD: &str = "REDIS_WRITE_BEHIND_NO_TX";

fn issue(coupon_id: u64, member_id: u64) -> Step<IssueResult> {
    let member = sql::query("SELECT id FROM members WHERE id = ?", &params![member_id])?;
    write_behind::accept(&member, coupon_id, member_id, METHOD)
}

couponlab_sdk::strategy! {
    struct RedisWriteBehindNoTx: strategy::Guest { method: METHOD, claims: [Total, Member, Acked], summary: "member check as one autocommit SELECT, one Lua script reserves and XADDs, 202; the loader writes the DB in batches", reservation_set: true }
    fn issue(request) { settle(issue(request.coupon_id, request.member_id)) }
    fn compensate(_request) { compensate::carried_by_entry() }
}
