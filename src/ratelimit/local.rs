//! One rule's counters in this edge's memory: `governor`'s keyed GCRA over a sharded map
//! (`DashMap`), keyed by a 64-bit hash of the key's bytes, so a check allocates nothing once
//! its key is known and a new key costs one map entry (about 40 bytes with the map's spare
//! capacity). Idle keys (whose state is again that of a fresh key) are evicted every second
//! (`RateLimits::housekeep`), which bounds memory by the keys seen within a rule's window.
//! The keys refused most are kept apart, a few and only on refusal, for the admin API.

use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::state::keyed::DashMapStateStore;
use governor::{Quota, RateLimiter};
use rustc_hash::FxBuildHasher;

use crate::config::Rate;

type Limiter = RateLimiter<u64, DashMapStateStore<u64, FxBuildHasher>, DefaultClock>;

/// How many refused keys a rule remembers for the admin API (the ones refused most in the
/// current minute).
const TOP_KEYS: usize = 16;

/// One rule's in-memory GCRA state, per key.
pub(super) struct Local {
    limiter: Limiter,
    top: Mutex<Vec<TopKey>>,
}

/// A key refused in the current minute, and how often.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TopKey {
    /// The key as text (at most 64 bytes of it).
    pub key: String,
    /// Requests refused for it.
    pub refused: u64,
    #[serde(skip)]
    hash: u64,
}

impl Local {
    /// A limiter of `rate` with `burst` extra: from idle, `burst + 1` requests pass at once.
    pub(super) fn new(rate: Rate, burst: u32) -> Local {
        let interval = rate.interval().max(Duration::from_nanos(1));
        let cells = NonZeroU32::new(burst.saturating_add(1)).unwrap_or(NonZeroU32::MIN);
        // `with_period` refuses only a zero interval, which `max` rules out.
        let quota = Quota::with_period(interval)
            .unwrap_or(Quota::per_second(NonZeroU32::MIN))
            .allow_burst(cells);
        Local {
            limiter: RateLimiter::dashmap_with_clock_and_hasher(
                quota,
                DefaultClock::default(),
                FxBuildHasher,
            ),
            top: Mutex::new(Vec::new()),
        }
    }

    /// One request for the key hashed to `key`. Errors: how long until it would conform.
    pub(super) fn check(&self, key: u64) -> Result<(), Duration> {
        self.limiter
            .check_key(&key)
            .map_err(|not_until| not_until.wait_time_from(self.limiter.clock().now()))
    }

    /// Notes a refusal of `key` (its text made only when it is new to the list).
    pub(super) fn note_refused(&self, key: u64, text: impl FnOnce() -> String) {
        let Ok(mut top) = self.top.lock() else {
            return;
        };
        if let Some(entry) = top.iter_mut().find(|e| e.hash == key) {
            entry.refused += 1;
            return;
        }
        let entry = TopKey {
            key: text(),
            refused: 1,
            hash: key,
        };
        if top.len() < TOP_KEYS {
            top.push(entry);
        } else if let Some(least) = top.iter_mut().min_by_key(|e| e.refused) {
            // Space-saving: the newcomer takes the least one's place and its count, so a
            // key refused often rises even when the list is full.
            let refused = least.refused + 1;
            *least = TopKey { refused, ..entry };
        }
    }

    /// The keys refused most in the current minute, most first.
    pub(super) fn top(&self) -> Vec<TopKey> {
        let mut top = self.top.lock().map(|t| t.clone()).unwrap_or_default();
        top.sort_by_key(|e| std::cmp::Reverse(e.refused));
        top
    }

    /// Starts a new minute of refused keys.
    pub(super) fn rotate_top(&self) {
        if let Ok(mut top) = self.top.lock() {
            top.clear();
        }
    }

    /// Drops the keys whose state is that of a fresh key (idle for the rule's whole
    /// window); the keys left.
    pub(super) fn evict_idle(&self) -> usize {
        let before = self.limiter.len();
        self.limiter.retain_recent();
        let after = self.limiter.len();
        if after < before / 2 {
            // The map's spare capacity goes too, or a flood that has passed would keep it.
            self.limiter.shrink_to_fit();
        }
        after
    }

    /// The keys held now.
    pub(super) fn keys(&self) -> usize {
        self.limiter.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_plus_one_pass_at_once_then_one_per_interval() {
        let local = Local::new(Rate::parse("10/s").expect("rate"), 2);
        for _ in 0..3 {
            assert!(local.check(7).is_ok());
        }
        let wait = local.check(7).expect_err("the fourth waits");
        assert!(wait <= Duration::from_millis(100), "{wait:?}");
        assert!(local.check(8).is_ok(), "another key has its own budget");
        std::thread::sleep(Duration::from_millis(110));
        assert!(local.check(7).is_ok(), "one cell drained");
        assert!(local.check(7).is_err());
    }

    #[test]
    fn idle_keys_are_evicted() {
        let local = Local::new(Rate::parse("1000/s").expect("rate"), 0);
        for key in 0..1000 {
            let _ = local.check(key);
        }
        assert_eq!(local.keys(), 1000);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(local.evict_idle(), 0);
    }

    #[test]
    fn the_top_list_stays_bounded_and_keeps_the_most_refused() {
        let local = Local::new(Rate::parse("1/s").expect("rate"), 0);
        for _ in 0..50 {
            local.note_refused(1, || "hot".into());
        }
        for key in 2..100 {
            local.note_refused(key, || format!("k{key}"));
        }
        let top = local.top();
        assert_eq!(top.len(), TOP_KEYS);
        assert_eq!((top[0].key.as_str(), top[0].refused), ("hot", 50));
    }
}
