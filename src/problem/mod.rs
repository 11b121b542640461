//! Error responses as `application/problem+json` (RFC 9457), with the statuses of docs/data-path.md.
//!
//! Every refusal the router makes itself, on the data path and on the admin API alike, goes
//! through [`Problem`], so that clients get one shape — `{"type", "title", "status",
//! "detail"}` and, where useful, extension members — and one `type` URN per kind of problem,
//! `urn:iuid-router:problem:<slug>` (README lists them).

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;
use serde_json::json;

use crate::error::{ErrorKind, ShedReason};
use crate::extract::RouteKind;
use crate::table::ResolveError;

mod grpc;
mod limited;

pub use grpc::{counted_status, grpc_code, grpc_response};
pub use limited::LimitedBody;

/// Why a request is a routing loop (docs/data-path.md: 508).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopReason {
    /// `Via` already names this router's region.
    SeenRegion,
    /// `Via` lists this many entries, at least `max_hops`.
    TooManyHops(usize),
}

/// A refusal of the router's own.
#[derive(Debug)]
pub enum Problem {
    /// A route matched but its id is malformed (400).
    MalformedId {
        /// Why the scheme refused it.
        error: crate::scheme::SchemeError,
        /// The kind of route that found it (`None`: the admin API's path).
        kind: Option<RouteKind>,
        /// The id as sent (at most 80 bytes of it), so the client sees which one.
        text: String,
    },
    /// A well-formed iUID whose country no region owns (404).
    Unowned(ResolveError),
    /// No route found an id and `unrouted: reject` (404).
    NoId,
    /// An admin route that does not exist, or is off in this config (404): what is missing.
    NotFound(&'static str),
    /// A GraphQL request that cannot be decoded (400): the decoder's message.
    GraphqlInvalid(String),
    /// A `json:` route's body that is not JSON, or whose value at the pointer is no id (400):
    /// the parser's message.
    InvalidJson(String),
    /// A `json:` route's body the router could read two ways (400): a duplicate member on the
    /// pointer's path, or an integer id a double cannot hold (docs/data-path.md, "JSON
    /// bodies").
    AmbiguousJson(String),
    /// A GraphQL request the router could read two ways (400): a GET parameter repeated
    /// with different values, a POST whose URL parameters disagree with its body, a
    /// duplicate JSON member (docs/data-path.md, "GraphQL requests").
    AmbiguousGraphql(String),
    /// GraphQL ids owned by different regions (400): each id with its region.
    RegionConflict {
        /// `(id, region)` in request order.
        ids: Vec<(String, String)>,
    },
    /// A body the router must read whole over its limit (413; `RESOURCE_EXHAUSTED` for gRPC):
    /// a GraphQL body over `limits.graphql_body_bytes`, a gRPC first message over
    /// `limits.grpc_message_bytes`.
    PayloadTooLarge {
        /// Which body it was.
        what: LimitedBody,
        /// The limit, in bytes.
        limit: usize,
    },
    /// The request already went round (508).
    Loop(LoopReason),
    /// The upstream refused, reset or answered badly (502).
    BadGateway {
        /// The region the request was for.
        region: String,
        /// What went wrong, for the client.
        detail: String,
    },
    /// A region answered `421` with an owner that cannot be followed (502, the upstream's;
    /// docs/failover.md): a second one, an unknown region, or the body not held.
    Misdirected {
        /// The region that answered it.
        region: String,
    },
    /// Every upstream of the region is ejected (503, with `Retry-After`).
    Unavailable {
        /// The region the request was for.
        region: String,
        /// When the first upstream returns.
        retry_after: std::time::Duration,
    },
    /// Shed by the router's own limit (503 at once, `Retry-After: 1`; gRPC 14 UNAVAILABLE;
    /// docs/overload.md): the region's (`limits.region_max_in_flight` or its adaptive limit,
    /// `limits.region_max_pending_connects`: type `region-overloaded`) or the process's
    /// (`overload.max_memory_mb`, no descriptor left: type `overloaded`). Never counted
    /// against the region's health, never retried.
    Overloaded {
        /// The region the request was for.
        region: String,
        /// Which limit.
        reason: crate::error::ShedReason,
        /// Its value at the time (requests, connections, MiB; 0 for descriptors).
        limit: usize,
    },
    /// The client failed its own request: invalid body framing or an abandoned upload (400),
    /// a body stalled for `timeouts.idle_ms` (408). Never counted against an upstream.
    Client(crate::error::Error),
    /// The upstream's response headers did not arrive in time (504).
    GatewayTimeout {
        /// The region the request was for.
        region: String,
        /// What did not arrive in time.
        detail: String,
    },
    /// `Host` missing, repeated or invalid (400, RFC 9112 §3.2).
    BadHost(&'static str),
    /// A request target with bytes outside US-ASCII (400, RFC 9112 §3.2, RFC 3986 §2: they
    /// must be percent-encoded); strict parsers reject it, so forwarding it would let the
    /// router and a later hop disagree on the path.
    BadTarget,
    /// A path upstreams read apart (400 `ambiguous-path`, docs/data-path.md "Paths"): an
    /// encoded slash, a `%` without two hex digits, dot segments above the root.
    AmbiguousPath(crate::extract::normalize::PathError),
    /// A request head the own HTTP/1.1 engine could not parse (RFC 9112 §2–§5): 400.
    BadHead(&'static str),
    /// A request head with more fields or bytes than `limits.max_headers` /
    /// `limits.max_header_bytes` (RFC 6585 §5): 431.
    HeadTooLarge,
    /// A method the router does not forward: `CONNECT` (405).
    MethodNotAllowed,
    /// A transfer coding other than `chunked` (501, RFC 9112 §6.1).
    UnsupportedTransferCoding,
    /// A query parameter of a fan-out route that cannot be used: a `limit` that is no number,
    /// a cursor that is no id of the route's scheme (400).
    BadParameter(String),
    /// An admin request without the admin token (401, `WWW-Authenticate: Bearer`, docs/admin.md).
    Unauthorized(&'static str),
    /// A state-changing admin request from another origin (403, docs/admin.md).
    ForeignOrigin,
    /// A request to a tokenless admin API for a `Host` it does not serve (403, docs/admin.md:
    /// DNS rebinding).
    HostNotAllowed,
    /// Too many wrong admin tokens from the client's address (429, with `Retry-After`).
    TooManyAttempts {
        /// How long until the next attempt is looked at.
        retry_after: std::time::Duration,
    },
    /// A gRPC call whose first message holds no readable id (400; gRPC 3).
    GrpcInvalid(String),
    /// A method other than `GET` on a `fanout:` route (405, `Allow: GET`).
    GetOnly,
    /// Regions failed a fan-out under `on_region_error: fail`, or every region did (502).
    RegionsFailed {
        /// `(region, what failed)`, in table order.
        regions: Vec<(String, String)>,
    },
    /// A fan-out refused at a bound of `crate::fanout::budget` (503, `Retry-After: 1`).
    FanoutBusy(crate::fanout::budget::Refusal),
    /// Over a `rate_limits:` rule (429, docs/rate-limits.md; gRPC 8 RESOURCE_EXHAUSTED),
    /// with `Retry-After` and the `RateLimit-Policy` / `RateLimit` fields; nothing forwarded.
    RateLimited(Box<crate::ratelimit::Limited>),
    /// A write of a group moving between regions, held past the move's `hold_ms` without
    /// a flip, or beyond `limits.held_requests` (503 with `Retry-After`; gRPC 14
    /// UNAVAILABLE with `grpc-retry-pushback-ms`; docs/moves.md). Nothing was forwarded.
    Moving {
        /// The move's name.
        name: String,
        /// When to try again: the move's `hold_ms`.
        retry_after: std::time::Duration,
        /// `Some(limits.held_requests)`: refused at once, that many writes held already.
        held_full: Option<usize>,
    },
    /// A field the router reads for a decision (a `{ header: NAME }` rate limit's key) sent
    /// on several lines with different values (400, docs/rate-limits.md): the router would
    /// count one value while the upstream may read another, or all of them joined.
    AmbiguousHeader(http::HeaderName),
    /// A routing table that failed validation was not installed (422, admin API).
    InvalidTable {
        /// The version that keeps serving.
        serving: String,
        /// Every error, as `file:line:column: message`.
        errors: Vec<String>,
    },
}

/// The methods a `405` lists in `Allow` (RFC 9110 §15.5.6): every one but `CONNECT`.
const ALLOW: &str = "GET, HEAD, POST, PUT, DELETE, PATCH, OPTIONS, TRACE";

impl Problem {
    /// The problem for an id (`text`, as sent) the table could not resolve: malformed (400,
    /// naming the id and the route kind) or owned by no region (404).
    pub fn unresolved(e: ResolveError, kind: Option<RouteKind>, text: &[u8]) -> Problem {
        match e {
            ResolveError::Malformed(error) => Problem::MalformedId {
                error,
                kind,
                text: String::from_utf8_lossy(&text[..text.len().min(80)]).into_owned(),
            },
            e => Problem::Unowned(e),
        }
    }

    /// The HTTP status of docs/data-path.md.
    pub fn status(&self) -> StatusCode {
        match self {
            Problem::MalformedId { .. }
            | Problem::GraphqlInvalid(_)
            | Problem::InvalidJson(_)
            | Problem::AmbiguousJson(_)
            | Problem::AmbiguousGraphql(_)
            | Problem::RegionConflict { .. }
            | Problem::AmbiguousHeader(_) => StatusCode::BAD_REQUEST,
            Problem::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Problem::Unowned(_) | Problem::NoId | Problem::NotFound(_) => StatusCode::NOT_FOUND,
            Problem::Loop(_) => StatusCode::LOOP_DETECTED,
            Problem::BadGateway { .. } | Problem::Misdirected { .. } => StatusCode::BAD_GATEWAY,
            Problem::Unavailable { .. } | Problem::Overloaded { .. } => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Problem::Client(e) => e.kind.status(),
            Problem::GatewayTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            Problem::BadHost(_)
            | Problem::BadTarget
            | Problem::AmbiguousPath(_)
            | Problem::BadHead(_) => StatusCode::BAD_REQUEST,
            Problem::HeadTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Problem::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Problem::UnsupportedTransferCoding => StatusCode::NOT_IMPLEMENTED,
            Problem::InvalidTable { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Problem::BadParameter(_) | Problem::GrpcInvalid(_) => StatusCode::BAD_REQUEST,
            Problem::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Problem::ForeignOrigin | Problem::HostNotAllowed => StatusCode::FORBIDDEN,
            Problem::TooManyAttempts { .. } | Problem::RateLimited(_) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            Problem::GetOnly => StatusCode::METHOD_NOT_ALLOWED,
            Problem::RegionsFailed { .. } => StatusCode::BAD_GATEWAY,
            Problem::FanoutBusy(_) | Problem::Moving { .. } => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The problem type's slug: the type is `urn:iuid-router:problem:{slug}`.
    pub fn slug(&self) -> &'static str {
        self.slug_and_title().0
    }

    fn slug_and_title(&self) -> (&'static str, &'static str) {
        match self {
            Problem::MalformedId { .. } => ("malformed-id", "Malformed entity id"),
            Problem::Unowned(ResolveError::Unmapped { .. }) => {
                ("unmapped-value", "No region owns this id")
            }
            Problem::Unowned(ResolveError::UnknownScheme(_)) => {
                ("unknown-scheme", "No such id scheme")
            }
            Problem::Unowned(_) => ("unowned-country", "No region owns this id"),
            Problem::NoId => ("no-id", "No entity id in the request"),
            Problem::NotFound(_) => ("not-found", "Not found"),
            Problem::GraphqlInvalid(_) => ("invalid-graphql", "Undecodable GraphQL request"),
            Problem::InvalidJson(_) => ("invalid-json", "Undecodable JSON body"),
            Problem::AmbiguousJson(_) => ("ambiguous-json", "JSON body read two ways"),
            Problem::AmbiguousGraphql(_) => ("ambiguous-graphql", "GraphQL request read two ways"),
            Problem::RegionConflict { .. } => {
                ("ids-in-several-regions", "Ids owned by different regions")
            }
            Problem::PayloadTooLarge { what, .. } => ("payload-too-large", what.title()),
            Problem::Loop(_) => ("routing-loop", "Routing loop detected"),
            Problem::BadGateway { .. } => ("bad-gateway", "Upstream failed"),
            Problem::Misdirected { .. } => ("misdirected", "Misdirected request"),
            Problem::Unavailable { .. } => ("region-unavailable", "No healthy upstream"),
            Problem::Overloaded { reason, .. } => match reason {
                ShedReason::MaxInFlight | ShedReason::PendingConnects => {
                    ("region-overloaded", "Region at its limit of requests")
                }
                ShedReason::Memory | ShedReason::Nofile => ("overloaded", "Router overloaded"),
            },
            Problem::Client(e) => match e.kind {
                ErrorKind::BodyTimeout => ("request-body-timeout", "Request body stalled"),
                ErrorKind::Aborted => ("client-aborted", "Request body incomplete"),
                _ => ("bad-body-framing", "Request body framing invalid"),
            },
            Problem::GatewayTimeout { .. } => ("gateway-timeout", "Upstream timed out"),
            Problem::BadHost(_) => ("invalid-host", "Host missing, repeated or invalid"),
            Problem::BadTarget => ("invalid-target", "Request target not US-ASCII"),
            Problem::AmbiguousPath(_) => ("ambiguous-path", "Path read two ways"),
            Problem::BadHead(_) => ("invalid-head", "Request head not valid HTTP/1.1"),
            Problem::HeadTooLarge => ("head-too-large", "Request header fields too large"),
            Problem::MethodNotAllowed => ("method-not-allowed", "Method not forwarded"),
            Problem::UnsupportedTransferCoding => (
                "unsupported-transfer-coding",
                "Transfer coding not implemented",
            ),
            Problem::InvalidTable { .. } => ("invalid-routing-table", "Invalid routing table"),
            Problem::BadParameter(_) => ("invalid-parameter", "Invalid query parameter"),
            Problem::GrpcInvalid(_) => ("invalid-grpc", "No id in the gRPC message"),
            Problem::Unauthorized(_) => ("unauthorized", "Admin token required"),
            Problem::ForeignOrigin => ("foreign-origin", "Cross-origin request refused"),
            Problem::HostNotAllowed => ("host-not-allowed", "Host not served"),
            Problem::TooManyAttempts { .. } => ("too-many-attempts", "Too many wrong tokens"),
            Problem::GetOnly => ("method-not-allowed", "Method not allowed here"),
            Problem::RegionsFailed { .. } => ("regions-failed", "Regions failed the fan-out"),
            Problem::FanoutBusy(_) => ("fanout-busy", "Too many fan-outs in flight"),
            Problem::RateLimited(_) => ("rate-limited", "Too many requests"),
            Problem::Moving { .. } => ("moving", "Entity moving between regions"),
            Problem::AmbiguousHeader(_) => ("ambiguous-header", "Header field read two ways"),
        }
    }

    fn detail(&self) -> String {
        match self {
            Problem::MalformedId { error, kind, text } => match kind {
                Some(kind) => format!(
                    "the id `{text}` in the request {} is not valid: {error}",
                    kind.as_str()
                ),
                None => format!("the id `{text}` is not valid: {error}"),
            },
            Problem::Unowned(e) => e.to_string(),
            Problem::NoId => "no configured route found an id in this request, and \
                              unrouted requests are rejected"
                .to_owned(),
            Problem::GraphqlInvalid(m)
            | Problem::InvalidJson(m)
            | Problem::AmbiguousJson(m)
            | Problem::AmbiguousGraphql(m) => m.clone(),
            Problem::RegionConflict { ids } => {
                let mut regions: Vec<&str> = ids.iter().map(|(_, r)| r.as_str()).collect();
                regions.sort_unstable();
                regions.dedup();
                let listed: Vec<String> = ids.iter().map(|(id, r)| format!("{id} ({r})")).collect();
                format!(
                    "one request can go to one region, but its ids belong to {}: {}",
                    regions.join(", "),
                    listed.join(", ")
                )
            }
            Problem::PayloadTooLarge { what, limit } => {
                format!("{} is over the {limit}-byte limit", what.as_str())
            }
            Problem::Loop(LoopReason::SeenRegion) => {
                "the request's Via already names this router's region".to_owned()
            }
            Problem::Loop(LoopReason::TooManyHops(n)) => {
                format!("the request already passed {n} proxies (Via), the most allowed")
            }
            Problem::BadGateway { region, detail } => {
                format!("upstream of region {region}: {detail}")
            }
            Problem::Misdirected { region } => format!(
                "region {region} answered 421 Misdirected Request with no owner to send it to once more"
            ),
            Problem::Unavailable { region, retry_after } => format!(
                "no upstream of region {region} is in rotation (ejected after failures, failing its health check, or refusing connections); retry in {} ms",
                retry_after.as_millis()
            ),
            Problem::Overloaded {
                region,
                reason,
                limit,
            } => match reason {
                ShedReason::MaxInFlight => format!(
                    "region {region} already has {limit} requests in flight from this edge, its \
                     limit ({}); try again shortly",
                    reason.setting()
                ),
                ShedReason::PendingConnects => format!(
                    "{limit} connections to region {region} are being made from this edge, its \
                     limit ({}); try again shortly",
                    reason.setting()
                ),
                ShedReason::Memory => format!(
                    "the router uses more than {limit} MiB ({}); try again shortly",
                    reason.setting()
                ),
                ShedReason::Nofile => format!(
                    "the router has no file descriptor left to reach region {region} ({}); \
                     try again shortly",
                    reason.setting()
                ),
            },
            Problem::Client(e) => format!("reading the request body failed: {}", e.detail),
            Problem::GatewayTimeout { region, detail } => {
                format!("upstream of region {region}: {detail}")
            }
            Problem::BadHost(why) => format!("an HTTP/1.1 request needs exactly one valid Host: {why}"),
            Problem::BadHead(why) => format!("the request head is not valid HTTP/1.1: {why}"),
            Problem::HeadTooLarge => "the request head has more header fields or bytes than the \
                                      router accepts (limits.max_headers, limits.max_header_bytes)"
                .to_owned(),
            Problem::BadTarget => "the request target holds bytes outside US-ASCII; percent-encode \
                                   them (RFC 3986 §2.1)"
                .to_owned(),
            Problem::AmbiguousPath(e) => e.describe().to_owned(),
            Problem::MethodNotAllowed => {
                "CONNECT is not forwarded: this router proxies requests, not tunnels".to_owned()
            }
            Problem::UnsupportedTransferCoding => {
                "only the chunked transfer coding is implemented (RFC 9112 §6.1)".to_owned()
            }
            Problem::InvalidTable { serving, .. } => {
                format!("the table was not installed; version {serving} keeps serving")
            }
            Problem::BadParameter(m) | Problem::GrpcInvalid(m) => m.clone(),
            Problem::Unauthorized(why) | Problem::NotFound(why) => (*why).to_owned(),
            Problem::ForeignOrigin => {
                "a state-changing request from another origin is refused".to_owned()
            }
            Problem::HostNotAllowed => "an admin API without admin.token_file answers only to \
                Host 127.0.0.1, localhost, [::1] and admin.allowed_hosts"
                .to_owned(),
            Problem::TooManyAttempts { retry_after } => format!(
                "too many wrong tokens from this address: try again in {} s",
                retry_after.as_millis().div_ceil(1000).max(1)
            ),
            Problem::GetOnly => "a fan-out route answers GET only".to_owned(),
            Problem::RegionsFailed { regions } => {
                let listed: Vec<String> =
                    regions.iter().map(|(r, why)| format!("{r} ({why})")).collect();
                format!("regions failed: {}", listed.join(", "))
            }
            Problem::FanoutBusy(refusal) => format!(
                "the router is at its bound {}; retry in a second",
                refusal.key()
            ),
            Problem::RateLimited(limited) => format!(
                "over the rate limit `{}` ({}): retry in {} s",
                limited.rule,
                limited.terms,
                limited.retry_after_secs()
            ),
            Problem::AmbiguousHeader(name) => format!(
                "the header field `{name}` came on several lines with different values; the \
                 router reads it for a rate limit and the upstream could read another value: \
                 send it once"
            ),
            Problem::Moving { name, held_full: Some(n), .. } => format!(
                "the entity is moving between regions (move `{name}`): its write was refused at \
                 once, not held: {n} writes (limits.held_requests) were held already; retry shortly"
            ),
            Problem::Moving { name, retry_after, .. } => format!(
                "the entity is moving between regions (move `{name}`): its write was held {} ms \
                 (the move's hold_ms) and the move did not flip; retry shortly",
                retry_after.as_millis()
            ),
        }
    }

    /// Whether an HTTP/1.x connection closes after this answer whatever else holds: a shed
    /// request's client comes back after `Retry-After` on a new one (docs/overload.md). The
    /// head path reads it here, the bridge from the response's [`Shed`] mark.
    pub fn closes_connection(&self) -> bool {
        matches!(self, Problem::Overloaded { .. })
    }

    /// The response: RFC 9457 body, `Content-Type: application/problem+json`. It carries a
    /// [`RouterMade`] extension, so that the data path can answer a gRPC request with a gRPC
    /// status instead ([`grpc_response`]).
    pub fn into_response(self) -> Response<Full<Bytes>> {
        let status = self.status();
        let made = RouterMade {
            status,
            slug: self.slug(),
            detail: self.detail(),
            retry_after_ms: None,
        };
        let shed = self.closes_connection();
        let mut resp = self.into_problem_response();
        let retry_after_ms = resp
            .headers()
            .get(header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .map(|secs| secs.saturating_mul(1000));
        let made = RouterMade {
            retry_after_ms,
            ..made
        };
        resp.extensions_mut().insert(made);
        if shed {
            resp.extensions_mut().insert(Shed);
        }
        resp
    }

    fn into_problem_response(self) -> Response<Full<Bytes>> {
        let status = self.status();
        let (slug, title) = self.slug_and_title();
        let mut body = json!({
            "type": format!("urn:iuid-router:problem:{slug}"),
            "title": title,
            "status": status.as_u16(),
            "detail": self.detail(),
        });
        match &self {
            Problem::Unowned(ResolveError::UnownedCountry { country, .. }) => {
                body["country"] = json!(country);
            }
            Problem::InvalidTable { errors, .. } => {
                body["errors"] = json!(errors);
            }
            Problem::RateLimited(limited) => {
                body["rule"] = json!(&*limited.rule);
            }
            Problem::AmbiguousHeader(name) => {
                body["field"] = json!(name.as_str());
            }
            Problem::RegionsFailed { regions } => {
                let failed: serde_json::Map<String, serde_json::Value> = regions
                    .iter()
                    .map(|(r, why)| (r.clone(), json!({ "error": why })))
                    .collect();
                body["regions"] = serde_json::Value::Object(failed);
            }
            Problem::RegionConflict { ids } => {
                let mut regions: Vec<&str> = ids.iter().map(|(_, r)| r.as_str()).collect();
                regions.sort_unstable();
                regions.dedup();
                body["regions"] = json!(regions);
                body["ids"] = json!(ids
                    .iter()
                    .map(|(id, r)| json!({ "id": id, "region": r }))
                    .collect::<Vec<_>>());
            }
            _ => {}
        }
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let mut resp = Response::new(Full::new(Bytes::from(bytes)));
        *resp.status_mut() = status;
        if let Problem::MethodNotAllowed = &self {
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static(ALLOW));
        }
        if let Problem::Unauthorized(_) = &self {
            resp.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Problem::GetOnly = &self {
            resp.headers_mut()
                .insert(header::ALLOW, HeaderValue::from_static("GET"));
        }
        if let Problem::FanoutBusy(_) | Problem::Overloaded { .. } = &self {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if let Problem::Unavailable { retry_after, .. }
        | Problem::TooManyAttempts { retry_after }
        | Problem::Moving { retry_after, .. } = &self
        {
            // Whole seconds, rounded up, at least 1 (RFC 9110 §10.2.3).
            let secs = retry_after.as_millis().div_ceil(1000).max(1);
            if let Ok(v) = HeaderValue::from_str(&secs.to_string()) {
                resp.headers_mut().insert(header::RETRY_AFTER, v);
            }
        }
        if let Problem::RateLimited(limited) = &self {
            let headers = resp.headers_mut();
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from(limited.retry_after_secs()),
            );
            headers.insert("ratelimit-policy", limited.policy.clone());
            if let Ok(v) = HeaderValue::from_str(&limited.rate_limit_field()) {
                headers.insert("ratelimit", v);
            }
        }
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        resp
    }
}

/// Marks a shed answer (`Problem::Overloaded`): an HTTP/1.x connection closes after it
/// (docs/overload.md).
#[derive(Debug, Clone, Copy)]
pub struct Shed;

/// Marks a response the router made itself (a refusal), with what a gRPC client is told.
#[derive(Debug, Clone)]
pub struct RouterMade {
    /// The HTTP status of docs/data-path.md.
    pub status: StatusCode,
    /// The problem type's slug (`urn:iuid-router:problem:{slug}`).
    pub slug: &'static str,
    /// The problem's detail.
    pub detail: String,
    /// Its `Retry-After`, in ms, for a gRPC client's `grpc-retry-pushback-ms` (gRFC A6).
    pub retry_after_ms: Option<u64>,
}
