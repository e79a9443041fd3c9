// couponlab's sdk for strategies in JavaScript: the steps the Rust sdk
// shares between methods, over the same WIT imports (bindings by
// componentize-js).
//
// The names and scripts come from one source: `couponlab_contract.js` is
// written at build time by `cargo xtask strategies` from the contract crate
// and `lua/`, as the Rust sdk and the host read them.
//
// A step that ends the request throws `Refused` with the answer; `settle`
// turns it into the call's result. WIT errors arrive as thrown errors whose
// `payload` is the error's case ({ tag, val }). Integers of 64 bits are
// BigInts.

import * as redis from 'couponlab:strategy/redis@0.2.0';
import * as sql from 'couponlab:strategy/sql@0.2.0';
import * as contract from './couponlab_contract.js';

export class Refused extends Error {
  constructor(result) {
    super(result.detail ?? result.outcome);
    this.result = result;
  }
}

export function result(outcome, detail, { compensations = 0, settleLater = false } = {}) {
  return { outcome, detail, retries: 0, compensations, labels: [], settleLater };
}

/** The result of `step()`, or the answer a refusal carries. */
export function settle(step) {
  try {
    return step();
  } catch (err) {
    if (err instanceof Refused) return err.result;
    throw err;
  }
}

// `engineClaims`: `{ engine, claims, why }` for each engine on which the
// method promises other claims than `claims`; the lab judges it there by
// those.
export function descriptor(method, claims, summary, { reservationSet = false, engineClaims = [] } = {}) {
  return { method, claims, summary, reservationSet, resultLabels: [], engineClaims };
}

export function compensation(undone, detail, unfinished = false) {
  return { undone, detail, unfinished };
}

export function confirmation(issued, couponId, memberId) {
  return {
    couponId,
    memberId,
    outcome: issued.outcome,
    detail: issued.detail,
    compensations: issued.compensations,
    settleLater: issued.settleLater,
  };
}

// Errors, as the Rust sdk's `From` conversions give them.

const SQL_OUTCOMES = {
  deadlock: 'deadlock',
  'lock-wait-timeout': 'lock-wait-timeout',
  'serialization-failure': 'serialization-failure',
  'duplicate-key': 'duplicate',
  // coupon_issues has one foreign key: member_id.
  'foreign-key': 'unknown-member',
};

/** The WIT error a call threw, or the exception itself if it is none. */
function witError(err) {
  if (err && err.payload && err.payload.tag) return err.payload;
  throw err;
}

export function fromSql(error) {
  // Only the database can say what a COMMIT whose answer was lost did.
  return result(SQL_OUTCOMES[error.tag] ?? 'unavailable', `${error.tag}: ${error.val}`, {
    settleLater: error.tag === 'indeterminate',
  });
}

/** `wrote`: a write whose connection failed may have run, so the request
 * is settled later by `compensate`. */
export function fromRedis(error, wrote = false) {
  return result('unavailable', `Redis: ${error.val}`, {
    settleLater: wrote && error.tag === 'connection',
  });
}

export function sqlCall(call) {
  try {
    return call();
  } catch (err) {
    throw new Refused(fromSql(witError(err)));
  }
}

export function redisCall(call, wrote = false) {
  try {
    return call();
  } catch (err) {
    throw new Refused(fromRedis(witError(err), wrote));
  }
}

/** The reply's root as a number (an integer, or a string of one). */
export function integer(reply) {
  const root = reply[0];
  if (root.tag === 'int') return Number(root.val);
  if (root.tag === 'data') {
    const text = new TextDecoder().decode(root.val);
    return /^-?\d+$/.test(text) ? Number(text) : undefined;
  }
  return undefined;
}

export function uint(n) {
  return { tag: 'uint', val: BigInt(n) };
}

/** A numeric column's value. */
export function number(value) {
  return Number(value.val);
}

export function scalar(rows) {
  const row = rows.rows[0];
  return row && row.length ? number(row[0]) : undefined;
}

// The coupon's total in Redis, re-read from the database when missing.

export function warmTotal(couponId) {
  const rows = sqlCall(() =>
    sql.query('SELECT total_count FROM coupons WHERE id = ?', [uint(couponId)]),
  );
  const total = scalar(rows);
  if (total === undefined) throw new Refused(result('unknown-coupon'));
  redisCall(() => redis.execute('SET', [contract.total(couponId), String(total)]));
  return total;
}

// The Lua reservations (reply 1 reserved, 0 sold out, 2 duplicate, -1 no
// total in Redis).

function decide(script, keys, argv, couponId) {
  const run = () => integer(redisCall(() => redis.eval(script, keys, argv), true));
  let verdict = run();
  if (verdict === -1) {
    warmTotal(couponId);
    verdict = run();
  }
  if (verdict === 1) return;
  if (verdict === 0) throw new Refused(result('sold-out'));
  if (verdict === 2) throw new Refused(result('duplicate'));
  throw new Refused(result('unavailable', `unexpected reservation reply ${verdict}`));
}

export function reserveWithLua(couponId, memberId) {
  const keys = [contract.issued(couponId), contract.total(couponId)];
  decide(contract.RESERVE_LUA, keys, [String(memberId)], couponId);
}

export function reserveAndEnqueue(couponId, memberId, method, nowMs) {
  const keys = [contract.issued(couponId), contract.total(couponId), contract.issueStream(couponId)];
  const argv = [String(memberId), String(couponId), method, String(nowMs)];
  decide(contract.RESERVE_AND_ENQUEUE_LUA, keys, argv, couponId);
}

// The shared confirm step: the issue row and the guarded count in one
// transaction. 'issued', 'sold-out-at-db', 'duplicate' or 'unknown-member';
// any other failure is thrown as its WIT error.

export function confirm(couponId, memberId) {
  try {
    const tx = sql.begin('engine-default');
    tx.execute('INSERT INTO coupon_issues (coupon_id, member_id) VALUES (?, ?)', [
      uint(couponId),
      uint(memberId),
    ]);
    const updated = tx.execute(
      'UPDATE coupons SET issued_count = issued_count + 1 WHERE id = ? AND issued_count < total_count',
      [uint(couponId)],
    );
    if (updated.rowsAffected === 0n) {
      tx.rollback();
      return 'sold-out-at-db';
    }
    tx.commit();
    return 'issued';
  } catch (err) {
    const error = witError(err);
    if (error.tag === 'duplicate-key') return 'duplicate';
    if (error.tag === 'foreign-key') return 'unknown-member';
    throw error;
  }
}

/** Removes the member's reservation after a failed confirm. */
export function release(couponId, memberId, failed) {
  try {
    redis.execute('SREM', [contract.issued(couponId), String(memberId)]);
  } catch (err) {
    const detail = `${failed.detail ?? 'confirm failed'}; the reservation could not be removed (${witError(err).val})`;
    return result(failed.outcome, detail, { compensations: failed.compensations, settleLater: true });
  }
  return { ...failed, compensations: failed.compensations + 1 };
}

export function confirmOrRelease(couponId, memberId) {
  let outcome;
  try {
    outcome = confirm(couponId, memberId);
  } catch (error) {
    const failed = fromSql(error);
    return failed.settleLater ? failed : release(couponId, memberId, failed);
  }
  if (outcome === 'issued' || outcome === 'duplicate') return result(outcome);
  return release(couponId, memberId, result(outcome));
}

// Compensation: what a call that ended without an answer leaves.

export function issued(couponId, memberId) {
  const rows = sql.query('SELECT 1 FROM coupon_issues WHERE coupon_id = ? AND member_id = ?', [
    uint(couponId),
    uint(memberId),
  ]);
  return rows.rows.length > 0;
}

export function nothingToUndo() {
  return compensation(0, 'nothing to undo: the transaction was rolled back');
}

export function releaseUnlessIssued(couponId, memberId) {
  try {
    if (issued(couponId, memberId)) {
      return compensation(0, "the member's coupon was issued; the reservation stays");
    }
  } catch (err) {
    return compensation(0, `the issue rows could not be read (${witError(err).val}); the reservation stays`, true);
  }
  let removed;
  try {
    removed = integer(redis.execute('SREM', [contract.issued(couponId), String(memberId)]));
  } catch (err) {
    return compensation(0, `the reservation could not be removed: ${witError(err).val}`, true);
  }
  return removed === 1
    ? compensation(1, 'the reservation was removed')
    : compensation(0, 'there was no reservation to remove');
}

export function carriedByEntry() {
  return compensation(
    0,
    'the reservation and its stream entry were written together; the consumer finishes it',
  );
}

// A stream consumer's entry.

function entryIds(entry) {
  const fields = Object.fromEntries(entry.fields);
  const [couponId, memberId] = [fields[contract.FIELD_COUPON_ID], fields[contract.FIELD_MEMBER_ID]];
  if (!/^\d+$/.test(couponId ?? '') || !/^\d+$/.test(memberId ?? '')) return undefined;
  return [BigInt(couponId), BigInt(memberId)];
}

export function handleEntry(entry) {
  const ids = entryIds(entry);
  if (!ids) {
    const unreadable = result('unavailable', `entry ${entry.id} has no couponId/memberId`);
    return { confirmation: confirmation(unreadable, 0n, 0n), disposition: 'retry' };
  }
  const [couponId, memberId] = ids;
  let outcome;
  try {
    outcome = confirm(couponId, memberId);
  } catch (error) {
    return { confirmation: confirmation(fromSql(error), couponId, memberId), disposition: 'retry' };
  }
  const done =
    outcome === 'issued' || outcome === 'duplicate'
      ? result(outcome)
      : release(couponId, memberId, result(outcome));
  return { confirmation: confirmation(done, couponId, memberId), disposition: 'ack' };
}

export function deadLetter(entry) {
  let detail = `dead-lettered after ${entry.deliveries} deliveries`;
  const ids = entryIds(entry);
  if (!ids) return confirmation(result('unavailable', detail), 0n, 0n);
  const [couponId, memberId] = ids;
  let committed;
  try {
    committed = issued(couponId, memberId);
  } catch (err) {
    detail = `${detail}; the issue rows could not be read (${witError(err).val}), the reservation stays`;
    return confirmation(result('unavailable', detail, { settleLater: true }), couponId, memberId);
  }
  const done = committed
    ? result('issued', `${detail}; a delivery committed though its answer was lost`)
    : release(couponId, memberId, result('unavailable', detail));
  return confirmation(done, couponId, memberId);
}
