// world: issuer
// JS_REDIS_LUA: REDIS_LUA in JavaScript. One EVALSHA decides in Redis,
// atomically, whether the member has a reservation and whether stock is
// left, and reserves; then the shared confirm step writes the issue in the
// database, and a failed confirm removes the reservation.

import * as lab from './couponlab.js';

export const strategy = {
  describe() {
    return lab.descriptor(
      'JS_REDIS_LUA',
      ['total', 'member', 'acked'],
      'REDIS_LUA in JavaScript: one Lua script reserves atomically, then the DB confirm step',
      { reservationSet: true },
    );
  },
  issue({ couponId, memberId }) {
    return lab.settle(() => {
      lab.reserveWithLua(couponId, memberId);
      return lab.confirmOrRelease(couponId, memberId);
    });
  },
  compensate({ couponId, memberId }) {
    return lab.releaseUnlessIssued(couponId, memberId);
  },
};
