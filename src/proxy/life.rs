//! A request's life, begun once and finished once whatever carried it: the own engine's
//! head path, the shared phases (HTTP/2, gRPC), or the head path handing a request over to
//! the shared phases (`h1/bridge.rs`), which carries the life along rather than begin a
//! second one. As Envoy's connection manager owns a stream's span, log and stats above
//! every codec, this is the one place that takes the request id, opens the server span,
//! counts the request in flight, and at the end counts it in `iuid_router_requests_total`
//! and writes its access log line (docs/metrics.md, docs/config.md `access_log`).
//!
//! A feature that must see every request once (a trace exported per request, a per-client
//! count) is a field here, set in [`Proxy::begin`] and read in [`Life::finish`].

use std::sync::Arc;
use std::time::Instant;

use http::uri::Authority;

use super::phases::RequestView;
use super::request_id::RequestId;
use super::{access, Proxy};
use crate::extract::RouteKind;
use crate::metrics::{self, RegionMetrics};

/// What is known of one request from its head to its answer.
pub(crate) struct Life {
    /// Its id (`x-request-id`), sent upstream and back.
    pub id: RequestId,
    /// The server span: the parent of every span below it (an attempt, a fan-out leg, a
    /// legacy probe). Debug level: disabled (and free) unless `RUST_LOG` enables it, since
    /// tracing-subscriber's fmt layer at `info` would format every field of every request's
    /// span into a string (measured: a quarter of the router's user-space instructions per
    /// request) for the rare warning logged inside it.
    pub span: tracing::Span,
    /// Counts the request in `iuid_router_in_flight_requests`; moves into a streamed
    /// answer's body, and ends with it.
    pub in_flight: Option<metrics::InFlight>,
    /// The kind of route that found the id (`None`: no route matched).
    pub route: Option<RouteKind>,
    /// Whose metrics count it: the region, `all` (several regions), `none` when unset.
    pub region: Option<Arc<RegionMetrics>>,
    /// The upstream that answered.
    pub upstream: Option<Authority>,
    /// The regions asked, when more than one was (fan-out, split, probe): for the access log.
    pub regions: Option<String>,
    started: Instant,
    /// The method and path, copied for the access log when it is on.
    logged: Option<Box<(String, String)>>,
}

impl Proxy {
    /// Begins the life of the request `view`: its id taken or made, its server span opened,
    /// the in-flight gauge raised, what the access log needs copied.
    pub(crate) fn begin<V: RequestView>(&self, view: &V) -> Life {
        let id = RequestId::of(view.request_id());
        let method = || std::str::from_utf8(view.method()).unwrap_or("-");
        let span = tracing::debug_span!(
            "request",
            request_id = id.as_str(),
            method = method(),
            id = tracing::field::Empty,
            region = tracing::field::Empty,
            upstream = tracing::field::Empty,
        );
        let logged = self
            .config
            .access_log
            .then(|| Box::new((method().to_owned(), view.path().to_owned())));
        Life {
            id,
            span,
            in_flight: Some(metrics::InFlight::start()),
            route: None,
            region: None,
            upstream: None,
            regions: None,
            started: Instant::now(),
            logged,
        }
    }
}

impl Life {
    /// The region whose metrics count the request, as its span says too.
    pub fn set_region(&mut self, region: &Arc<RegionMetrics>) {
        self.record_region(region);
        self.region = Some(Arc::clone(region));
    }

    /// Records the region on the span, when it is on (a field is looked up by name even on
    /// a disabled span).
    pub fn record_region(&self, region: &RegionMetrics) {
        if !self.span.is_disabled() {
            self.span.record("region", &*region.label);
        }
    }

    /// Ends the life with the answer's `status`: the request counted under its region (or
    /// `none`), its access log line written, the gauge lowered unless a streamed body
    /// still carries it.
    pub fn finish(&mut self, proxy: &Proxy, status: u16) {
        self.finish_in(proxy, status, None);
    }

    /// [`Life::finish`] in `region`, which the caller holds for as long (the head path's
    /// region, recorded on the span with [`Life::record_region`]): no count of a reference
    /// is taken for it.
    pub fn finish_in(&mut self, proxy: &Proxy, status: u16, region: Option<&RegionMetrics>) {
        self.in_flight = None;
        let region = region
            .or(self.region.as_deref())
            .unwrap_or(&proxy.no_region);
        region.request(self.route, status);
        if let Some(logged) = &self.logged {
            access::log(&access::Access {
                request_id: self.id.as_str(),
                method: &logged.0,
                path: &logged.1,
                status,
                route: self.route,
                region: (!std::ptr::eq(region, &proxy.no_region)).then(|| &*region.label),
                regions: self.regions.as_deref(),
                upstream: self.upstream.as_ref().map(Authority::as_str),
                started: self.started,
            });
        }
    }
}
