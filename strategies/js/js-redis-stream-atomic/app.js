// world: stream-issuer
// JS_REDIS_STREAM_ATOMIC: REDIS_STREAM_ATOMIC in JavaScript. One Lua script
// reserves and XADDs the request to the coupon's stream together, and the
// request is answered 202; the host's stream consumers hand each entry to
// this component, which confirms it in the database.

import { nowMillis } from 'couponlab:strategy/clock@0.2.0';
import * as lab from './couponlab.js';

const METHOD = 'JS_REDIS_STREAM_ATOMIC';

export const strategy = {
  describe() {
    return lab.descriptor(
      METHOD,
      ['total', 'member', 'acked'],
      'REDIS_STREAM_ATOMIC in JavaScript: one Lua script reserves and XADDs, 202; consumers confirm',
      { reservationSet: true },
    );
  },
  issue({ couponId, memberId }) {
    return lab.settle(() => {
      lab.reserveAndEnqueue(couponId, memberId, METHOD, nowMillis());
      return lab.result('accepted');
    });
  },
  compensate() {
    return lab.carriedByEntry();
  },
};

export const streamConsumer = {
  handleEntry: lab.handleEntry,
  deadLetter: lab.deadLetter,
};
