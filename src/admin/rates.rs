//! Request and error rates per region over the last minute (docs/admin.md), for the console.
//!
//! The data path only adds to two relaxed atomics per answer (`RegionMetrics::totals`); this
//! module samples them every [`SAMPLE`] into a short ring per region, and a rate is the
//! difference between the totals now and the oldest sample inside [`WINDOW`], over the time
//! between them. A region keeps its totals across reloads (its runtime is keyed by name), so
//! a reload does not reset its rate.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::clock::now_ms;
use crate::upstream::regions::Regions;

/// How often the totals are sampled.
pub const SAMPLE: Duration = Duration::from_secs(5);
/// The span rates are taken over.
pub const WINDOW: Duration = Duration::from_secs(60);

/// `(at ms, answered, answered 5xx)`.
type Sample = (u64, u64, u64);

/// The sampled totals of every region.
#[derive(Debug, Default)]
pub struct Rates {
    samples: Mutex<HashMap<String, VecDeque<Sample>>>,
}

/// One region's rates, as `GET /admin/rates` lists them.
#[derive(Debug, Serialize, PartialEq)]
pub struct RegionRate {
    /// The region's name.
    pub region: String,
    /// Seconds the counts span (up to [`WINDOW`]; less just after start).
    pub window_s: f64,
    /// Requests answered for the region in that span.
    pub requests: u64,
    /// Of those, answered 5xx.
    pub errors: u64,
    /// `requests / window_s` (0 over an empty span).
    pub requests_per_s: f64,
    /// `errors / requests` (0 without requests).
    pub error_ratio: f64,
}

/// Sets every region's `iuid_router_region_health_ratio` (docs/failover.md) at `now`.
fn health_gauges(regions: &Regions, now: u64) {
    for (_, region) in regions.current().all() {
        crate::metrics::failover::region_health(&region.name, region.health_share(now));
    }
}

impl Rates {
    /// Rates for `regions`, sampled by a task from now on (a first sample is taken at once).
    pub fn spawn(regions: Arc<Regions>) -> Arc<Rates> {
        let rates = Arc::new(Rates::default());
        rates.sample(&regions, now_ms());
        health_gauges(&regions, now_ms());
        let weak = Arc::downgrade(&rates);
        tokio::spawn(async move {
            // Every second the health gauges (docs/failover.md); every `SAMPLE` the rates.
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            for n in 1u64.. {
                tick.tick().await;
                let Some(rates) = weak.upgrade() else { return };
                let now = now_ms();
                health_gauges(&regions, now);
                if n % SAMPLE.as_secs() == 0 {
                    rates.sample(&regions, now);
                }
            }
        });
        rates
    }

    /// Records every region's totals at `now` (ms, `now_ms`), dropping samples older than
    /// the window and regions no longer in the table.
    pub fn sample(&self, regions: &Regions, now: u64) {
        let routing = regions.current();
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        samples.retain(|name, _| routing.by_name(name).is_some());
        for (_, region) in routing.all() {
            let (answered, failed) = region.state.metrics.totals();
            let ring = samples.entry(region.name.clone()).or_default();
            ring.push_back((now, answered, failed));
            // Keep one sample at or beyond the window's start, so a rate always spans it.
            while ring.len() > 2 && ring[1].0 + WINDOW.as_millis() as u64 <= now {
                ring.pop_front();
            }
        }
    }

    /// Every region's rates at `now` (ms, `now_ms`), in table order.
    pub fn report(&self, regions: &Regions, now: u64) -> Vec<RegionRate> {
        let routing = regions.current();
        let samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        routing
            .all()
            .map(|(_, region)| {
                let (answered, failed) = region.state.metrics.totals();
                let since = samples
                    .get(&region.name)
                    .and_then(|ring| ring.front())
                    .copied()
                    .unwrap_or((now, answered, failed));
                let window_s = now.saturating_sub(since.0) as f64 / 1000.0;
                let requests = answered.saturating_sub(since.1);
                let errors = failed.saturating_sub(since.2);
                RegionRate {
                    region: region.name.clone(),
                    window_s,
                    requests,
                    errors,
                    requests_per_s: if window_s > 0.0 {
                        requests as f64 / window_s
                    } else {
                        0.0
                    },
                    error_ratio: if requests > 0 {
                        errors as f64 / requests as f64
                    } else {
                        0.0
                    },
                }
            })
            .collect()
    }
}
