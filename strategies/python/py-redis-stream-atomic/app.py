# world: stream-issuer
"""PY_REDIS_STREAM_ATOMIC: REDIS_STREAM_ATOMIC in Python. One Lua script
reserves and XADDs the request to the coupon's stream together, and the
request is answered 202; the host's stream consumers hand each entry to
this component, which confirms it in the database."""

from wit_world import exports
from wit_world.imports import clock

import couponlab as lab
from couponlab import Outcome

METHOD = "PY_REDIS_STREAM_ATOMIC"


def issue(coupon_id, member_id):
    lab.reserve_and_enqueue(coupon_id, member_id, METHOD, clock.now_millis())
    return lab.result(Outcome.ACCEPTED)


class Strategy(exports.Strategy):
    def describe(self):
        return lab.descriptor(
            METHOD,
            ["total", "member", "acked"],
            "REDIS_STREAM_ATOMIC in Python: one Lua script reserves and XADDs, 202; consumers confirm",
            reservation_set=True,
        )

    def issue(self, request):
        return lab.settle(issue, request.coupon_id, request.member_id)

    def compensate(self, request):
        return lab.carried_by_entry()


class StreamConsumer(exports.StreamConsumer):
    def handle_entry(self, entry):
        return lab.handle_entry(entry)

    def dead_letter(self, entry):
        return lab.dead_letter(entry)
