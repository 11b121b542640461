//! Legacy ids (SPEC §11 `legacy: probe`): entities created before the iUID keep ids without
//! routing bits (UUIDv4/v7), so no table can say where they live. A `GET`/`HEAD` for one goes
//! to `default_region` first (or to the owner learned before); on 404 or 410 every other
//! region is asked in parallel, the first 2xx answer is returned at once (a slow region does
//! not hold it up) and its region remembered (`crate::fanout::owners`). An owner that now
//! answers 404/410 is forgotten and the id probed again. Other methods are never probed: a
//! write must not be tried in several places.

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use http::request::Parts;
use http::{Method, StatusCode};

use super::Proxy;
use crate::config::Legacy;
use crate::metrics;
use crate::table::{Decision, RegionId, Rule};
use crate::upstream::forward::{self, Answered, Outgoing};
use crate::upstream::regions::Routing;

/// A request that may be probed: its id's canonical text, and the region first asked.
#[derive(Debug)]
pub(super) struct Probe {
    pub id: String,
    pub cached: bool,
}

impl Proxy {
    /// Whether a request with this decision is probed (`legacy: probe`, an id without
    /// routing bits, `GET` or `HEAD`); if so, the region to ask first: the owner learned
    /// before, or the decision's (`default_region`).
    pub(super) fn legacy_target(
        &self,
        routing: &Routing,
        method: &Method,
        decision: &Decision,
        id: impl FnOnce() -> String,
    ) -> Option<(Probe, RegionId)> {
        if self.config.legacy != Legacy::Probe
            || decision.rule != Rule::DefaultRegion
            || !matches!(*method, Method::GET | Method::HEAD)
        {
            return None;
        }
        let id = id();
        let owner = self.owners.get(&id).and_then(|name| routing.by_name(&name));
        metrics::legacy_cache(owner.is_some());
        Some((
            Probe {
                id,
                cached: owner.is_some(),
            },
            owner.unwrap_or(decision.region),
        ))
    }

    /// After `asked` answered `first`: on 404/410, every other region is asked with `head`
    /// (SPEC §6 rules applied, not yet aimed); the first 2xx wins. Returns the answer to give
    /// and the region that gave it.
    pub(super) async fn probe(
        &self,
        routing: &Routing,
        probe: &Probe,
        asked: RegionId,
        head: Parts,
        first: Answered,
    ) -> (RegionId, Answered) {
        let status = first.response.status();
        if status != StatusCode::NOT_FOUND && status != StatusCode::GONE {
            return (asked, first);
        }
        if probe.cached {
            self.owners.forget(&probe.id);
        }
        let mut legs: FuturesUnordered<_> = routing
            .all()
            .filter(|(id, _)| *id != asked)
            .map(|(id, region)| {
                let head = forward::copy_head(&head);
                async move {
                    (
                        id,
                        self.send(
                            region,
                            head,
                            Outgoing::Held(Bytes::new()),
                            &tracing::Span::none(),
                        )
                        .await,
                    )
                }
            })
            .collect();
        while let Some((id, result)) = legs.next().await {
            if let Ok(answered) = result {
                if answered.response.status().is_success() {
                    self.owners.insert(&probe.id, &routing.region(id).name);
                    metrics::legacy_probe(true);
                    return (id, answered);
                }
            }
        }
        metrics::legacy_probe(false);
        (asked, first)
    }
}
