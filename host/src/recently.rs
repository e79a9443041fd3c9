//! Which keys were done lately: a memo of when each was last done, so a
//! thing done often (announcing a coupon's stream on every request) is done
//! at most once an interval. Bounded: past [`REMEMBERED`] keys, those not
//! done within the interval are forgotten.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Keys remembered before the old ones are forgotten.
const REMEMBERED: usize = 4_096;

pub struct Recently<K> {
    last: Mutex<HashMap<K, Instant>>,
}

impl<K> Default for Recently<K> {
    fn default() -> Self {
        Self {
            last: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash> Recently<K> {
    /// Whether `key` is due (not done within `every`); if so, it counts as
    /// done now.
    pub fn due(&self, key: K, every: Duration) -> bool {
        let now = Instant::now();
        let mut last = self.last.lock();
        if last
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < every)
        {
            return false;
        }
        if last.len() >= REMEMBERED {
            last.retain(|_, at| now.duration_since(*at) < every);
        }
        last.insert(key, now);
        true
    }

    /// `key` was not done after all: it is due at once.
    pub fn forget(&self, key: &K) {
        self.last.lock().remove(key);
    }

    /// Forgets every key.
    pub fn clear(&self) {
        self.last.lock().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_due_once_an_interval_and_again_when_forgotten() {
        let recently = Recently::default();
        let every = Duration::from_secs(60);
        assert!(recently.due(1, every));
        assert!(!recently.due(1, every));
        assert!(recently.due(2, every));
        recently.forget(&1);
        assert!(recently.due(1, every));
        assert!(recently.due(3, Duration::ZERO) && recently.due(3, Duration::ZERO));
        recently.clear();
        assert!(recently.due(2, every));
    }
}
