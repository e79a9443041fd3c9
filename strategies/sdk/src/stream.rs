//! What a stream consumer does with one entry of a coupon's stream
//! `coupon:issue:stream:{couponId}` (stage 6). The host reads, claims, acks
//! and dead-letters; this decides.
//!
//! - issued, or a duplicate key (already issued, a redelivery included): ack;
//! - sold out at the DB or an unknown member: remove the reservation, ack;
//! - any other failure: leave it pending, to be delivered again;
//! - an entry that cannot be read at all is left pending too, so after its
//!   last delivery it lands in the dead-letter stream for someone to look at.

use crate::bindings::couponlab::strategy::types::{
    Confirmation, Disposition, Handled, IssueResult, Outcome, StreamEntry,
};
use crate::compensate;
use crate::confirm::{self, Confirmed};
use crate::keys::fields;

/// The `couponId` and `memberId` fields of an entry.
pub fn ids(entry: &StreamEntry) -> Option<(u64, u64)> {
    let field = |name: &str| {
        entry
            .fields
            .iter()
            .find(|(key, _)| key == name)?
            .1
            .parse::<u64>()
            .ok()
    };
    Some((field(fields::COUPON_ID)?, field(fields::MEMBER_ID)?))
}

/// Confirms the entry's reservation and says whether the host may ack it.
pub fn handle(entry: &StreamEntry) -> Handled {
    let Some((coupon_id, member_id)) = ids(entry) else {
        let detail = format!("entry {} has no couponId/memberId", entry.id);
        return Handled {
            confirmation: unreadable(detail),
            disposition: Disposition::Retry,
        };
    };
    let (result, disposition) = match confirm::confirm(coupon_id, member_id) {
        Confirmed::Issued => (IssueResult::issued(), Disposition::Ack),
        Confirmed::Duplicate => (IssueResult::of(Outcome::Duplicate), Disposition::Ack),
        Confirmed::SoldOutAtDb => (
            confirm::release(coupon_id, member_id, IssueResult::of(Outcome::SoldOutAtDb)),
            Disposition::Ack,
        ),
        Confirmed::UnknownMember => (
            confirm::release(
                coupon_id,
                member_id,
                IssueResult::of(Outcome::UnknownMember),
            ),
            Disposition::Ack,
        ),
        Confirmed::Failed(err) => (IssueResult::from(err), Disposition::Retry),
    };
    Handled {
        confirmation: result.confirmation(coupon_id, member_id),
        disposition,
    }
}

/// The entry was delivered too often: remove its reservation, unless one
/// of its deliveries committed (its answer lost) and the member has a row.
/// When the rows cannot be read now, the host settles it later.
pub fn dead_letter(entry: &StreamEntry) -> Confirmation {
    let detail = format!("dead-lettered after {} deliveries", entry.deliveries);
    let Some((coupon_id, member_id)) = ids(entry) else {
        return unreadable(detail);
    };
    let result = match compensate::issued(coupon_id, member_id) {
        Ok(true) => IssueResult::issued().detail(format!(
            "{detail}; a delivery committed though its answer was lost"
        )),
        Ok(false) => confirm::release(
            coupon_id,
            member_id,
            IssueResult::of(Outcome::Unavailable).detail(detail),
        ),
        Err(err) => IssueResult::of(Outcome::Unavailable)
            .detail(format!(
                "{detail}; the issue rows could not be read ({}), the reservation stays",
                err.message()
            ))
            .settle_later(),
    };
    result.confirmation(coupon_id, member_id)
}

/// The answer for an entry without its ids: there is no request to name.
pub(crate) fn unreadable(detail: String) -> Confirmation {
    IssueResult::of(Outcome::Unavailable)
        .detail(detail)
        .confirmation(0, 0)
}

/// Implements a `stream-issuer` crate's `stream-consumer` export with
/// [`handle`] and [`dead_letter`]: every stream method confirms its entries
/// the same way, whichever way it wrote them.
///
/// ```ignore
/// couponlab_sdk::stream_consumer!(RedisStream: stream_consumer::Guest);
/// ```
#[macro_export]
macro_rules! stream_consumer {
    ($ty:ident: $guest:path) => {
        impl $guest for $ty {
            fn handle_entry(entry: $crate::StreamEntry) -> $crate::Handled {
                $crate::stream::handle(&entry)
            }

            fn dead_letter(entry: $crate::StreamEntry) -> $crate::Confirmation {
                $crate::stream::dead_letter(&entry)
            }
        }
    };
}
