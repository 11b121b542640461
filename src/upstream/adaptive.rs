//! An adaptive concurrency limit for one region (`limits.adaptive: true`, issue 38).
//!
//! The limit follows latency: it shrinks while the region answers slower than its no-load
//! latency and grows back as it recovers, always within `[min, max_in_flight]`. The shape is
//! Envoy's gradient controller (adaptive concurrency filter, `gradient_controller.cc`,
//! <https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/adaptive_concurrency_filter>),
//! evaluated once per window:
//!
//! ```text
//! gradient = clamp((min_rtt + min_rtt / 4) / sample_rtt, 0.5, 2.0)   // Envoy's default 25 % buffer
//! new      = gradient * limit + sqrt(gradient * limit)      // Envoy's burst headroom
//! ```
//!
//! - `sample_rtt` is the mean latency of the window (Envoy takes a percentile; a mean needs
//!   only two atomic adds per sample). A window ends at the first sample at least [`WINDOW`]
//!   after its start that has seen [`MIN_SAMPLES`] samples; with fewer it goes on.
//! - `min_rtt`, the no-load latency, is the lowest window mean of this [`MIN_RTT_INTERVAL`]
//!   and of the previous one, so a lasting change of the region's baseline is taken after
//!   30–60 s. Envoy instead pins the concurrency to a few requests every interval to measure
//!   it; we do not: it is simpler and sacrifices no requests. The cost is that a slowdown
//!   lasting over 30–60 s becomes the new baseline; `max_in_flight` stays the hard cap.
//! - App-limited windows (Netflix concurrency-limits, `Gradient2Limit.java`: "don't grow the
//!   limit if we are app limited"): growth is capped at `2 * peak + sqrt(2 * peak)`, `peak`
//!   being the most requests in flight seen in the window; a limit already above that stays
//!   where it is, since a limit the load never reached says nothing about the region.
//!
//! So 10 ms → 200 ms sustained halves the limit (plus headroom) each window down to `min`,
//! and back at 10 ms it grows by ×1.25 plus headroom (up to ×2 if faster than `min_rtt`)
//! per window back to `max`, as long as the load fills it.
//!
//! Lock-free: atomics only, no allocation. One caller, the one whose compare-exchange on the
//! window start wins, computes the new limit; others never wait. Samples landing in the few
//! nanoseconds between that exchange and the reset of the sums may be counted in the wrong
//! window (or their latency without their count): the mean is then slightly off, no more.

use std::sync::atomic::Ordering::{AcqRel, Relaxed, SeqCst};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::{Duration, Instant};

/// Length of a sampling window: ten updates a second (the 0.1 s of Envoy's example config).
pub const WINDOW: Duration = Duration::from_millis(100);
/// Samples a window needs before it may end: fewer make too noisy a mean.
pub const MIN_SAMPLES: u64 = 8;
/// Length of one of the two `min_rtt` buckets: a new baseline is taken after 30–60 s.
pub const MIN_RTT_INTERVAL: Duration = Duration::from_secs(30);
/// One sample's latency is capped here (about 18 minutes) so a window's sum cannot wrap.
const MAX_RTT_NS: u64 = 1 << 40;
/// An empty `min_rtt` bucket.
const NONE: u64 = u64::MAX;

/// One region's adaptive concurrency limit; see the module doc for the algorithm.
#[derive(Debug)]
pub struct AdaptiveLimit {
    /// Time zero for the nanosecond stamps below.
    epoch: Instant,
    /// `(min << 32) | max`, one atomic so that a reader never sees half a reload.
    bounds: AtomicU64,
    limit: AtomicUsize,
    /// Start of the current window, ns since `epoch`.
    window_start: AtomicU64,
    /// The current window: sum of latencies (ns), count, most requests in flight.
    sum_ns: AtomicU64,
    count: AtomicU64,
    peak: AtomicUsize,
    /// Lowest window mean (ns) of this interval and of the previous one, `NONE` if none.
    min_rtt_cur: AtomicU64,
    min_rtt_prev: AtomicU64,
    /// Start of this `min_rtt` interval, ns since `epoch`.
    interval_start: AtomicU64,
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Bounds clamped to `1 <= min <= max <= u32::MAX`, packed.
fn pack(min: usize, max: usize) -> u64 {
    let max = max.clamp(1, u32::MAX as usize) as u64;
    let min = (min.max(1) as u64).min(max);
    (min << 32) | max
}

fn unpack(bounds: u64) -> (usize, usize) {
    ((bounds >> 32) as usize, (bounds & 0xffff_ffff) as usize)
}

impl AdaptiveLimit {
    /// A limit within `min..=max` (made `1 <= min <= max` silently), starting at `max`;
    /// `now` starts the first window.
    pub fn new(min: usize, max: usize, now: Instant) -> AdaptiveLimit {
        let bounds = pack(min, max);
        AdaptiveLimit {
            epoch: now,
            bounds: AtomicU64::new(bounds),
            limit: AtomicUsize::new(unpack(bounds).1),
            window_start: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
            count: AtomicU64::new(0),
            peak: AtomicUsize::new(0),
            min_rtt_cur: AtomicU64::new(NONE),
            min_rtt_prev: AtomicU64::new(NONE),
            interval_start: AtomicU64::new(0),
        }
    }

    /// The current limit on requests in flight to the region: one atomic load. Within
    /// `[min, max]` (but for a few nanoseconds when a reload races a window's end).
    pub fn limit(&self) -> usize {
        self.limit.load(Relaxed)
    }

    /// New bounds after a config reload (made `1 <= min <= max` silently); the current
    /// limit is clamped into them.
    pub fn set_bounds(&self, min: usize, max: usize) {
        self.bounds.store(pack(min, max), SeqCst);
        self.clamp_limit();
    }

    /// One completed exchange: `rtt` from request sent to response head (or to the failure,
    /// for a timeout or reset), `in_flight` requests to the region when it completed. A few
    /// atomic adds; at a window's end one caller computes the new limit, others go on.
    pub fn sample(&self, rtt: Duration, in_flight: usize, now: Instant) {
        self.sum_ns.fetch_add(nanos(rtt).min(MAX_RTT_NS), Relaxed);
        let count = self.count.fetch_add(1, Relaxed) + 1;
        self.peak.fetch_max(in_flight, Relaxed);
        let now_ns = nanos(now.saturating_duration_since(self.epoch));
        let start = self.window_start.load(Relaxed);
        if count < MIN_SAMPLES || now_ns < start.saturating_add(nanos(WINDOW)) {
            return;
        }
        if self
            .window_start
            .compare_exchange(start, now_ns, AcqRel, Relaxed)
            .is_err()
        {
            return; // another caller ends this window
        }
        let count = self.count.swap(0, AcqRel);
        let sum = self.sum_ns.swap(0, AcqRel);
        let peak = self.peak.swap(0, AcqRel);
        if let Some(mean) = sum.checked_div(count) {
            self.update(mean.max(1), peak, now_ns);
        }
    }

    /// A window's end: `sample_ns` is its mean latency, `peak` the most requests in flight.
    fn update(&self, sample_ns: u64, peak: usize, now_ns: u64) {
        let interval = nanos(MIN_RTT_INTERVAL);
        let since = now_ns.saturating_sub(self.interval_start.load(Relaxed));
        if since >= interval {
            // After two idle intervals the old minimum says nothing of today's region.
            let prev = if since >= 2 * interval {
                NONE
            } else {
                self.min_rtt_cur.load(Relaxed)
            };
            self.min_rtt_prev.store(prev, Relaxed);
            self.min_rtt_cur.store(NONE, Relaxed);
            self.interval_start.store(now_ns, Relaxed);
        }
        let cur = self
            .min_rtt_cur
            .fetch_min(sample_ns, Relaxed)
            .min(sample_ns);
        let min_rtt = cur.min(self.min_rtt_prev.load(Relaxed)) as f64;
        // Envoy's default jitter buffer, 25 %: `min_rtt` is the lowest of noisy window
        // means, so a tighter one holds a recovered region at a small limit.
        let gradient = ((min_rtt + min_rtt / 4.0) / sample_ns as f64).clamp(0.5, 2.0);

        let old = self.limit.load(Relaxed) as f64;
        let scaled = gradient * old;
        let mut new = scaled + scaled.sqrt();
        if new > old {
            let reached = 2.0 * peak as f64;
            new = new.min((reached + reached.sqrt()).max(old));
        }
        let (min, max) = unpack(self.bounds.load(SeqCst));
        self.limit.store((new as usize).clamp(min, max), SeqCst);
        // A reload that stored new bounds after the load above has clamped the old value;
        // this clamps ours (SeqCst: one of the two sees the other).
        self.clamp_limit();
    }

    fn clamp_limit(&self) {
        let (min, max) = unpack(self.bounds.load(SeqCst));
        let _ = self.limit.fetch_update(SeqCst, SeqCst, |l| {
            let c = l.clamp(min, max);
            (c != l).then_some(c)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One full window of `MIN_SAMPLES` samples of `rtt_ms` spread over `WINDOW`; the last
    /// one ends it. Returns the limit after it.
    fn window(l: &AdaptiveLimit, t: &mut Instant, rtt_ms: u64, in_flight: usize) -> usize {
        for _ in 0..MIN_SAMPLES {
            *t += WINDOW / MIN_SAMPLES as u32;
            l.sample(Duration::from_millis(rtt_ms), in_flight, *t);
        }
        l.limit()
    }

    /// Windows with the load filling the limit.
    fn loaded(l: &AdaptiveLimit, t: &mut Instant, rtt_ms: u64, n: usize) {
        for _ in 0..n {
            window(l, t, rtt_ms, l.limit());
        }
    }

    #[test]
    fn starts_at_max_and_bounds_are_made_sane() {
        let now = Instant::now();
        assert_eq!(AdaptiveLimit::new(5, 100, now).limit(), 100);
        assert_eq!(AdaptiveLimit::new(0, 0, now).limit(), 1);
        let l = AdaptiveLimit::new(10, 5, now);
        assert_eq!((l.limit(), unpack(l.bounds.load(Relaxed))), (5, (5, 5)));
    }

    #[test]
    fn shrinks_as_latency_grows() {
        let mut t = Instant::now();
        let l = AdaptiveLimit::new(5, 100, t);
        loaded(&l, &mut t, 10, 3);
        assert_eq!(l.limit(), 100);
        let mut last = l.limit();
        let mut windows = 0;
        while last > 5 {
            let now = window(&l, &mut t, 200, last);
            assert!(now < last, "{now} !< {last}");
            last = now;
            windows += 1;
        }
        assert!(windows <= 10, "{windows} windows to reach min");
    }

    #[test]
    fn recovers_when_latency_comes_back() {
        let mut t = Instant::now();
        let l = AdaptiveLimit::new(5, 100, t);
        loaded(&l, &mut t, 10, 3);
        loaded(&l, &mut t, 200, 10);
        assert_eq!(l.limit(), 5);
        let mut windows = 0;
        while l.limit() < 100 {
            let before = l.limit();
            assert!(window(&l, &mut t, 10, before) > before);
            windows += 1;
            assert!(windows <= 15, "not back at max after 15 windows");
        }
    }

    #[test]
    fn app_limited_load_does_not_grow_the_limit() {
        let mut t = Instant::now();
        let l = AdaptiveLimit::new(1, 100, t);
        window(&l, &mut t, 10, 3);
        assert_eq!(l.limit(), 100, "app-limited does not shrink either");
        for _ in 0..10 {
            window(&l, &mut t, 200, 3);
        }
        assert!(l.limit() <= 3);
        for _ in 0..30 {
            window(&l, &mut t, 10, 3);
        }
        let cap = 6 + (6f64).sqrt() as usize;
        assert!((6..=cap).contains(&l.limit()), "limit {}", l.limit());
    }

    #[test]
    fn too_few_samples_do_not_end_a_window() {
        let mut t = Instant::now();
        let l = AdaptiveLimit::new(1, 100, t);
        window(&l, &mut t, 10, 100);
        for _ in 0..MIN_SAMPLES - 1 {
            t += Duration::from_secs(1);
            l.sample(Duration::from_millis(200), 100, t);
        }
        assert_eq!(l.limit(), 100);
        l.sample(Duration::from_millis(200), 100, t);
        assert_eq!(l.limit(), 57); // 0.5 * 100 + sqrt(50)
    }

    #[test]
    fn set_bounds_clamps() {
        let l = AdaptiveLimit::new(5, 100, Instant::now());
        l.set_bounds(1, 50);
        assert_eq!(l.limit(), 50);
        l.set_bounds(60, 200);
        assert_eq!(l.limit(), 60);
        l.set_bounds(0, 0);
        assert_eq!(l.limit(), 1);
        l.set_bounds(10, 5);
        assert_eq!(l.limit(), 5);
    }

    #[test]
    fn min_rtt_follows_a_new_baseline() {
        let mut t = Instant::now();
        let l = AdaptiveLimit::new(5, 100, t);
        loaded(&l, &mut t, 10, 10);
        let changed = t;
        loaded(&l, &mut t, 50, 50);
        assert_eq!(l.limit(), 5, "not at min 5 s after the slowdown");
        while l.limit() == 5 && t - changed < Duration::from_secs(90) {
            loaded(&l, &mut t, 50, 1);
        }
        let taken = (t - changed).as_secs_f64();
        assert!(
            (30.0..=61.0).contains(&taken),
            "baseline taken after {taken} s"
        );
        loaded(&l, &mut t, 50, 15);
        assert_eq!(l.limit(), 100);
    }

    proptest::proptest! {
        #[test]
        fn stays_within_bounds(
            min in 0usize..60,
            max in 0usize..300,
            rebound in proptest::option::of((0usize..60, 0usize..300)),
            steps in proptest::collection::vec((0u64..2000, 0usize..400, 0u64..150), 0..300),
        ) {
            let mut t = Instant::now();
            let l = AdaptiveLimit::new(min, max, t);
            for (i, (rtt_ms, in_flight, advance_ms)) in steps.iter().enumerate() {
                if i == steps.len() / 2 {
                    if let Some((min, max)) = rebound {
                        l.set_bounds(min, max);
                    }
                }
                t += Duration::from_millis(*advance_ms);
                l.sample(Duration::from_millis(*rtt_ms), *in_flight, t);
                let (lo, hi) = unpack(l.bounds.load(Relaxed));
                proptest::prop_assert!(lo >= 1 && lo <= hi);
                proptest::prop_assert!((lo..=hi).contains(&l.limit()));
            }
        }
    }
}
