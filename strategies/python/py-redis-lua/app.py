# world: issuer
"""PY_REDIS_LUA: REDIS_LUA in Python. One EVALSHA decides in Redis,
atomically, whether the member has a reservation and whether stock is left,
and reserves; then the shared confirm step writes the issue in the
database, and a failed confirm removes the reservation."""

from wit_world import exports

import couponlab as lab


def issue(coupon_id, member_id):
    lab.reserve_with_lua(coupon_id, member_id)
    return lab.confirm_or_release(coupon_id, member_id)


class Strategy(exports.Strategy):
    def describe(self):
        return lab.descriptor(
            "PY_REDIS_LUA",
            ["total", "member", "acked"],
            "REDIS_LUA in Python: one Lua script reserves atomically, then the DB confirm step",
            reservation_set=True,
        )

    def issue(self, request):
        return lab.settle(issue, request.coupon_id, request.member_id)

    def compensate(self, request):
        return lab.release_unless_issued(request.coupon_id, request.member_id)
