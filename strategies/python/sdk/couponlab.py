"""couponlab's sdk for strategies in Python: the steps the Rust sdk shares
between methods, over the same WIT imports (bindings by componentize-py).

The names and scripts come from one source: `couponlab_contract` is
written at build time by `cargo xtask strategies` from the contract crate
and `lua/`, as the Rust sdk and the host read them.

A step that ends the request raises `Refused` with the answer; `settle`
turns it into the call's result. WIT errors arrive as `Err` exceptions
whose `value` is the error's case.
"""

from componentize_py_types import Err
from wit_world.imports import redis, sql, types

import couponlab_contract as contract

Outcome = types.Outcome
IsolationLevel = sql.IsolationLevel


class Refused(Exception):
    """Ends the request with `result`."""

    def __init__(self, result):
        super().__init__(result.detail)
        self.result = result


def result(outcome, detail=None, compensations=0, settle_later=False):
    return types.IssueResult(
        outcome=outcome,
        detail=detail,
        retries=0,
        compensations=compensations,
        labels=[],
        settle_later=settle_later,
    )


def settle(step, *args):
    """The result of `step(*args)`, or the answer a refusal carries."""
    try:
        return step(*args)
    except Refused as refused:
        return refused.result


def claim_list(claims):
    return [getattr(types.Claim, claim.upper()) for claim in claims]


def descriptor(method, claims, summary, reservation_set=False, engine_claims=()):
    """`engine_claims`: `(engine, claims, why)` for each engine on which the
    method promises other claims than `claims`; the lab judges it there by
    those."""
    return types.Descriptor(
        method=method,
        claims=claim_list(claims),
        summary=summary,
        reservation_set=reservation_set,
        result_labels=[],
        engine_claims=[
            types.EngineClaims(engine=engine, claims=claim_list(on_engine), why=why)
            for engine, on_engine, why in engine_claims
        ],
    )


def compensation(undone, detail, unfinished=False):
    return types.Compensation(undone=undone, detail=detail, unfinished=unfinished)


def confirmation(issue_result, coupon_id, member_id):
    return types.Confirmation(
        coupon_id=coupon_id,
        member_id=member_id,
        outcome=issue_result.outcome,
        detail=issue_result.detail,
        compensations=issue_result.compensations,
        settle_later=issue_result.settle_later,
    )


# Errors, as the Rust sdk's `From` conversions give them.

SQL_OUTCOMES = {
    sql.SqlError_Deadlock: Outcome.DEADLOCK,
    sql.SqlError_LockWaitTimeout: Outcome.LOCK_WAIT_TIMEOUT,
    sql.SqlError_SerializationFailure: Outcome.SERIALIZATION_FAILURE,
    sql.SqlError_DuplicateKey: Outcome.DUPLICATE,
    # coupon_issues has one foreign key: member_id.
    sql.SqlError_ForeignKey: Outcome.UNKNOWN_MEMBER,
}


def from_sql(err):
    outcome = SQL_OUTCOMES.get(type(err), Outcome.UNAVAILABLE)
    # Only the database can say what a COMMIT whose answer was lost did.
    later = isinstance(err, sql.SqlError_Indeterminate)
    kind = type(err).__name__.removeprefix("SqlError_")
    return result(outcome, f"{kind}: {err.value}", settle_later=later)


def from_redis(err, wrote=False):
    """`wrote`: a write whose connection failed may have run, so the request
    is settled later by `compensate`."""
    later = wrote and isinstance(err, redis.RedisError_Connection)
    return result(Outcome.UNAVAILABLE, f"Redis: {err.value}", settle_later=later)


def sql_call(call, *args):
    try:
        return call(*args)
    except Err as err:
        raise Refused(from_sql(err.value))


def redis_call(call, *args, wrote=False):
    try:
        return call(*args)
    except Err as err:
        raise Refused(from_redis(err.value, wrote))


def integer(reply):
    """The reply's root as an integer (a number, or a string of one)."""
    root = reply[0]
    if isinstance(root, redis.Value_Int):
        return root.value
    if isinstance(root, redis.Value_Data):
        try:
            return int(root.value)
        except ValueError:
            return None
    return None


def scalar(rows):
    if not rows.rows or not rows.rows[0]:
        return None
    value = rows.rows[0][0]
    if isinstance(value, (sql.Value_Int, sql.Value_Uint)):
        return value.value
    if isinstance(value, sql.Value_Text):
        return int(value.value)
    return None


def uint(n):
    return sql.Value_Uint(n)


def number(value):
    """A numeric column's value."""
    return int(value.value)


# The coupon's total in Redis, re-read from the database when missing.

def warm_total(coupon_id):
    rows = sql_call(sql.query, "SELECT total_count FROM coupons WHERE id = ?", [uint(coupon_id)])
    total = scalar(rows)
    if total is None:
        raise Refused(result(Outcome.UNKNOWN_COUPON))
    redis_call(redis.execute, "SET", [contract.total(coupon_id), str(total)])
    return total


# The Lua reservations (reply 1 reserved, 0 sold out, 2 duplicate, -1 no
# total in Redis).

def decide(script, keys, argv, coupon_id):
    verdict = integer(redis_call(redis.eval, script, keys, argv, wrote=True))
    if verdict == -1:
        warm_total(coupon_id)
        verdict = integer(redis_call(redis.eval, script, keys, argv, wrote=True))
    if verdict == 1:
        return
    if verdict == 0:
        raise Refused(result(Outcome.SOLD_OUT))
    if verdict == 2:
        raise Refused(result(Outcome.DUPLICATE))
    raise Refused(result(Outcome.UNAVAILABLE, f"unexpected reservation reply {verdict}"))


def reserve_with_lua(coupon_id, member_id):
    keys = [contract.issued(coupon_id), contract.total(coupon_id)]
    decide(contract.RESERVE_LUA, keys, [str(member_id)], coupon_id)


def reserve_and_enqueue(coupon_id, member_id, method, now_ms):
    keys = [contract.issued(coupon_id), contract.total(coupon_id), contract.issue_stream(coupon_id)]
    argv = [str(member_id), str(coupon_id), method, str(now_ms)]
    decide(contract.RESERVE_AND_ENQUEUE_LUA, keys, argv, coupon_id)


# The shared confirm step: the issue row and the guarded count in one
# transaction.

def confirm(coupon_id, member_id):
    """Outcome.ISSUED, SOLD_OUT_AT_DB, DUPLICATE or UNKNOWN_MEMBER; raises
    `Err` for any other failure. Leaving the `with` drops the transaction,
    which the host rolls back if it is still open."""
    try:
        with sql.begin(IsolationLevel.ENGINE_DEFAULT) as tx:
            tx.execute(
                "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
                [uint(coupon_id), uint(member_id)],
            )
            updated = tx.execute(
                "UPDATE coupons SET issued_count = issued_count + 1 "
                "WHERE id = ? AND issued_count < total_count",
                [uint(coupon_id)],
            )
            if updated.rows_affected == 0:
                tx.rollback()
                return Outcome.SOLD_OUT_AT_DB
            tx.commit()
            return Outcome.ISSUED
    except Err as err:
        if isinstance(err.value, sql.SqlError_DuplicateKey):
            return Outcome.DUPLICATE
        if isinstance(err.value, sql.SqlError_ForeignKey):
            return Outcome.UNKNOWN_MEMBER
        raise


def release(coupon_id, member_id, failed):
    """Removes the member's reservation after a failed confirm."""
    try:
        redis.execute("SREM", [contract.issued(coupon_id), str(member_id)])
    except Err as err:
        detail = f"{failed.detail or 'confirm failed'}; the reservation could not be removed ({err.value.value})"
        return result(failed.outcome, detail, failed.compensations, settle_later=True)
    return result(failed.outcome, failed.detail, failed.compensations + 1, failed.settle_later)


def confirm_or_release(coupon_id, member_id):
    try:
        outcome = confirm(coupon_id, member_id)
    except Err as err:
        failed = from_sql(err.value)
        if failed.settle_later:
            return failed
        return release(coupon_id, member_id, failed)
    if outcome in (Outcome.ISSUED, Outcome.DUPLICATE):
        return result(outcome)
    return release(coupon_id, member_id, result(outcome))


# Compensation: what a call that ended without an answer leaves.

def issued(coupon_id, member_id):
    rows = sql.query(
        "SELECT 1 FROM coupon_issues WHERE coupon_id = ? AND member_id = ?",
        [uint(coupon_id), uint(member_id)],
    )
    return bool(rows.rows)


def nothing_to_undo():
    return compensation(0, "nothing to undo: the transaction was rolled back")


def release_unless_issued(coupon_id, member_id):
    try:
        if issued(coupon_id, member_id):
            return compensation(0, "the member's coupon was issued; the reservation stays")
    except Err as err:
        return compensation(0, f"the issue rows could not be read ({err.value.value}); the reservation stays", True)
    try:
        removed = integer(redis.execute("SREM", [contract.issued(coupon_id), str(member_id)]))
    except Err as err:
        return compensation(0, f"the reservation could not be removed: {err.value.value}", True)
    if removed == 1:
        return compensation(1, "the reservation was removed")
    return compensation(0, "there was no reservation to remove")


def carried_by_entry():
    return compensation(
        0, "the reservation and its stream entry were written together; the consumer finishes it"
    )


# A stream consumer's entry.

def entry_ids(entry):
    fields = dict(entry.fields)
    try:
        return int(fields[contract.FIELD_COUPON_ID]), int(fields[contract.FIELD_MEMBER_ID])
    except (KeyError, ValueError):
        return None


def handle_entry(entry):
    ids = entry_ids(entry)
    if ids is None:
        unreadable = result(Outcome.UNAVAILABLE, f"entry {entry.id} has no couponId/memberId")
        return types.Handled(confirmation(unreadable, 0, 0), types.Disposition.RETRY)
    coupon_id, member_id = ids
    try:
        outcome = confirm(coupon_id, member_id)
    except Err as err:
        return types.Handled(confirmation(from_sql(err.value), coupon_id, member_id), types.Disposition.RETRY)
    if outcome in (Outcome.ISSUED, Outcome.DUPLICATE):
        done = result(outcome)
    else:
        done = release(coupon_id, member_id, result(outcome))
    return types.Handled(confirmation(done, coupon_id, member_id), types.Disposition.ACK)


def dead_letter(entry):
    detail = f"dead-lettered after {entry.deliveries} deliveries"
    ids = entry_ids(entry)
    if ids is None:
        return confirmation(result(Outcome.UNAVAILABLE, detail), 0, 0)
    coupon_id, member_id = ids
    try:
        committed = issued(coupon_id, member_id)
    except Err as err:
        detail = f"{detail}; the issue rows could not be read ({err.value.value}), the reservation stays"
        return confirmation(result(Outcome.UNAVAILABLE, detail, settle_later=True), coupon_id, member_id)
    if committed:
        done = result(Outcome.ISSUED, f"{detail}; a delivery committed though its answer was lost")
    else:
        done = release(coupon_id, member_id, result(Outcome.UNAVAILABLE, detail))
    return confirmation(done, coupon_id, member_id)
