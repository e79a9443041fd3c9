// world: issuer
// JS_PESSIMISTIC: PESSIMISTIC in JavaScript. SELECT ... FOR UPDATE on the
// coupon row, then the member check, the stock check and the write, all
// under the row lock, in one REPEATABLE READ transaction.

import * as sql from 'couponlab:strategy/sql@0.2.0';
import * as lab from './couponlab.js';

function issue(couponId, memberId) {
  const [coupon, member] = [lab.uint(couponId), lab.uint(memberId)];
  const tx = lab.sqlCall(() => sql.begin('engine-default'));
  const rows = lab.sqlCall(() =>
    tx.query('SELECT total_count, issued_count FROM coupons WHERE id = ? FOR UPDATE', [coupon]),
  );
  if (rows.rows.length === 0) throw new lab.Refused(lab.result('unknown-coupon'));
  const [total, issued] = rows.rows[0].map(lab.number);
  const held = lab.sqlCall(() =>
    tx.query('SELECT COUNT(*) FROM coupon_issues WHERE coupon_id = ? AND member_id = ?', [
      coupon,
      member,
    ]),
  );
  if (lab.scalar(held) > 0) throw new lab.Refused(lab.result('duplicate'));
  if (issued >= total) throw new lab.Refused(lab.result('sold-out'));
  lab.sqlCall(() =>
    tx.execute('INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)', [coupon, member]),
  );
  lab.sqlCall(() =>
    tx.execute('UPDATE coupons SET issued_count = issued_count + 1 WHERE id = ?', [coupon]),
  );
  lab.sqlCall(() => tx.commit());
  return lab.result('issued');
}

export const strategy = {
  describe() {
    return lab.descriptor(
      'JS_PESSIMISTIC',
      ['total', 'member', 'acked'],
      'PESSIMISTIC in JavaScript: SELECT ... FOR UPDATE, then check and write under the lock',
    );
  },
  issue({ couponId, memberId }) {
    // A refused request's open transaction is rolled back by the host when
    // the call ends.
    return lab.settle(() => issue(couponId, memberId));
  },
  compensate() {
    return lab.nothingToUndo();
  },
};
