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

use opentelemetry::KeyValue;

use super::headers::ClientAddr;
use super::phases::RequestView;
use super::request_id::RequestId;
use super::{access, Proxy};
use crate::extract::RouteKind;
use crate::metrics::{self, RegionMetrics};
use crate::trace::{Described, Traced};

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
    /// Its OpenTelemetry trace (`tracing:`, docs/traces.md): the `SERVER` span, ended by
    /// [`Life::finish`], and what its attempts send upstream. Boxed: a request without
    /// tracing carries one word for it.
    pub trace: Option<Box<Traced>>,
    /// The head's rate limits have counted it (`phases::limit_head`, on the head path):
    /// the shared phases, if it is handed to them, do not count it again.
    pub head_limited: bool,
    /// What a move between regions left on it (docs/moves.md, `moving.rs`). Boxed: rare.
    pub moved: Option<Box<super::moving::Moved>>,
    /// It came from a peer in `trusted_proxies` (another edge): its `X-Iuid-Mirror` is
    /// believed (docs/moves.md, "In a mesh").
    pub trusted_peer: bool,
    /// The protocol the client spoke: a label of the request count.
    protocol: metrics::Protocol,
    started: Instant,
    /// The method and path, copied for the access log when it is on.
    logged: Option<Box<(String, String)>>,
}

impl Proxy {
    /// Begins the life of the request `view` from `client`: its id taken or made, its server
    /// spans opened (`tracing`'s, and OpenTelemetry's with `tracing:`), the in-flight gauge
    /// raised, what the access log needs copied.
    pub(crate) fn begin<V: RequestView>(&self, view: &V, client: &ClientAddr) -> Life {
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
            .then(|| Box::new((method().to_owned(), view.sent_path().to_owned())));
        let trace = self.tracing.as_ref().map(|tracing| {
            let described = || {
                let method = method();
                Described {
                    method: method.to_owned(),
                    path: origin_path(view.sent_path()).to_owned(),
                    attributes: server_attributes(view, method, client),
                }
            };
            let incoming = view.trace_fields();
            tracing.begin(incoming, || view.values("tracestate"), described)
        });
        Life {
            id,
            span,
            in_flight: Some(metrics::InFlight::start()),
            route: None,
            region: None,
            upstream: None,
            regions: None,
            trace,
            head_limited: false,
            moved: None,
            trusted_peer: client.trusted_peer,
            protocol: metrics::Protocol::of(view.version()),
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

    /// Records on the `SERVER` span, when the request is sampled, the refusal the router
    /// answers with (`slug`: its problem type, `urn:iuid-router:problem:{slug}`).
    pub fn refused(&self, slug: &'static str) {
        if let Some(trace) = &self.trace {
            trace.refused(slug);
        }
    }

    /// The request's trace, for its attempts (`None`: `tracing:` is off).
    pub fn traced(&self) -> Option<&Traced> {
        self.trace.as_deref()
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
        region.request(self.protocol, self.route, status);
        let label = (!std::ptr::eq(region, &proxy.no_region)).then(|| &*region.label);
        if let Some(trace) = &self.trace {
            let route = |path: &str| {
                self.route
                    .and_then(|kind| proxy.routes.template(kind, path))
            };
            trace.finish(route, label, status);
        }
        if let Some(logged) = &self.logged {
            access::log(&access::Access {
                request_id: self.id.as_str(),
                method: &logged.0,
                path: &logged.1,
                status,
                route: self.route,
                region: label,
                regions: self.regions.as_deref(),
                upstream: self.upstream.as_ref().map(Authority::as_str),
                trace: self.trace.as_deref().map(Traced::ids),
                started: self.started,
            });
        }
        if let Some(trace) = self.trace.take() {
            Traced::done(trace);
        }
        if let Some(copy) = self.moved.as_mut().and_then(|m| m.status.take()) {
            // A mirror's copy compares its status class with this one's.
            let _ = copy.send(status);
        }
    }
}

/// A sampled request's `SERVER` span attributes (OpenTelemetry HTTP semantic conventions).
fn server_attributes<V: RequestView>(view: &V, method: &str, client: &ClientAddr) -> Vec<KeyValue> {
    // Room for those `Traced::refused` and `Traced::finish` add: the span's list never grows.
    let mut attributes = Vec::with_capacity(16);
    attributes.extend([
        KeyValue::new("http.request.method", method.to_owned()),
        KeyValue::new("url.path", origin_path(view.sent_path()).to_owned()),
        KeyValue::new("url.scheme", if client.tls { "https" } else { "http" }),
        KeyValue::new("network.protocol.version", view.version()),
        KeyValue::new(
            "client.address",
            String::from_utf8_lossy(client.ip_text()).into_owned(),
        ),
    ]);
    if let Some(authority) = view.authority() {
        let authority = String::from_utf8_lossy(authority);
        let (host, port) = crate::trace::host_and_port(&authority);
        attributes.push(KeyValue::new("server.address", host.to_owned()));
        if let Some(port) = port {
            attributes.push(KeyValue::new("server.port", port));
        }
    }
    attributes
}

/// The path of a target in origin form; of one in absolute form (`http://host/path`, RFC 9112
/// §3.2.2), the path after its authority.
fn origin_path(target: &str) -> &str {
    if target.starts_with('/') {
        return target;
    }
    let after_scheme = target.find("://").map_or(target, |at| &target[at + 3..]);
    after_scheme.find('/').map_or("/", |at| &after_scheme[at..])
}
