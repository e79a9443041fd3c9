//! Components on trial: a canary's component, not yet serving its method,
//! confirms the work of its scratch coupons alone (the canary's).

use std::collections::BTreeMap;
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::loaded::Strategy;

/// The components on trial, by the scratch coupons their canaries run on.
#[derive(Default)]
pub struct Trials(ArcSwap<BTreeMap<u64, Arc<Strategy>>>);

impl Trials {
    /// The component on trial on `coupon_id`, if any.
    pub fn on(&self, coupon_id: u64) -> Option<Arc<Strategy>> {
        self.0.load().get(&coupon_id).cloned()
    }

    /// Every component on trial now, by scratch coupon.
    pub fn all(&self) -> Arc<BTreeMap<u64, Arc<Strategy>>> {
        self.0.load_full()
    }

    /// Puts `strategy` on trial on `coupons`: the consumers hand it the work
    /// of those coupons until [`Trials::end`].
    pub fn begin(&self, coupons: &[u64], strategy: &Arc<Strategy>) {
        self.0.rcu(|trials| {
            let mut trials = (**trials).clone();
            trials.extend(coupons.iter().map(|coupon| (*coupon, strategy.clone())));
            trials
        });
    }

    pub fn end(&self, coupons: &[u64]) {
        self.0.rcu(|trials| {
            let mut trials = (**trials).clone();
            trials.retain(|coupon, _| !coupons.contains(coupon));
            trials
        });
    }
}
