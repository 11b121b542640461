//! The retry budget: retries may add at most a share of the traffic, plus a small floor.
//!
//! Each request deposits `percent / 100` of a token; each retry withdraws one. A reserve that
//! refills at `min_per_second` lets a quiet region still retry. When an upstream fails for
//! everyone, retries stop at that share instead of multiplying the load on the survivors
//! (the design of Finagle's and Linkerd's retry budgets). Lock-free: two atomics.
//!
//! What a calm spell saves is bounded by the budget's depth: 1,000 tokens for a region's
//! retries, `min_per_second` for legacy probes ([`RetryBudget::with_depth`]), so that the
//! share saved over thousands of answered requests cannot burst into every other region at
//! once when a flood of unknown ids comes.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::config::RetryPolicy;

use crate::clock::now_ms;

/// Tokens are counted in thousandths.
const UNIT: u64 = 1000;
/// Most tokens saved from deposits: a burst of retries after a long calm is still bounded.
const MAX_SAVED: u64 = 1000 * UNIT;

/// One region's retry budget.
#[derive(Debug)]
pub struct RetryBudget {
    saved: AtomicU64,
    /// Most tokens saved, in thousandths.
    depth: u64,
    /// `(refill second stamp << 32) | reserve tokens left in that second`.
    reserve: AtomicU64,
}

impl Default for RetryBudget {
    /// A region's retry budget: up to 1,000 retries saved.
    fn default() -> Self {
        RetryBudget {
            saved: AtomicU64::new(0),
            depth: MAX_SAVED,
            reserve: AtomicU64::new(0),
        }
    }
}

impl RetryBudget {
    /// A budget that saves at most `tokens` withdrawals (at least one): a burst after a
    /// calm spell is at most `tokens` plus the second's floor.
    pub fn with_depth(tokens: u32) -> RetryBudget {
        RetryBudget {
            depth: u64::from(tokens.max(1)) * UNIT,
            ..RetryBudget::default()
        }
    }

    /// Called once per request.
    pub fn deposit(&self, policy: &RetryPolicy) {
        let add = u64::from(policy.budget_percent) * UNIT / 100;
        let depth = self.depth;
        let _ = self
            .saved
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                (t < depth).then(|| (t + add).min(depth))
            });
    }

    /// Takes one retry from the budget; false when it is spent.
    pub fn withdraw(&self, policy: &RetryPolicy) -> bool {
        let took = self
            .saved
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| {
                t.checked_sub(UNIT)
            });
        if took.is_ok() {
            return true;
        }
        // Seconds are stamped from 1, so the zeroed start never looks like "this second".
        let stamp = (now_ms() / 1000 + 1) & 0xffff_ffff;
        self.reserve
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                let (at, left) = (r >> 32, r & 0xffff_ffff);
                let left = if at == stamp {
                    left
                } else {
                    u64::from(policy.min_per_second)
                };
                left.checked_sub(1).map(|l| (stamp << 32) | l)
            })
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_are_a_share_of_requests_plus_a_floor() {
        let policy = RetryPolicy {
            budget_percent: 20,
            min_per_second: 3,
            ..RetryPolicy::default()
        };
        let budget = RetryBudget::default();
        for _ in 0..100 {
            budget.deposit(&policy);
        }
        let granted = (0..1000).filter(|_| budget.withdraw(&policy)).count();
        // 20 from the share; the floor adds 3 (or 6 if the second turned meanwhile).
        assert!((23..=26).contains(&granted), "{granted}");
    }

    #[test]
    fn a_calm_spell_saves_no_more_than_the_depth() {
        let policy = RetryPolicy {
            budget_percent: 20,
            min_per_second: 5,
            ..RetryPolicy::default()
        };
        let budget = RetryBudget::with_depth(policy.min_per_second);
        for _ in 0..10_000 {
            budget.deposit(&policy);
        }
        let granted = (0..1000).filter(|_| budget.withdraw(&policy)).count();
        // 5 saved, 5 of the floor (10 if the second turned meanwhile); a region's budget
        // would have saved 1,000.
        assert!((10..=15).contains(&granted), "{granted}");
        // Afterwards the share still holds: 5 requests save one more.
        for _ in 0..5 {
            budget.deposit(&policy);
        }
        assert!(budget.withdraw(&policy));
    }
}
