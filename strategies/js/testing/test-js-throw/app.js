// world: issuer
// Test fixture TEST_JS_THROW: its issue throws, as a JavaScript strategy
// with a bug would; the host must answer 500 with JavaScript's own message.

import * as lab from './couponlab.js';

export const strategy = {
  describe() {
    return lab.descriptor('TEST_JS_THROW', [], 'throws in issue (test fixture)');
  },
  issue({ couponId }) {
    throw new TypeError(`no stock table for coupon ${couponId}`);
  },
  compensate() {
    return lab.nothingToUndo();
  },
};
