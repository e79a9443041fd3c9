# world: issuer
"""Test fixture TEST_PY_RAISE: its issue raises, as a Python strategy with
a bug would; the host must answer 500 with Python's own message."""

from wit_world import exports

import couponlab as lab


class Strategy(exports.Strategy):
    def describe(self):
        return lab.descriptor("TEST_PY_RAISE", [], "raises in issue (test fixture)")

    def issue(self, request):
        raise RuntimeError(f"no stock table for coupon {request.coupon_id}")

    def compensate(self, request):
        return lab.nothing_to_undo()
