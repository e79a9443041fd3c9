# world: issuer
"""PY_PESSIMISTIC: PESSIMISTIC in Python. SELECT ... FOR UPDATE on the
coupon row, then the member check, the stock check and the write, all
under the row lock, in one REPEATABLE READ transaction."""

from wit_world import exports
from wit_world.imports import sql

import couponlab as lab
from couponlab import Outcome, Refused


def issue(coupon_id, member_id):
    coupon, member = lab.uint(coupon_id), lab.uint(member_id)
    with lab.sql_call(sql.begin, lab.IsolationLevel.ENGINE_DEFAULT) as tx:
        rows = lab.sql_call(
            tx.query,
            "SELECT total_count, issued_count FROM coupons WHERE id = ? FOR UPDATE",
            [coupon],
        )
        if not rows.rows:
            raise Refused(lab.result(Outcome.UNKNOWN_COUPON))
        total, issued = (lab.number(value) for value in rows.rows[0])
        held = lab.sql_call(
            tx.query,
            "SELECT COUNT(*) FROM coupon_issues WHERE coupon_id = ? AND member_id = ?",
            [coupon, member],
        )
        if lab.scalar(held):
            raise Refused(lab.result(Outcome.DUPLICATE))
        if issued >= total:
            raise Refused(lab.result(Outcome.SOLD_OUT))
        lab.sql_call(
            tx.execute,
            "INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)",
            [coupon, member],
        )
        lab.sql_call(
            tx.execute, "UPDATE coupons SET issued_count = issued_count + 1 WHERE id = ?", [coupon]
        )
        lab.sql_call(tx.commit)
    return lab.result(Outcome.ISSUED)


class Strategy(exports.Strategy):
    def describe(self):
        return lab.descriptor(
            "PY_PESSIMISTIC",
            ["total", "member", "acked"],
            "PESSIMISTIC in Python: SELECT ... FOR UPDATE, then check and write under the lock",
        )

    def issue(self, request):
        return lab.settle(issue, request.coupon_id, request.member_id)

    def compensate(self, request):
        return lab.nothing_to_undo()
