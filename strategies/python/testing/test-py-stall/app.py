# world: issuer
"""Test fixture TEST_PY_STALL: reserves as PY_REDIS_LUA does, then waits
until the host ends the call at its deadline; the host then calls
`compensate`, which is the sdk's: the reservation goes."""

from wit_world import exports
from wit_world.imports import clock

import couponlab as lab


def issue(coupon_id, member_id):
    lab.reserve_with_lua(coupon_id, member_id)
    while True:
        clock.sleep(1_000)


class Strategy(exports.Strategy):
    def describe(self):
        return lab.descriptor("TEST_PY_STALL", [], "reserves, then stalls (test fixture)")

    def issue(self, request):
        return lab.settle(issue, request.coupon_id, request.member_id)

    def compensate(self, request):
        return lab.release_unless_issued(request.coupon_id, request.member_id)
