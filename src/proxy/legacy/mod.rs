//! Legacy ids (docs/fanout.md `legacy: probe`): entities created before the iUID keep ids without
//! routing bits (UUIDv4/v7), so no table can say where they live. A `GET`/`HEAD` for one goes
//! to `default_region` first (or to the owner learned before); on 404 or 410 every other
//! region is asked in parallel, the first 2xx answer is returned at once (a slow region does
//! not hold it up) and its region remembered ([`owners`]). An owner that now
//! answers 404/410 is forgotten and the id probed again. Other methods are never probed: a
//! write must not be tried in several places.
//!
//! Probing is bounded: an id no region owned is remembered for `legacy_cache.negative_ttl_ms`
//! (its 404 is then returned without probing), and probes may be at most `legacy_probe`'s
//! share of the requests for legacy ids (a retry budget, `crate::upstream::budget`); beyond
//! it the first region's 404/410 is the answer. A flood of unknown ids then costs the
//! regions about one request each, not one per region.

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use http::request::Parts;
use http::StatusCode;

use super::Proxy;
use crate::config::{Legacy, RetryPolicy};
use crate::metrics::{self, ProbeSkip};
use crate::table::{Decision, RegionId, Rule};
use crate::trace::Traced;
use crate::upstream::forward::{self, Answered, Outgoing};
use crate::upstream::owners::Known;
use crate::upstream::regions::Routing;

/// A request that may be probed: its id's canonical text, and the region first asked.
#[derive(Debug)]
pub(super) struct Probe {
    pub id: String,
    /// The region asked first is the owner learned before.
    pub cached: bool,
    /// No region owned the id a moment ago: a 404/410 is not probed.
    pub nobody: bool,
}

impl Proxy {
    /// Whether a request with this decision is probed (`legacy: probe`, an id without
    /// routing bits, `GET` or `HEAD`); if so, the region to ask first: the owner learned
    /// before, or the decision's (`default_region`).
    pub(super) fn legacy_target(
        &self,
        routing: &Routing,
        method: &[u8],
        decision: &Decision,
        id: impl FnOnce() -> String,
    ) -> Option<(Probe, RegionId)> {
        if self.config.legacy != Legacy::Probe
            || decision.rule != Rule::DefaultRegion
            || !matches!(method, b"GET" | b"HEAD")
        {
            return None;
        }
        let id = id();
        self.probes.deposit(&self.probe_policy());
        let known = self.owners.lookup(&id);
        let owner = match &known {
            Known::Owner(name) => routing.by_name(name),
            Known::Nobody | Known::Unknown => None,
        };
        metrics::legacy_cache(owner.is_some() || known == Known::Nobody);
        Some((
            Probe {
                id,
                cached: owner.is_some(),
                nobody: known == Known::Nobody,
            },
            owner.unwrap_or(decision.region),
        ))
    }

    /// Remembers the owner a region's `421` named for the id with fingerprint `id`
    /// (docs/failover.md): later requests for it go straight there.
    pub(in crate::proxy) fn learn_owner(&self, routing: &Routing, id: u64, owner: RegionId) {
        if id != 0 {
            self.owners.learn(id, &routing.region(owner).name);
        }
    }

    /// `legacy_probe` as the retry budget's policy.
    fn probe_policy(&self) -> RetryPolicy {
        let probe = self.config.legacy_probe;
        RetryPolicy {
            budget_percent: probe.budget_percent,
            min_per_second: probe.min_per_second,
            ..RetryPolicy::default()
        }
    }

    /// After `asked` answered `first`: on 404/410, every other region is asked with `head`
    /// (docs/data-path.md rules applied, not yet aimed); the first 2xx wins. Returns the answer to give
    /// and the region that gave it.
    pub(super) async fn probe(
        &self,
        routing: &Routing,
        probe: &Probe,
        asked: RegionId,
        head: Parts,
        first: Answered,
        trace: Option<&Traced>,
    ) -> (RegionId, Answered) {
        let status = first.response.status();
        if status != StatusCode::NOT_FOUND && status != StatusCode::GONE {
            return (asked, first);
        }
        if probe.cached {
            self.owners.forget(&probe.id);
        }
        if probe.nobody {
            metrics::legacy_probe_skipped(ProbeSkip::NegativeCache);
            return (asked, first);
        }
        if !self.probes.withdraw(&self.probe_policy()) {
            metrics::legacy_probe_skipped(ProbeSkip::Budget);
            return (asked, first);
        }
        // A dark region (none of its upstreams in rotation, docs/failover.md) is not asked:
        // an id it may own is then not remembered as nobody's.
        let now = crate::clock::now_ms();
        let dark = routing
            .all()
            .any(|(id, region)| id != asked && region.health_share(now) == 0.0);
        let mut legs: FuturesUnordered<_> = routing
            .all()
            .filter(|(id, region)| *id != asked && region.health_share(now) > 0.0)
            .map(|(id, region)| {
                let head = forward::copy_head(&head);
                async move {
                    (
                        id,
                        self.send(
                            (routing, region),
                            head,
                            Outgoing::Held(Bytes::new()),
                            trace,
                            (None, true),
                        )
                        .await,
                    )
                }
            })
            .collect();
        // Whether every other region said it has no such entity (not merely failed).
        let mut nobody = !dark;
        while let Some((id, result)) = legs.next().await {
            if let Ok(answered) = result {
                let status = answered.response.status();
                if status.is_success() {
                    self.owners.insert(&probe.id, &routing.region(id).name);
                    metrics::legacy_probe(true);
                    return (id, answered);
                }
                nobody &= status == StatusCode::NOT_FOUND || status == StatusCode::GONE;
            } else {
                nobody = false;
            }
        }
        if nobody {
            self.owners.insert_nobody(&probe.id);
        }
        metrics::legacy_probe(false);
        (asked, first)
    }
}
