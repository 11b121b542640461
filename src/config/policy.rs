//! Plain policy types of the router config: timeouts, limits, outlier ejection, retries and
//! active checks (docs/config.md, §6). They are data only; what enforces them lives in
//! `crate::upstream` (ejection, budgets, checks) and `crate::server` (limits), which read
//! them from here, so the config depends on no runtime module.

use std::time::Duration;

use serde::Deserialize;

/// Upstream timeouts in milliseconds (docs/config.md `timeouts`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Timeouts {
    /// TCP connect to an upstream.
    pub connect_ms: u64,
    /// From the end of the request body (as sent upstream) to the upstream's response headers
    /// (then 504). An upload in progress is not counted: its pace is bounded by `idle_ms`.
    pub response_headers_ms: u64,
    /// The longest wait without progress: for a client's body (then 408, the client's), an
    /// upstream that reads none of it (504), an upstream's response body, a client that
    /// reads none of the response (both connections closed; over HTTP/2 the stream is
    /// reset), an HTTP/2 client connection with no stream open (closed with GOAWAY), and a
    /// pooled upstream connection left idle.
    pub idle_ms: u64,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect_ms: 1000,
            response_headers_ms: 15_000,
            idle_ms: 60_000,
        }
    }
}

impl Timeouts {
    /// `connect_ms` as a duration.
    pub fn connect(&self) -> Duration {
        Duration::from_millis(self.connect_ms)
    }
    /// `response_headers_ms` as a duration.
    pub fn response_headers(&self) -> Duration {
        Duration::from_millis(self.response_headers_ms)
    }
    /// `idle_ms` as a duration.
    pub fn idle(&self) -> Duration {
        Duration::from_millis(self.idle_ms)
    }
}

/// The listen backlog when none is configured: nginx's 511 is too small for bursts of
/// connects (1,000 back to back left a few waiting a second for a SYN retransmit at 128); the
/// kernel caps it at `net.core.somaxconn` (4096 by default since Linux 5.4).
pub const DEFAULT_BACKLOG: u32 = 1024;

/// Request limits (docs/config.md `limits`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest GraphQL body buffered to find ids, in bytes.
    pub graphql_body_bytes: usize,
    /// Largest body a `json:` route buffers to find its id, in bytes (then 413).
    pub json_body_bytes: usize,
    /// `Via` entries a request may already carry; at this many it is a loop (508).
    pub max_hops: usize,
    /// Most lexer tokens in a GraphQL document parsed to find ids (then 400).
    pub graphql_max_tokens: usize,
    /// Deepest nesting of a GraphQL document parsed to find ids (then 400).
    pub graphql_max_depth: usize,
    /// Longest a client may take to send a request's headers, in ms (slowloris).
    pub header_read_timeout_ms: u64,
    /// Most bytes of request headers (431 beyond).
    pub max_header_bytes: usize,
    /// Most request header fields (431 beyond).
    pub max_headers: usize,
    /// Connections the kernel queues on the public listener before the router accepts them
    /// (`listen(2)` backlog; capped by `net.core.somaxconn`).
    pub listen_backlog: u32,
    /// Most bytes read of one region's answer to a fan-out (docs/fanout.md; then the region is
    /// named as failed, `too_large`). Also bounds each region's answer to a split GraphQL
    /// `nodes` request.
    pub fanout_region_bytes: usize,
    /// Largest first message a `grpc:` route reads to find its id, in bytes (docs/tls-h2-grpc.md; then
    /// 413, `RESOURCE_EXHAUSTED` for a gRPC client).
    pub grpc_message_bytes: usize,
    /// Most bytes of regions' answers buffered by all fan-outs together (list and split
    /// `nodes`), in bytes: at least `fanout_region_bytes`. A fan-out that would go beyond is
    /// answered 503 with `Retry-After` (docs/fanout.md: memory is bounded).
    pub fanout_buffer_bytes: usize,
    /// Most fan-outs in flight in the whole router (then 503 with `Retry-After`).
    pub fanout_concurrent: usize,
    /// Most fan-outs in flight on one client connection (an HTTP/2 connection multiplexes
    /// many; then 503 with `Retry-After`). At most `fanout_concurrent`.
    pub fanout_per_connection: usize,
    /// Most requests in flight to one region from this edge, every protocol and fan-out leg
    /// and legacy probe together (docs/overload.md); beyond, 503 `region-overloaded` at once.
    pub region_max_in_flight: usize,
    /// Most connections being made (TCP and TLS) to one region's upstreams from this edge
    /// at once (docs/overload.md); beyond, 503 `region-overloaded` at once. Above
    /// `region_max_in_flight` it bounds nothing more.
    pub region_max_pending_connects: usize,
    /// Each region's limit follows its latency within `[adaptive_min_in_flight,
    /// region_max_in_flight]` (docs/overload.md, "Adaptive limit").
    pub adaptive: bool,
    /// The adaptive limit's floor, in requests; at least 1.
    pub adaptive_min_in_flight: usize,
    /// Most writes held by every move together (docs/moves.md, `fence`); beyond, 503
    /// `moving` at once. 0: none is held.
    pub held_requests: usize,
    /// Most mirror copies in flight per move (docs/moves.md, `mirror`); beyond, a copy is
    /// not sent (counted `dropped`).
    pub mirrors_in_flight: usize,
    /// Send the request upstream with its path normalised (`/v1/p%61y//x` as `/v1/pay/x`),
    /// as routes matched it; `false`: as the client sent it (docs/data-path.md "Paths").
    pub forward_normalized_path: bool,
    /// An encoded slash or backslash in a path (`%2F`, `%5C`): `reject` (400
    /// `ambiguous-path`) or `keep` (docs/data-path.md "Paths").
    pub escaped_slashes: crate::extract::normalize::EscapedSlashes,
    /// What becomes of a request field with `_` in its name that is not one of the router's
    /// own read with `-` (those are always removed): docs/data-path.md "Field names with `_`".
    pub underscore_fields: UnderscoreFields,
}

/// `limits.underscore_fields`: a request field whose name holds `_` (docs/data-path.md,
/// "Field names with `_`"). CGI-style upstreams (Rack, WSGI, PHP) read `X_A` and `X-A` as
/// one key (`HTTP_X_A`), so such a field can stand for another the router has vetted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnderscoreFields {
    /// Removed, as nginx's `underscores_in_headers off` removes it.
    #[default]
    Drop,
    /// Sent on as it came.
    Pass,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            graphql_body_bytes: 1 << 20,
            json_body_bytes: 1 << 20,
            max_hops: 3,
            graphql_max_tokens: 50_000,
            graphql_max_depth: 64,
            header_read_timeout_ms: 10_000,
            max_header_bytes: 64 << 10,
            max_headers: 100,
            listen_backlog: DEFAULT_BACKLOG,
            fanout_region_bytes: 8 << 20,
            grpc_message_bytes: 1 << 20,
            fanout_buffer_bytes: 128 << 20,
            fanout_concurrent: 64,
            fanout_per_connection: 8,
            region_max_in_flight: 1024,
            region_max_pending_connects: 1024,
            adaptive: false,
            adaptive_min_in_flight: 8,
            held_requests: 10_000,
            mirrors_in_flight: 256,
            forward_normalized_path: false,
            escaped_slashes: crate::extract::normalize::EscapedSlashes::Reject,
            underscore_fields: UnderscoreFields::Drop,
        }
    }
}

impl Limits {
    /// The bounds on parsing a GraphQL document (`graphql_max_tokens`, `graphql_max_depth`).
    pub fn parse_limits(&self) -> crate::extract::graphql::plan::ParseLimits {
        crate::extract::graphql::plan::ParseLimits {
            tokens: self.graphql_max_tokens,
            depth: self.graphql_max_depth,
        }
    }
}

/// Outlier ejection settings (router config `health:`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HealthPolicy {
    /// Consecutive failures that eject an upstream.
    pub eject_after: u32,
    /// First ejection, in ms; doubles with each ejection in a row.
    pub ejection_ms: u64,
    /// Longest ejection, in ms.
    pub max_ejection_ms: u64,
    /// Most of a region ejected for failures at once, in percent (at least one upstream).
    pub max_ejected_percent: u32,
}

impl Default for HealthPolicy {
    fn default() -> Self {
        HealthPolicy {
            eject_after: 5,
            ejection_ms: 1_000,
            max_ejection_ms: 30_000,
            max_ejected_percent: 50,
        }
    }
}

/// Retry settings (router config `retries:`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Most retries of one request (each on another upstream of the region).
    pub max_retries: u32,
    /// Retries may add this share of requests, in percent.
    pub budget_percent: u32,
    /// Retries always allowed per second and region, whatever the share.
    pub min_per_second: u32,
    /// Request bodies up to this size are kept for a replay; larger ones stream, unretried.
    pub buffer_bytes: usize,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 2,
            budget_percent: 20,
            min_per_second: 10,
            buffer_bytes: 64 << 10,
        }
    }
}

/// Active check settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckPolicy {
    /// Path asked on each upstream, e.g. `/healthz`.
    pub path: String,
    /// Time between checks, in ms.
    #[serde(default = "default_interval")]
    pub interval_ms: u64,
    /// Longest wait for a check's answer, in ms.
    #[serde(default = "default_timeout")]
    pub timeout_ms: u64,
}

fn default_interval() -> u64 {
    5_000
}

fn default_timeout() -> u64 {
    1_000
}

/// What a request for an id without routing bits does (docs/fanout.md `legacy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Legacy {
    /// docs/routing-table.md: it goes to `default_region`.
    #[default]
    DefaultRegion,
    /// A `GET`/`HEAD` answered 404 or 410 there is asked of every other region; the first 2xx
    /// wins and its region is remembered (`legacy_cache`).
    Probe,
}

/// The owner cache of `legacy: probe` (router config `legacy_cache:`).
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LegacyCache {
    /// Most owners remembered (least recently used dropped first); 0 remembers none.
    pub entries: usize,
    /// How long an owner is remembered, in seconds.
    pub ttl_s: u64,
    /// How long an id no region owns (every region answered 404 or 410) is remembered, in
    /// ms: meanwhile a 404/410 for it is returned without probing again. 0 remembers none.
    pub negative_ttl_ms: u64,
}

impl Default for LegacyCache {
    fn default() -> Self {
        LegacyCache {
            entries: 100_000,
            ttl_s: 3600,
            negative_ttl_ms: 5_000,
        }
    }
}

/// The budget of `legacy: probe` (router config `legacy_probe:`): like the retry budget,
/// probes of the other regions may be at most a share of the legacy requests, plus a small
/// floor, so that a flood of unknown legacy ids does not multiply into every region.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LegacyProbe {
    /// Probes may be this share of the requests for legacy ids, in percent (0 to 100).
    pub budget_percent: u32,
    /// Probes always allowed per second, whatever the share.
    pub min_per_second: u32,
}

impl Default for LegacyProbe {
    fn default() -> Self {
        LegacyProbe {
            budget_percent: 20,
            min_per_second: 10,
        }
    }
}

/// The bounds of fan-out memory and legacy probing that `check` refuses: each error as the
/// key path it is at and a message, made into a `file:line:column` error by `at`.
pub(super) fn check_bounds<E>(
    limits: &Limits,
    probe: &LegacyProbe,
    at: impl Fn(&[&str], String) -> E,
) -> Vec<E> {
    let mut errors = Vec::new();
    if limits.fanout_buffer_bytes < limits.fanout_region_bytes {
        errors.push(at(
            &["limits", "fanout_buffer_bytes"],
            format!(
                "fanout_buffer_bytes ({}) must be at least fanout_region_bytes ({}): one \
                 region's whole answer must fit",
                limits.fanout_buffer_bytes, limits.fanout_region_bytes
            ),
        ));
    }
    if limits.region_max_in_flight == 0 {
        errors.push(at(
            &["limits", "region_max_in_flight"],
            "region_max_in_flight must be at least 1".to_owned(),
        ));
    }
    if limits.region_max_pending_connects == 0 {
        errors.push(at(
            &["limits", "region_max_pending_connects"],
            "region_max_pending_connects must be at least 1".to_owned(),
        ));
    }
    if limits.adaptive_min_in_flight == 0
        || limits.adaptive && limits.adaptive_min_in_flight > limits.region_max_in_flight.max(1)
    {
        errors.push(at(
            &["limits", "adaptive_min_in_flight"],
            format!(
                "adaptive_min_in_flight must be from 1 to region_max_in_flight ({})",
                limits.region_max_in_flight
            ),
        ));
    }
    if limits.fanout_concurrent == 0 {
        errors.push(at(
            &["limits", "fanout_concurrent"],
            "fanout_concurrent must be at least 1".to_owned(),
        ));
    }
    if limits.fanout_per_connection == 0 || limits.fanout_per_connection > limits.fanout_concurrent
    {
        errors.push(at(
            &["limits", "fanout_per_connection"],
            format!(
                "fanout_per_connection must be from 1 to fanout_concurrent ({})",
                limits.fanout_concurrent
            ),
        ));
    }
    if probe.budget_percent > 100 {
        errors.push(at(
            &["legacy_probe", "budget_percent"],
            "budget_percent is a percentage: 0 to 100".to_owned(),
        ));
    }
    errors
}
