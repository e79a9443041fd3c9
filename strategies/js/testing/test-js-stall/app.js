// world: issuer
// Test fixture TEST_JS_STALL: reserves as JS_REDIS_LUA does, then waits
// until the host ends the call at its deadline; the host then calls
// `compensate`, which is the sdk's: the reservation goes.

import { sleep } from 'couponlab:strategy/clock@0.2.0';
import * as lab from './couponlab.js';

export const strategy = {
  describe() {
    return lab.descriptor('TEST_JS_STALL', [], 'reserves, then stalls (test fixture)');
  },
  issue({ couponId, memberId }) {
    return lab.settle(() => {
      lab.reserveWithLua(couponId, memberId);
      for (;;) sleep(1000);
    });
  },
  compensate({ couponId, memberId }) {
    return lab.releaseUnlessIssued(couponId, memberId);
  },
};
