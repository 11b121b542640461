//! The phases every request runs, written once for every protocol (ARCHITECTURE.md,
//! "Phases").
//!
//! A request reaches them in one of two forms: the own HTTP/1.x engine's head (offsets over
//! the connection's buffer, `proxy/h1/`) or `http` parts (HTTP/2 and gRPC from hyper's
//! server, and what the own engine carries through `Proxy::handle`). Both implement
//! [`RequestView`], the read-only view the phases take, as Envoy's codecs all implement one
//! header-map interface for its filter chain. A phase is a function here over a view
//! (`Proxy::admit_head`, `Proxy::extract_head`) or over the region a request resolved to
//! (`Proxy::region_phase`); each driver calls it at one place, so a new phase is one change
//! here, and reaches HTTP/1.x, HTTP/2, gRPC, fan-outs and the rest alike.
//!
//! Generic, not `dyn`: each driver gets its own copy, inlined as the code it replaced was
//! (the REST path's instruction count is checked in callgrind, bench/RESULTS.md).

use std::borrow::Cow;

use http::request::Parts;
use http::{HeaderName, HeaderValue, Version};

use super::headers::ClientAddr;
use super::route::Extraction;
use super::{admit, headers, Proxy};
use crate::error::ShedReason;
use crate::extract::normalize::{self, EscapedSlashes, PathError};
use crate::extract::Access;
use crate::http1::head::{self, RequestHead, Seen};
use crate::problem::Problem;
use crate::ratelimit::{Keys, Verdict};
use crate::table::{Decision, RegionId, Rule};
use crate::upstream::forward::FAILOVER;
use crate::upstream::regions::{RegionPermit, RegionRuntime, Routing};

/// A request's head as the phases read it, whatever its codec.
pub trait RequestView {
    /// The method token, e.g. `GET`.
    fn method(&self) -> &[u8];
    /// The path that routes, rate-limit scopes and `routes:` scopes match: the target's
    /// path normalised (`crate::extract::normalize`: unreserved escapes decoded, `//`
    /// merged, dot segments removed) without a trailing `/` (docs/data-path.md, "Paths").
    /// A path that cannot be normalised reads as sent here: [`RequestView::path_error`]
    /// says why, and the admit phase refuses it before anything matches.
    fn path(&self) -> &str;
    /// The target's path (before `?`), as sent: percent-encoded, ASCII (both codecs refuse
    /// other bytes before the phases run). What logs and traces show.
    fn sent_path(&self) -> &str;
    /// Why the path cannot be read one way (`%2F`, a bad `%`, `/../`), if it cannot.
    fn path_error(&self) -> Option<PathError>;
    /// The target's query (after `?`, without it; `""` when none), as sent.
    fn query(&self) -> &str;
    /// Whether the request must carry exactly one `Host` (HTTP/1.1, RFC 9112 §3.2; HTTP/1.0
    /// may leave it out, HTTP/2 has `:authority`).
    fn requires_host(&self) -> bool;
    /// The values of the field `name` (lowercase), in order.
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a;
    /// The first value of the field `name`.
    fn value(&self, name: &HeaderName) -> Option<&[u8]>;
    /// The first `x-request-id` value (read on every request: no name is parsed or searched
    /// for when the codec knows it is absent).
    fn request_id(&self) -> Option<&[u8]>;
    /// The W3C Trace Context fields (`traceparent`, `tracestate`), in one pass over the
    /// fields: asked on every request when `tracing:` is on.
    fn trace_fields(&self) -> crate::trace::Incoming<'_>;
    /// The HTTP version as a trace names it (`network.protocol.version`): `1.0`, `1.1`, `2`.
    fn version(&self) -> &'static str;
    /// The target's authority: `Host`, or HTTP/2's `:authority`.
    fn authority(&self) -> Option<&[u8]> {
        self.value(&http::header::HOST)
    }
}

/// The own engine's head over its connection's buffer.
pub struct HeadView<'b> {
    /// The connection's pending bytes, the head at their start.
    pub buf: &'b [u8],
    /// The head parsed from them.
    pub head: &'b RequestHead,
    /// The routing path (borrowed from `buf` unless normalising changed it), or why none.
    path: Result<Cow<'b, str>, PathError>,
}

impl<'b> HeadView<'b> {
    /// The view of `head`, parsed from the start of `buf`: its path normalised once, an
    /// encoded slash as `slashes` (`limits.escaped_slashes`) says.
    pub fn new(buf: &'b [u8], head: &'b RequestHead, slashes: EscapedSlashes) -> HeadView<'b> {
        let target = head.target.of(buf);
        let sent = target.split(|&b| b == b'?').next().unwrap_or(target);
        let path = normalize::normalize_with(std::str::from_utf8(sent).unwrap_or(""), slashes);
        HeadView { buf, head, path }
    }

    /// Whether normalising changed the path (its normal form cannot be written from the
    /// buffer's bytes).
    pub fn path_changed(&self) -> bool {
        matches!(self.path, Ok(Cow::Owned(_)))
    }
}

impl HeadView<'_> {
    /// The bit of a field the parse notes, for the names the phases read: an absent one is
    /// not searched for.
    fn seen(&self, name: &str) -> bool {
        let seen = self.head.seen;
        match name {
            "host" => seen.has(Seen::HOST),
            "via" => seen.has(Seen::VIA),
            "content-type" => seen.has(Seen::CONTENT_TYPE),
            "x-request-id" => seen.has(Seen::REQUEST_ID),
            _ => true,
        }
    }
}

impl RequestView for HeadView<'_> {
    fn method(&self) -> &[u8] {
        self.head.method.of(self.buf)
    }

    fn path(&self) -> &str {
        match &self.path {
            Ok(path) => normalize::trim_trailing(path),
            Err(_) => self.sent_path(),
        }
    }

    fn sent_path(&self) -> &str {
        let target = self.head.target.of(self.buf);
        let path = target.split(|&b| b == b'?').next().unwrap_or(target);
        std::str::from_utf8(path).unwrap_or("")
    }

    fn path_error(&self) -> Option<PathError> {
        self.path.as_ref().err().copied()
    }

    fn query(&self) -> &str {
        let target = self.head.target.of(self.buf);
        match memchr::memchr(b'?', target) {
            Some(at) => std::str::from_utf8(&target[at + 1..]).unwrap_or(""),
            None => "",
        }
    }

    fn requires_host(&self) -> bool {
        self.head.minor == 1
    }

    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        let fields: &[head::Field] = match self.seen(name) {
            true => &self.head.fields,
            false => &[],
        };
        head::all(self.buf, fields, name.as_bytes())
    }

    fn request_id(&self) -> Option<&[u8]> {
        self.values("x-request-id").next()
    }

    fn trace_fields(&self) -> crate::trace::Incoming<'_> {
        let mut incoming = crate::trace::Incoming::default();
        if !self.head.seen.has(Seen::TRACE) {
            return incoming;
        }
        for field in &self.head.fields {
            incoming.note(field.name.of(self.buf), field.value.of(self.buf));
        }
        incoming
    }

    fn version(&self) -> &'static str {
        match self.head.minor {
            0 => "1.0",
            _ => "1.1",
        }
    }

    fn value(&self, name: &HeaderName) -> Option<&[u8]> {
        let name = name.as_str().as_bytes();
        self.head
            .fields
            .iter()
            .find(|f| f.name.of(self.buf).eq_ignore_ascii_case(name))
            .map(|f| f.value.of(self.buf))
    }
}

impl RequestView for Parts {
    fn method(&self) -> &[u8] {
        self.method.as_str().as_bytes()
    }

    fn path(&self) -> &str {
        match self.extensions.get::<RoutedPath>() {
            Some(RoutedPath::Normal(path)) => normalize::trim_trailing(path),
            Some(RoutedPath::Refused(_)) | None => normalize::trim_trailing(self.uri.path()),
        }
    }

    fn sent_path(&self) -> &str {
        self.uri.path()
    }

    fn path_error(&self) -> Option<PathError> {
        match self.extensions.get::<RoutedPath>() {
            Some(RoutedPath::Refused(e)) => Some(*e),
            _ => None,
        }
    }

    fn query(&self) -> &str {
        self.uri.query().unwrap_or("")
    }

    fn requires_host(&self) -> bool {
        self.version == Version::HTTP_11
    }

    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers.get_all(name).iter().map(HeaderValue::as_bytes)
    }

    fn value(&self, name: &HeaderName) -> Option<&[u8]> {
        self.headers.get(name).map(HeaderValue::as_bytes)
    }

    fn request_id(&self) -> Option<&[u8]> {
        self.value(&super::request_id::HEADER)
    }

    fn trace_fields(&self) -> crate::trace::Incoming<'_> {
        let mut incoming = crate::trace::Incoming::default();
        for (name, value) in &self.headers {
            incoming.note(name.as_str().as_bytes(), value.as_bytes());
        }
        incoming
    }

    fn version(&self) -> &'static str {
        match self.version {
            Version::HTTP_10 => "1.0",
            Version::HTTP_11 => "1.1",
            Version::HTTP_2 => "2",
            Version::HTTP_3 => "3",
            _ => "0.9",
        }
    }

    fn authority(&self) -> Option<&[u8]> {
        match self.uri.authority() {
            Some(authority) => Some(authority.as_str().as_bytes()),
            None => self.value(&http::header::HOST),
        }
    }
}

/// What normalising an `http` request's path found, when it is not the path as sent (kept
/// in the request's extensions by [`read_path`]: most paths are normal, and store nothing).
#[derive(Debug, Clone)]
enum RoutedPath {
    /// The normal form, kept when the request goes upstream as sent.
    Normal(Box<str>),
    /// Why it has none.
    Refused(PathError),
}

/// Reads `parts`' path once, before the phases (docs/data-path.md, "Paths"): its normal
/// form, when it differs, is what [`RequestView::path`] gives; with `forward_normalized`
/// (`limits.forward_normalized_path`) it is also the path sent upstream, the query kept;
/// an encoded slash is as `limits.escaped_slashes` says.
pub(super) fn read_path(parts: &mut Parts, limits: &crate::config::Limits) {
    let routed = match normalize::normalize_with(parts.uri.path(), limits.escaped_slashes) {
        Ok(Cow::Borrowed(_)) => return,
        Ok(Cow::Owned(normal)) => normal,
        Err(e) => {
            parts.extensions.insert(RoutedPath::Refused(e));
            return;
        }
    };
    if limits.forward_normalized_path {
        let target = match parts.uri.query() {
            Some(query) => format!("{routed}?{query}"),
            None => routed.clone(),
        };
        let mut uri = parts.uri.clone().into_parts();
        if let Ok(path) = http::uri::PathAndQuery::try_from(target) {
            uri.path_and_query = Some(path);
        }
        if let Ok(rewritten) = http::Uri::from_parts(uri) {
            parts.uri = rewritten;
            return;
        }
    }
    parts.extensions.insert(RoutedPath::Normal(routed.into()));
}

impl Proxy {
    /// Phases 0–1 on a request's head: admission (`CONNECT` refused, RFC 9112 §3.2's `Host`
    /// rule) and the loop check (`Via`, docs/data-path.md). What only one codec can get
    /// wrong (framing fields, target forms) is that codec's to refuse (`admit.rs`).
    ///
    /// `trusted_peer`: it came from a peer in `trusted_proxies`, whose `X-Iuid-Failover`
    /// is believed (docs/failover.md "In a mesh").
    pub(super) fn admit_head<V: RequestView>(
        &self,
        view: &V,
        trusted_peer: bool,
    ) -> Result<(), Problem> {
        if view.method() == b"CONNECT" {
            return Err(Problem::MethodNotAllowed);
        }
        if let Some(e) = view.path_error() {
            return Err(Problem::AmbiguousPath(e));
        }
        admit::check_host(view.values("host"), view.requires_host())?;
        if let Some(limits) = &self.limits {
            // A rate limit's key read one way (docs/rate-limits.md): refused before any
            // rule counts the request.
            for name in limits.header_keys() {
                if !crate::ratelimit::one_value(view.values(name.as_str())) {
                    return Err(Problem::AmbiguousHeader(name.clone()));
                }
            }
        }
        let max_hops = self.config.limits.max_hops;
        let failed_over = trusted_peer && view.value(&FAILOVER).is_some();
        headers::check_via(
            view.values("via"),
            &self.config.region,
            max_hops,
            failed_over,
        )
        .map_err(Problem::Loop)
    }

    /// The admit phase's rate limits (docs/rate-limits.md): the rules keyed by the head
    /// (`client_ip` through `trusted_proxies`, a header, `route`). Each driver calls it once
    /// per request (the head path marks its life, so the shared phases do not count a
    /// request it hands over again); a refusal is the 429 `Problem::RateLimited`.
    pub(super) fn limit_head<'a, V: RequestView>(
        &'a self,
        view: &V,
        client: &ClientAddr,
    ) -> Verdict<'a> {
        match &self.limits {
            None => Verdict::Admit,
            Some(limits) => limits.check_head(&HeadKeys {
                view,
                client,
                trusted: self.config.trusted_proxies.as_ref(),
            }),
        }
    }

    /// Phase 2 on a request's head: the routes, in order, find an id, several, none, or one
    /// to read from the body (`route::Pending`, read by the driver, which has the body).
    pub(super) fn extract_head<'q, V: RequestView>(&self, view: &'q V) -> Extraction<'_, 'q> {
        self.routes
            .extract_head(view.path(), view.query(), |name| view.value(name))
    }

    /// The phase of every exchange with a region (one request's, a fan-out leg's, a split's
    /// part, a legacy probe's), at the two sends (`upstream::forward` through `Proxy::send`
    /// and `Proxy::forward`, and the head path's `h1_forward`): the request's place in the
    /// region's `limits.region_max_in_flight` (or its adaptive limit), unless the process is
    /// above `overload.max_memory_mb` (docs/overload.md). Errors: why it is shed (answered
    /// with [`Proxy::overloaded`]'s 503 at once), counted in `iuid_router_shed_total`, never
    /// against the region's health, never retried.
    pub(super) fn admit_region(&self, region: &RegionRuntime) -> Result<RegionPermit, ShedReason> {
        let state = &region.state;
        let refused = if crate::overload::over_memory() {
            ShedReason::Memory
        } else {
            match state.admit(&self.config.limits) {
                Some(permit) => return Ok(permit),
                None => ShedReason::MaxInFlight,
            }
        };
        state.metrics.shed(refused);
        Err(refused)
    }

    /// The answer to a request shed for `reason` on its way to `region`: 503
    /// `region-overloaded` or `overloaded` with the limit's value (docs/overload.md).
    pub(super) fn overloaded(&self, region: &RegionRuntime, reason: ShedReason) -> Problem {
        let limits = &self.config.limits;
        let limit = match reason {
            ShedReason::MaxInFlight => region.state.limit(limits),
            ShedReason::PendingConnects => limits.region_max_pending_connects,
            ShedReason::Memory => self.config.overload.max_memory_mb,
            ShedReason::Nofile => 0,
        };
        Problem::Overloaded {
            region: region.name.clone(),
            reason,
            limit,
        }
    }

    /// Phase 3b, one step from the table's decision to where the request goes: a legacy
    /// id's owner learned before (`legacy/`), then the region's phase. It may refuse (a
    /// limit on a region, a region an entity is moving away from) before anything is
    /// forwarded, for every protocol: the head path calls it for what it carries itself,
    /// `Proxy::handle` for the rest.
    ///
    /// An id a move covers (docs/moves.md) goes where the move's phase says, and the
    /// request may be copied to `to`, held for the flip, or counted in flight to `from`
    /// (`Plan::moving`, `moving.rs`), as `told` says what the view does not.
    pub(super) fn plan<'a, V: RequestView>(
        &'a self,
        routing: &Routing,
        decision: &Decision,
        view: &V,
        legacy_id: Option<String>,
        told: Told,
    ) -> Result<Plan<'a>, Problem> {
        let legacy = |id| self.legacy_target(routing, view.method(), decision, || id);
        let (probe, region) = match legacy_id.and_then(legacy) {
            Some((probe, region)) => (Some(Box::new(probe)), region),
            None => (None, decision.region),
        };
        let region = if told.trusted_peer && view.value(&FAILOVER).is_some() {
            // A peer failed this read over to us: served in our region, never sent on
            // (docs/failover.md "In a mesh").
            routing.by_name(&self.config.region).unwrap_or(region)
        } else if self.owners.has_hints() && probe.is_none() && decision.id != 0 {
            // An owner a region named in a `421` (docs/failover.md); a move decides first.
            match decision.rule {
                Rule::Move { .. } => region,
                _ => self
                    .owners
                    .hinted(decision.id)
                    .and_then(|name| routing.by_name(&name))
                    .unwrap_or(region),
            }
        } else {
            region
        };
        let (region, moving) = match decision.rule {
            Rule::Move { index } => {
                let access = told
                    .said
                    .unwrap_or_else(|| Access::of_method(view.method()));
                let copy = told.trusted_peer && view.value(&super::moving::MIRROR).is_some();
                let asked = (access, told.sampled, copy);
                let (region, moving) = self.move_step(routing, index, region, asked);
                (region, Some(Box::new(moving)))
            }
            _ => (region, None),
        };
        let limit = self.region_phase(routing, decision, region, view)?;
        Ok(Plan {
            region,
            probe,
            limit,
            moving,
        })
    }

    /// The phase on the region a request goes to (`region`, after a legacy owner) and the
    /// decision that named it: the decision counted by scheme and rule. A refusal for a
    /// region goes here. (What must hold for every exchange with a region, fan-out legs and
    /// probes too, goes in `Proxy::exchange`: ARCHITECTURE.md, "Where a feature goes".)
    ///
    /// The region's rate limits (`key: region`, docs/rate-limits.md) are spent here, on
    /// the region the request goes to (a legacy id's owner, when known); the other regions
    /// a probe or a fan-out asks spend theirs in `Proxy::send`. A decision Redis makes
    /// comes back to await (`Plan::limit`).
    fn region_phase<'a, V: RequestView>(
        &'a self,
        routing: &Routing,
        decision: &Decision,
        region: RegionId,
        view: &V,
    ) -> Result<Verdict<'a>, Problem> {
        routing
            .decisions(decision.scheme)
            .count(decision.rule.label());
        let Some(limits) = &self.limits else {
            return Ok(Verdict::Admit);
        };
        match limits.check_region(|| view.path(), &routing.region(region).name) {
            Verdict::Limited(limited) => Err(Problem::RateLimited(limited)),
            verdict => Ok(verdict),
        }
    }
}

/// What the plan step is told of a request besides its view: for a move (docs/moves.md).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Told {
    /// Whether its body says it reads or writes (GraphQL), over what its method says.
    pub said: Option<Access>,
    /// The head path already chose whether to copy it.
    pub sampled: Option<bool>,
    /// It came from a peer in `trusted_proxies`: its `X-Iuid-Mirror` is believed.
    pub trusted_peer: bool,
}

/// Where a request goes: the region asked first and, for a legacy id, its probe of the
/// others.
pub(super) struct Plan<'a> {
    pub region: RegionId,
    /// Boxed: rare, and every request's future holds the target.
    pub probe: Option<Box<super::legacy::Probe>>,
    /// The region's rate limits: admitted, or (`store.redis`) Redis's answer to await
    /// before anything is forwarded.
    pub limit: Verdict<'a>,
    /// What a move covering the id asks of the request (docs/moves.md). Boxed: rare.
    pub moving: Option<Box<super::moving::Moving>>,
}

/// What the rate limits read of a request's head, whatever its codec.
struct HeadKeys<'v, V> {
    view: &'v V,
    client: &'v ClientAddr,
    trusted: Option<&'v crate::config::TrustedProxies>,
}

impl<V: RequestView> Keys for HeadKeys<'_, V> {
    fn path(&self) -> &str {
        self.view.path()
    }

    fn client_ip(&self) -> std::net::IpAddr {
        crate::ratelimit::client_ip(
            self.client.addr.ip().to_canonical(),
            self.trusted,
            self.view.values("x-forwarded-for"),
            self.view.values("forwarded"),
        )
    }

    fn field(&self, name: &HeaderName) -> Option<&[u8]> {
        self.view.value(name)
    }
}
