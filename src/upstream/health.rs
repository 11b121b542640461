//! Passive health (outlier ejection) and balancing over a region's upstreams.
//!
//! Every upstream keeps a few atomics: requests in flight, consecutive failures, and an
//! ejection deadline. An upstream that fails `eject_after` times in a row (connect errors,
//! resets, timeouts) is ejected — skipped by balancing — for `ejection_ms`, doubled at each
//! ejection in a row up to `max_ejection_ms`. When the time is up it is back on probation, one
//! request at a time: its next result decides, a success clears its record, a failure ejects it again at once for
//! twice as long. No more than `max_ejected_percent` of a region (at least one upstream) is
//! ejected for failures while another upstream may be fine, so a bad day does not empty a
//! region by accident; when every upstream is failing, all are ejected and the region
//! answers 503 at once (docs/data-path.md) instead of making each request wait for a dead upstream.
//!
//! Balancing is power-of-two-choices on requests in flight (Mitzenmacher): the round-robin
//! next upstream against a random other one, the less busy wins, a tie goes to round-robin
//! (so an idle router spreads requests evenly). All lock-free.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::config::HealthPolicy;

use super::regions::Upstream;

use crate::clock::now_ms;

/// RFC 3339 text of the wall-clock time `ms` from now: [`now_ms`] is monotonic, so reports
/// for people convert through the system clock.
fn wall_clock_in(ms: u64) -> String {
    crate::table::rfc3339_ms(crate::clock::unix_ms() + ms)
}

/// One upstream's health record.
#[derive(Debug, Default)]
pub struct Health {
    /// Shared with the [`InFlight`] guards, which live as long as their response bodies.
    in_flight: Arc<AtomicU32>,
    failures: AtomicU32,
    ejected_until: AtomicU64,
    ejections: AtomicU32,
    probation: AtomicBool,
    /// Set by a failing active health check, cleared by a passing one.
    check_failed: AtomicBool,
}

impl Health {
    /// Whether balancing may pick this upstream at `now` (ms, [`now_ms`]).
    pub fn available(&self, now: u64) -> bool {
        !self.check_failed.load(Ordering::Relaxed)
            && self.ejected_until.load(Ordering::Relaxed) <= now
            // Back from an ejection, one request at a time probes it: a hung upstream then
            // costs one timeout per ejection, not one for every request sent meanwhile.
            && !(self.probation.load(Ordering::Relaxed) && self.in_flight() > 0)
    }

    /// Whether it counts in its region's health share at `now` (docs/failover.md): neither
    /// ejected nor failing its active check (one probing after an ejection counts).
    pub fn in_rotation(&self, now: u64) -> bool {
        !self.check_failed.load(Ordering::Relaxed)
            && self.ejected_until.load(Ordering::Relaxed) <= now
    }

    /// The record as the admin API reports it at `now` (ms, [`now_ms`]): `state` is
    /// `healthy`, `ejected` (with `ejected_for_ms`, what is left of it, and `ejected_until`, RFC 3339), `probing` (back from an ejection, one
    /// request at a time) or `check_failed` (the active check fails).
    pub fn report(&self, now: u64) -> serde_json::Value {
        let until = self.ejected_until();
        let state = if self.check_failed.load(Ordering::Relaxed) {
            "check_failed"
        } else if until > now {
            "ejected"
        } else if self.probation.load(Ordering::Relaxed) {
            "probing"
        } else {
            "healthy"
        };
        serde_json::json!({
            "state": state,
            "ejected_for_ms": (until > now).then(|| until - now),
            "ejected_until": (until > now).then(|| wall_clock_in(until - now)),
            "in_flight": self.in_flight(),
            "consecutive_failures": self.failures.load(Ordering::Relaxed),
            "ejections": self.ejections.load(Ordering::Relaxed),
        })
    }

    /// When an ejection ends (ms, [`now_ms`]); 0 when not ejected.
    pub fn ejected_until(&self) -> u64 {
        self.ejected_until.load(Ordering::Relaxed)
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Counts a request in flight until the guard drops; the guard is owned, so it can go
    /// with the response body and count the request until the body is done.
    pub fn start(&self) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        InFlight(Arc::clone(&self.in_flight))
    }

    /// A request got response headers: the record is cleared.
    pub fn success(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
        if self.probation.swap(false, Ordering::Relaxed) {
            self.ejections.store(0, Ordering::Relaxed);
        }
    }

    /// The result of an active health check. A check that passes also ends an ejection
    /// (the upstream stays on probation: its next request decides), as Envoy's
    /// `successful_active_health_check_uneject_host` does by default: a region cut off by a
    /// partition is back within a check interval of the link's return, not at the end of an
    /// ejection that doubled while the link was down (up to `max_ejection_ms`).
    pub fn checked(&self, passed: bool) {
        self.check_failed.store(!passed, Ordering::Relaxed);
        if passed && self.ejected_until.load(Ordering::Relaxed) != 0 {
            self.ejected_until.store(0, Ordering::Relaxed);
        }
    }

    fn eject(&self, now: u64, policy: &HealthPolicy) -> u64 {
        let n = self.ejections.fetch_add(1, Ordering::Relaxed);
        let ms = policy
            .ejection_ms
            .saturating_mul(1 << n.min(20))
            .min(policy.max_ejection_ms.max(policy.ejection_ms));
        self.ejected_until.store(now + ms, Ordering::Relaxed);
        self.failures.store(0, Ordering::Relaxed);
        self.probation.store(true, Ordering::Relaxed);
        ms
    }
}

/// Counts one request in flight on an upstream.
#[derive(Debug)]
pub struct InFlight(Arc<AtomicU32>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Records a failure of `upstreams[i]`; returns the ejection time in ms if it was ejected.
pub fn record_failure(upstreams: &[Upstream], i: usize, policy: &HealthPolicy) -> Option<u64> {
    let now = now_ms();
    let health = &upstreams[i].state.health;
    let failures = health.failures.fetch_add(1, Ordering::Relaxed) + 1;
    let on_probation = health.probation.load(Ordering::Relaxed);
    if !on_probation && failures < policy.eject_after.max(1) {
        return None;
    }
    let ejected = upstreams
        .iter()
        .filter(|u| u.state.health.ejected_until() > now)
        .count();
    let allowed = (upstreams.len() * policy.max_ejected_percent as usize / 100).max(1);
    // The cap keeps traffic on upstreams that may be fine; when every other upstream still
    // in rotation is failing too, there is none such, and the region is out (docs/data-path.md: 503).
    let threshold = policy.eject_after.max(1);
    let another_may_be_fine = upstreams.iter().enumerate().any(|(j, u)| {
        let h = &u.state.health;
        j != i
            && h.ejected_until() <= now
            && !h.check_failed.load(Ordering::Relaxed)
            && h.failures.load(Ordering::Relaxed) < threshold
    });
    if ejected >= allowed && another_may_be_fine {
        return None;
    }
    Some(health.eject(now, policy))
}

/// What [`pick`] chose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The index of the upstream to use.
    Upstream(usize),
    /// Every upstream is ejected or failing its health check; the soonest returns in this
    /// many ms.
    AllEjected {
        /// Until the first ejection ends, in ms (0 when only health checks keep them out).
        retry_after_ms: u64,
    },
    /// Every available upstream was tried already.
    Exhausted,
}

/// Picks an upstream not in `tried` (a bitmask of indices modulo 64).
pub fn pick(upstreams: &[Upstream], cursor: &AtomicUsize, tried: u64) -> Pick {
    let n = upstreams.len();
    let now = now_ms();
    let usable =
        |i: usize| tried & (1 << (i % 64)) == 0 && upstreams[i].state.health.available(now);
    // Only a request's first pick moves the round-robin: were retries to move it too, a
    // request retried once would shift every later one onto the upstream that just failed.
    let start = if tried == 0 {
        cursor.fetch_add(1, Ordering::Relaxed)
    } else {
        random() as usize
    };
    let Some(first) = (0..n).map(|k| (start + k) % n).find(|&i| usable(i)) else {
        if tried != 0 {
            return Pick::Exhausted;
        }
        let soonest = upstreams
            .iter()
            .map(|u| u.state.health.ejected_until())
            .filter(|&t| t > now)
            .min()
            .map_or(0, |t| t - now);
        return Pick::AllEjected {
            retry_after_ms: soonest,
        };
    };
    if n > 1 {
        let r = random() as usize;
        if let Some(second) = (0..n)
            .map(|k| (r + k) % n)
            .find(|&i| i != first && usable(i))
        {
            let (a, b) = (
                &upstreams[first].state.health,
                &upstreams[second].state.health,
            );
            if b.in_flight() < a.in_flight() {
                return Pick::Upstream(second);
            }
        }
    }
    Pick::Upstream(first)
}

/// A per-thread xorshift: balancing (and the failover draw) needs spread, not
/// unpredictability.
pub(super) fn random() -> u64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new(iuid::Generator::new(0, 0).mint().rand() | 1);
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Timeouts;
    use crate::upstream::UpstreamState;
    use std::sync::Arc;

    fn upstreams(n: usize) -> Vec<Upstream> {
        (0..n)
            .map(|i| {
                let authority: http::uri::Authority = format!("127.0.0.1:{}", 10_000 + i)
                    .parse()
                    .expect("authority");
                let spec = crate::table::UpstreamSpec {
                    url: format!("http://{authority}"),
                    authority: authority.clone(),
                    tls: None,
                    protocol: crate::table::UpstreamProtocol::Http1,
                };
                Upstream {
                    state: Arc::new(UpstreamState::new(
                        &spec,
                        &Timeouts::default(),
                        Default::default(),
                        1,
                    )),
                    authority,
                }
            })
            .collect()
    }

    #[test]
    fn ejection_backs_off_and_probation_decides() {
        let ups = upstreams(2);
        let policy = HealthPolicy {
            eject_after: 3,
            ejection_ms: 100,
            max_ejection_ms: 350,
            max_ejected_percent: 50,
        };
        assert_eq!(record_failure(&ups, 0, &policy), None);
        assert_eq!(record_failure(&ups, 0, &policy), None);
        assert_eq!(record_failure(&ups, 0, &policy), Some(100));
        assert!(!ups[0].state.health.available(now_ms()));
        // Only one of two may be out (50 %) ... while the other may be fine: below the
        // threshold it stays, and once it fails as often it goes too (the whole region out).
        assert_eq!(record_failure(&ups, 1, &policy), None);
        assert_eq!(record_failure(&ups, 1, &policy), None);
        assert_eq!(record_failure(&ups, 1, &policy), Some(100));
        ups[1]
            .state
            .health
            .ejected_until
            .store(0, Ordering::Relaxed);
        ups[1].state.health.success();
        // Back on probation, one failure ejects again, for twice as long, capped.
        ups[0]
            .state
            .health
            .ejected_until
            .store(0, Ordering::Relaxed);
        assert_eq!(record_failure(&ups, 0, &policy), Some(200));
        ups[0]
            .state
            .health
            .ejected_until
            .store(0, Ordering::Relaxed);
        assert_eq!(record_failure(&ups, 0, &policy), Some(350));
        // A success on probation clears the record.
        ups[0]
            .state
            .health
            .ejected_until
            .store(0, Ordering::Relaxed);
        ups[0].state.health.success();
        assert_eq!(record_failure(&ups, 0, &policy), None);
    }

    /// A passing active check ends an ejection at once; the upstream is on probation, so one
    /// failure ejects it again, for longer.
    #[test]
    fn a_passing_check_ends_an_ejection() {
        let ups = upstreams(1);
        let policy = HealthPolicy {
            eject_after: 1,
            ejection_ms: 60_000,
            max_ejection_ms: 600_000,
            max_ejected_percent: 100,
        };
        assert_eq!(record_failure(&ups, 0, &policy), Some(60_000));
        let health = &ups[0].state.health;
        assert!(!health.available(now_ms()));
        health.checked(false);
        assert!(!health.available(now_ms()));
        health.checked(true);
        assert!(health.available(now_ms()));
        assert_eq!(record_failure(&ups, 0, &policy), Some(120_000));
    }

    #[test]
    fn pick_skips_ejected_and_tried_and_says_when_all_are_out() {
        let ups = upstreams(3);
        let cursor = AtomicUsize::new(0);
        let picks: Vec<Pick> = (0..3).map(|_| pick(&ups, &cursor, 0)).collect();
        assert_eq!(
            picks,
            [Pick::Upstream(0), Pick::Upstream(1), Pick::Upstream(2)]
        );
        assert_eq!(pick(&ups, &cursor, 0b011), Pick::Upstream(2));
        assert_eq!(pick(&ups, &cursor, 0b111), Pick::Exhausted);
        let until = now_ms() + 2_000;
        for u in &ups {
            u.state.health.ejected_until.store(until, Ordering::Relaxed);
        }
        match pick(&ups, &cursor, 0) {
            Pick::AllEjected { retry_after_ms } => assert!(retry_after_ms > 1_500),
            other => panic!("{other:?}"),
        }
        // Busy upstreams lose the two-choice draw.
        let ups = upstreams(2);
        let _busy = (0..5)
            .map(|_| ups[0].state.health.start())
            .collect::<Vec<_>>();
        let cursor = AtomicUsize::new(0);
        assert!((0..10).all(|_| pick(&ups, &cursor, 0) == Pick::Upstream(1)));
    }

    #[test]
    fn the_ejection_cap_holds_while_another_upstream_may_be_fine() {
        let ups = upstreams(3);
        let policy = HealthPolicy {
            eject_after: 2,
            ejection_ms: 1_000,
            max_ejection_ms: 1_000,
            max_ejected_percent: 34,
        };
        for _ in 0..2 {
            record_failure(&ups, 0, &policy);
        }
        assert!(!ups[0].state.health.available(now_ms()), "the first goes");
        // Upstream 2 is fine: however often 1 fails, the cap (one of three) keeps it.
        for _ in 0..10 {
            assert_eq!(record_failure(&ups, 1, &policy), None);
        }
        // Now 2 fails as well: nothing in rotation may be fine, so both go.
        assert_eq!(record_failure(&ups, 2, &policy), None);
        assert_eq!(record_failure(&ups, 2, &policy), Some(1_000));
        assert_eq!(record_failure(&ups, 1, &policy), Some(1_000));
        let cursor = AtomicUsize::new(0);
        assert!(matches!(
            pick(&ups, &cursor, 0),
            Pick::AllEjected { retry_after_ms } if retry_after_ms > 0
        ));
    }

    #[test]
    fn on_probation_one_request_at_a_time_probes() {
        let ups = upstreams(1);
        let policy = HealthPolicy {
            eject_after: 1,
            ..HealthPolicy::default()
        };
        let health = &ups[0].state.health;
        assert!(record_failure(&ups, 0, &policy).is_some());
        health.ejected_until.store(0, Ordering::Relaxed);
        assert!(health.available(now_ms()), "the ejection is over: probe it");
        let probe = health.start();
        assert!(!health.available(now_ms()), "one probe at a time");
        drop(probe);
        assert!(
            health.available(now_ms()),
            "no answer yet: the next request probes"
        );
        let probe = health.start();
        health.success();
        assert!(
            health.available(now_ms()),
            "it answered: full traffic again"
        );
        drop(probe);
    }

    #[test]
    fn retries_do_not_move_the_round_robin() {
        let ups = upstreams(2);
        let cursor = AtomicUsize::new(0);
        let mut firsts = Vec::new();
        for _ in 0..6 {
            let Pick::Upstream(first) = pick(&ups, &cursor, 0) else {
                panic!("an upstream is free");
            };
            // Every request fails once and is retried on the other upstream.
            assert_eq!(pick(&ups, &cursor, 1 << first), Pick::Upstream(1 - first));
            firsts.push(first);
        }
        assert_eq!(firsts, [0, 1, 0, 1, 0, 1], "first attempts still alternate");
    }
}
