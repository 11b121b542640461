//! Prometheus metrics (docs/admin.md): names, units and the recorder.
//!
//! Names follow Prometheus conventions: a `iuid_router_` prefix, `_total` for counters,
//! `_seconds` for durations, an `_info` gauge (value 1) carrying the table version as a label.
//! The recorder is process-wide (the `metrics` facade has one global recorder), so routers
//! started in one process — as the tests do — share one registry.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use ::metrics::{Counter, Gauge, Histogram, SharedString};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::error::{ErrorKind, ShedReason};
use crate::extract::RouteKind;

pub mod failover;
pub mod http3;
pub mod moves;
mod region;

pub use region::{DecisionCounters, Protocol, RegionMetrics};

/// Requests answered, by `route` kind (`path`, `header`, `graphql`, `fanout`, `grpc`, `none`), `region`
/// (`none` when refused before one was chosen) and `status` class (`2xx` … `5xx`).
pub const REQUESTS: &str = "iuid_router_requests_total";
/// Requests being handled now.
pub const IN_FLIGHT: &str = "iuid_router_requests_in_flight";
/// Time from sending a request upstream to its response headers, by `region`, in seconds.
pub const UPSTREAM_DURATION: &str = "iuid_router_upstream_request_duration_seconds";
/// Upstream-blamed failures by `region` and `kind` (`connect`, `timeout`, `reset`).
pub const UPSTREAM_ERRORS: &str = "iuid_router_upstream_errors_total";
/// Requests answered 503 at once because their region or the process was at a limit
/// (docs/overload.md), by `region` and `reason` (`max_in_flight`, `pending_connects`,
/// `memory`, `nofile`); never counted against the region's health.
pub const SHED: &str = "iuid_router_shed_total";
/// 1 while the process's overload guard acts on `resource` (`memory`: shedding above
/// `overload.max_memory_mb`; `nofile`: accepts paused at 90 % of `RLIMIT_NOFILE`), else 0.
pub const OVERLOADED: &str = "iuid_router_overloaded";
/// Each region's adaptive concurrency limit now (with `limits.adaptive`), by `region`.
pub const REGION_LIMIT: &str = "iuid_router_region_limit";
/// Client-blamed failures by `kind` (`bad_framing`, `aborted`, `body_timeout`,
/// `send_timeout`): never counted against an upstream (docs/data-path.md).
pub const CLIENT_ERRORS: &str = "iuid_router_client_errors_total";
/// Routing decisions by `rule` kind (`override`, `country`, `default_region`, `unrouted`,
/// `map`, `scheme_default`, `hash`) and `scheme` (`iuid`, a table scheme's name, `none`).
pub const DECISIONS: &str = "iuid_router_routing_decisions_total";
/// Routing-table reloads by `result` (`success`, `failure`).
pub const RELOADS: &str = "iuid_router_table_reloads_total";
/// 1 for the routing-table `version` now serving, 0 for versions served before.
pub const TABLE_INFO: &str = "iuid_router_routing_table_info";
/// Requests sent to several regions (docs/fanout.md), by `kind` (`list`, `split_nodes`) and
/// `result` (`complete`, `partial`, `failed`).
pub const FANOUT_REQUESTS: &str = "iuid_router_fanout_requests_total";
/// Each region's part of such a request, by `region` and `outcome` (`ok`, or what failed:
/// `connect`, `reset`, `timeout`, `unavailable`, `status`, `too_large`, `not_json`,
/// `no_items_array`, `bad_id`).
pub const FANOUT_LEGS: &str = "iuid_router_fanout_legs_total";
/// Time to each region's whole answer to a fan-out, by `region`, in seconds.
pub const FANOUT_LEG_DURATION: &str = "iuid_router_fanout_leg_duration_seconds";
/// Fan-outs refused at a bound (503), by `reason` (`concurrent`, `per_connection`, `memory`).
pub const FANOUT_REFUSED: &str = "iuid_router_fanout_refused_total";
/// Legacy ids not probed after a 404/410, by `reason` (`budget`: the probe budget is spent;
/// `negative_cache`: no region owned it a moment ago).
pub const LEGACY_PROBES_SKIPPED: &str = "iuid_router_legacy_probes_skipped_total";
/// Legacy ids asked of the other regions after a 404/410 (`legacy: probe`), by `result`
/// (`found`, `not_found`).
pub const LEGACY_PROBES: &str = "iuid_router_legacy_probes_total";
/// Lookups of the legacy owner cache, by `result` (`hit`, `miss`).
pub const LEGACY_CACHE: &str = "iuid_router_legacy_cache_total";
/// Reloads of the listener's TLS certificates, by `result` (`success`, `failure`: the
/// certificates in use were kept).
pub const TLS_RELOADS: &str = "iuid_router_tls_reloads_total";
/// TLS handshakes that did not complete, by `reason` (`timeout`, `error`).
pub const TLS_HANDSHAKE_FAILURES: &str = "iuid_router_tls_handshake_failures_total";
/// Admin requests refused (docs/admin.md), by `reason` (`unauthorized`: no or a wrong token, or
/// an ended session; `foreign_origin`: a state change from another origin;
/// `host_not_allowed`: a tokenless admin asked for another `Host`, as DNS rebinding does;
/// `throttled`: too many wrong tokens from the address). A rising count is someone guessing.
pub const ADMIN_REFUSALS: &str = "iuid_router_admin_refusals_total";
/// HTTP/1.x requests the own engine carried through the shared phases (`Proxy::handle`,
/// as HTTP/2's) rather than its head path: upgrades, absolute-form targets, gRPC routes,
/// legacy ids, regions over HTTP/2, chunked GraphQL bodies and `nodes` splits
/// (docs/data-path.md, "One data path").
pub const HTTP1_SHARED: &str = "iuid_router_http1_shared_phases_total";
/// Counter `{reason}`: finished spans that were not exported (docs/traces.md): `queue_full`
/// (the export queue was full), `export_failed` (the collector refused them or was away).
pub const TRACE_SPANS_DROPPED: &str = "iuid_router_trace_spans_dropped_total";
/// Counter `{rule}`: requests (and fan-out legs, legacy probes) refused 429 by a
/// `rate_limits:` rule (docs/rate-limits.md).
pub const RATE_LIMITED: &str = "iuid_router_rate_limited_total";
/// Counter `{on_error}`: rate-limit decisions Redis (`store.redis`) could not make, decided
/// by `on_error` instead (`local`, `allow`); never a 5xx (docs/rate-limits.md).
pub const RATE_LIMIT_STORE_ERRORS: &str = "iuid_router_rate_limit_store_errors_total";
/// Gauge `{rule}`: keys a rule holds in this edge's memory now (idle ones are evicted every
/// second).
pub const RATE_LIMIT_KEYS: &str = "iuid_router_rate_limit_keys";
/// Counter `{kind, action}`: request fields with `_` in their name (docs/data-path.md "Field
/// names with `_`"), one per field line: `kind` `own` (one of the router's own fields read
/// with `-`: always `dropped`) or `other` (`dropped` or `passed`, `limits.underscore_fields`).
pub const UNDERSCORE_FIELDS: &str = "iuid_router_underscore_fields_total";

/// Gauge `{version,commit}`, always 1: the router's version (`Cargo.toml`) and the commit it
/// was built from (`git rev-parse --short=12 HEAD` at build time, `unknown` outside a
/// checkout), as Prometheus exporters report their build (`build.rs`).
pub const BUILD_INFO: &str = "iuid_router_build_info";

/// Upstream latency buckets, seconds: 0.5 ms to 30 s.
const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0,
];

/// Installs the Prometheus recorder once per process and returns its handle for `/metrics`.
/// If another recorder was installed first (an embedding program's), metrics go there and
/// the handle renders an empty registry.
pub fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &LATENCY_BUCKETS)
            .unwrap_or_else(|_| PrometheusBuilder::new());
        match builder.install_recorder() {
            Ok(handle) => {
                describe();
                ::metrics::gauge!(
                    BUILD_INFO,
                    "version" => env!("CARGO_PKG_VERSION"),
                    "commit" => env!("IUID_ROUTER_COMMIT")
                )
                .set(1.0);
                handle
            }
            Err(e) => {
                tracing::warn!(error = %e, "a metrics recorder is already installed");
                PrometheusBuilder::new().build_recorder().handle()
            }
        }
    })
}

/// Folds recorded histogram samples into their buckets every `every`, for as long as the
/// calling runtime runs.
///
/// The recorder keeps each histogram sample (8 bytes a request) until upkeep runs; with
/// `install_recorder` nothing runs it but a scrape, so a router nobody scrapes would grow by
/// about half a megabyte a second at 60k requests/s.
pub fn spawn_upkeep(every: std::time::Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            handle().run_upkeep();
        }
    });
}

fn describe() {
    ::metrics::describe_gauge!(
        BUILD_INFO,
        "The router's version and the commit it was built from (always 1)."
    );
    ::metrics::describe_counter!(
        REQUESTS,
        "Requests answered, by route kind, region and status class."
    );
    ::metrics::describe_gauge!(IN_FLIGHT, "Requests being handled now.");
    ::metrics::describe_histogram!(
        UPSTREAM_DURATION,
        ::metrics::Unit::Seconds,
        "Time to an upstream's response headers, by region."
    );
    ::metrics::describe_counter!(
        UPSTREAM_ERRORS,
        "Upstream-blamed failures by region and kind."
    );
    ::metrics::describe_counter!(
        CLIENT_ERRORS,
        "Client-blamed failures by kind; never counted against an upstream."
    );
    ::metrics::describe_counter!(
        SHED,
        "Requests answered 503 at once at their region's or the process's limit, by region and reason."
    );
    ::metrics::describe_gauge!(
        OVERLOADED,
        "1 while the overload guard acts on the resource (memory, nofile)."
    );
    ::metrics::describe_gauge!(
        REGION_LIMIT,
        "Each region's adaptive concurrency limit now."
    );
    ::metrics::describe_counter!(DECISIONS, "Routing decisions by rule kind.");
    ::metrics::describe_counter!(RELOADS, "Routing-table reloads by result.");
    ::metrics::describe_gauge!(
        TABLE_INFO,
        "The routing-table version serving (1) and served before (0)."
    );
    ::metrics::describe_counter!(
        FANOUT_REQUESTS,
        "Requests sent to several regions, by kind and result."
    );
    ::metrics::describe_counter!(
        FANOUT_LEGS,
        "Regions' parts of fan-out requests, by region and outcome."
    );
    ::metrics::describe_histogram!(
        FANOUT_LEG_DURATION,
        ::metrics::Unit::Seconds,
        "Time to a region's whole answer to a fan-out, by region."
    );
    ::metrics::describe_counter!(
        LEGACY_PROBES,
        "Legacy ids probed in every region, by result."
    );
    ::metrics::describe_counter!(LEGACY_CACHE, "Legacy owner cache lookups, by result.");
    ::metrics::describe_counter!(FANOUT_REFUSED, "Fan-outs refused at a bound, by reason.");
    ::metrics::describe_counter!(
        LEGACY_PROBES_SKIPPED,
        "Legacy ids not probed after a 404/410, by reason."
    );
    ::metrics::describe_counter!(TLS_RELOADS, "TLS certificate reloads, by result.");
    ::metrics::describe_counter!(
        TLS_HANDSHAKE_FAILURES,
        "TLS handshakes that did not complete, by reason."
    );
    ::metrics::describe_counter!(ADMIN_REFUSALS, "Admin requests refused, by reason.");
    ::metrics::describe_counter!(
        HTTP1_SHARED,
        "HTTP/1.x requests the own engine carried through the shared phases."
    );
    ::metrics::describe_counter!(
        RATE_LIMITED,
        "Requests, fan-out legs and legacy probes refused 429 by a rate_limits rule, by rule."
    );
    ::metrics::describe_counter!(
        RATE_LIMIT_STORE_ERRORS,
        "Rate-limit decisions Redis could not make, by on_error (local, allow)."
    );
    ::metrics::describe_counter!(
        UNDERSCORE_FIELDS,
        "Request fields with _ in their name, by kind (own, other) and action (dropped, passed)."
    );
    ::metrics::describe_gauge!(
        RATE_LIMIT_KEYS,
        "Keys a rate_limits rule holds in this edge's memory, by rule."
    );
    moves::describe();
    failover::describe();
    ::metrics::describe_counter!(
        TRACE_SPANS_DROPPED,
        "Finished spans not exported, by reason: queue_full, export_failed."
    );
}

/// Counts `spans` finished spans dropped for `reason` (`queue_full`, `export_failed`).
pub fn trace_spans_dropped(reason: &'static str, spans: u64) {
    handle();
    ::metrics::counter!(TRACE_SPANS_DROPPED, "reason" => reason).increment(spans);
}

/// The handle of [`RATE_LIMITED`] for `rule`, looked up once per rule.
pub fn rate_limited(rule: &str) -> Counter {
    handle();
    ::metrics::counter!(RATE_LIMITED, "rule" => rule.to_owned())
}

/// Counts one decision Redis could not make, decided by `on_error` (`local`, `allow`).
pub fn rate_limit_store_error(on_error: &'static str) {
    handle();
    ::metrics::counter!(RATE_LIMIT_STORE_ERRORS, "on_error" => on_error).increment(1);
}

/// Sets [`RATE_LIMIT_KEYS`] of `rule`.
pub fn rate_limit_keys(rule: &str, keys: usize) {
    handle();
    ::metrics::gauge!(RATE_LIMIT_KEYS, "rule" => rule.to_owned()).set(keys as f64);
}

/// Counts `lines` request field lines with `_` in their name: one of the router's own read with
/// `-` (`own`, always dropped), or another, `dropped` or `passed` ([`UNDERSCORE_FIELDS`]).
pub fn underscore_fields(own: bool, dropped: bool, lines: u64) {
    handle();
    let kind = if own { "own" } else { "other" };
    let action = if dropped { "dropped" } else { "passed" };
    ::metrics::counter!(UNDERSCORE_FIELDS, "kind" => kind, "action" => action).increment(lines);
}

/// Sets [`OVERLOADED`] for `resource` (`memory`, `nofile`).
pub fn overloaded(resource: &'static str, on: bool) {
    handle();
    ::metrics::gauge!(OVERLOADED, "resource" => resource).set(if on { 1.0 } else { 0.0 });
}

/// Sets [`REGION_LIMIT`] of `region`.
pub fn region_limit(region: &Arc<str>, limit: usize) {
    handle();
    ::metrics::gauge!(REGION_LIMIT, "region" => SharedString::from_shared(region.clone()))
        .set(limit as f64);
}

/// Counts one HTTP/1.x request carried through the shared phases.
pub fn http1_shared() {
    handle();
    ::metrics::counter!(HTTP1_SHARED).increment(1);
}

/// `kind` of [`FANOUT_REQUESTS`]: which route asked several regions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanoutKind {
    /// A `fanout:` list route.
    List,
    /// A GraphQL `nodes` split by region (`split_nodes`).
    SplitNodes,
}

/// `result` of [`FANOUT_REQUESTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FanoutResult {
    /// Every region answered.
    Complete,
    /// Some regions failed; the answer says which.
    Partial,
    /// The request failed (every region, or one under `on_region_error: fail`).
    Failed,
}

/// Counts one request sent to several regions and its result.
pub fn fanout_request(kind: FanoutKind, result: FanoutResult) {
    handle();
    let kind = match kind {
        FanoutKind::List => "list",
        FanoutKind::SplitNodes => "split_nodes",
    };
    let result = match result {
        FanoutResult::Complete => "complete",
        FanoutResult::Partial => "partial",
        FanoutResult::Failed => "failed",
    };
    ::metrics::counter!(FANOUT_REQUESTS, "kind" => kind, "result" => result).increment(1);
}

/// Counts one region's part of a fan-out and records how long its whole answer took.
pub fn fanout_leg(region: &Arc<str>, outcome: &'static str, seconds: f64) {
    handle();
    let label = SharedString::from_shared(region.clone());
    ::metrics::counter!(FANOUT_LEGS, "region" => label.clone(), "outcome" => outcome).increment(1);
    ::metrics::histogram!(FANOUT_LEG_DURATION, "region" => label).record(seconds);
}

/// Counts one legacy probe of the other regions (`found` or `not_found`).
pub fn legacy_probe(found: bool) {
    handle();
    let result = if found { "found" } else { "not_found" };
    ::metrics::counter!(LEGACY_PROBES, "result" => result).increment(1);
}

/// Counts one fan-out refused at a bound (`reason`: `concurrent`, `per_connection`,
/// `memory`; see `crate::fanout::budget::Refusal::as_str`).
pub fn fanout_refused(reason: &'static str) {
    handle();
    ::metrics::counter!(FANOUT_REFUSED, "reason" => reason).increment(1);
}

/// Why a legacy id was not probed after a 404/410.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeSkip {
    /// The probe budget (`legacy_probe`) is spent.
    Budget,
    /// Every region answered 404/410 for it within `legacy_cache.negative_ttl_ms`.
    NegativeCache,
}

/// Counts one legacy id not probed.
pub fn legacy_probe_skipped(reason: ProbeSkip) {
    handle();
    let reason = match reason {
        ProbeSkip::Budget => "budget",
        ProbeSkip::NegativeCache => "negative_cache",
    };
    ::metrics::counter!(LEGACY_PROBES_SKIPPED, "reason" => reason).increment(1);
}

/// Counts one reload of the listener's certificates.
pub fn tls_reload(success: bool) {
    handle();
    let result = if success { "success" } else { "failure" };
    ::metrics::counter!(TLS_RELOADS, "result" => result).increment(1);
}

/// `reason` of [`TLS_HANDSHAKE_FAILURES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// Not done within `limits.header_read_timeout_ms`.
    Timeout,
    /// Refused by either side (no shared version or cipher, a bad certificate, …).
    Error,
}

/// Counts one TLS handshake that did not complete.
pub fn tls_handshake_failure(reason: HandshakeFailure) {
    handle();
    let reason = match reason {
        HandshakeFailure::Timeout => "timeout",
        HandshakeFailure::Error => "error",
    };
    ::metrics::counter!(TLS_HANDSHAKE_FAILURES, "reason" => reason).increment(1);
}

/// `reason` of [`ADMIN_REFUSALS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminRefusal {
    /// No token or session, or a wrong one (401).
    Unauthorized,
    /// A state-changing request from another origin (403).
    ForeignOrigin,
    /// A tokenless admin API asked for a `Host` it does not serve (403).
    HostNotAllowed,
    /// Too many wrong tokens from the address (429).
    Throttled,
}

/// Counts one refused admin request.
pub fn admin_refusal(reason: AdminRefusal) {
    handle();
    let reason = match reason {
        AdminRefusal::Unauthorized => "unauthorized",
        AdminRefusal::ForeignOrigin => "foreign_origin",
        AdminRefusal::HostNotAllowed => "host_not_allowed",
        AdminRefusal::Throttled => "throttled",
    };
    ::metrics::counter!(ADMIN_REFUSALS, "reason" => reason).increment(1);
}

/// Counts one legacy owner cache lookup.
pub fn legacy_cache(hit: bool) {
    handle();
    let result = if hit { "hit" } else { "miss" };
    ::metrics::counter!(LEGACY_CACHE, "result" => result).increment(1);
}

/// The kind of rule that made a routing decision: [`DECISIONS`]' `rule` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleLabel {
    /// An override matched.
    Override,
    /// The country map decided.
    Country,
    /// An id without routing bits went to `default_region`.
    DefaultRegion,
    /// A request without an id went to `default_region` (`unrouted`).
    Unrouted,
    /// A scheme's map entry covered the value.
    Map,
    /// A scheme's `default` took a value no map entry covers.
    SchemeDefault,
    /// Rendezvous hashing placed a composite key.
    Hash,
    /// A move (`moves:` of the routing table) matched.
    Move,
}

impl RuleLabel {
    const ALL: [RuleLabel; 8] = [
        RuleLabel::Override,
        RuleLabel::Country,
        RuleLabel::DefaultRegion,
        RuleLabel::Unrouted,
        RuleLabel::Map,
        RuleLabel::SchemeDefault,
        RuleLabel::Hash,
        RuleLabel::Move,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleLabel::Override => "override",
            RuleLabel::Country => "country",
            RuleLabel::DefaultRegion => "default_region",
            RuleLabel::Unrouted => "unrouted",
            RuleLabel::Map => "map",
            RuleLabel::SchemeDefault => "scheme_default",
            RuleLabel::Hash => "hash",
            RuleLabel::Move => "move",
        }
    }
}

/// How a routing-table load or reload ended: [`RELOADS`]' `result` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadResult {
    /// A table was installed.
    Success,
    /// The file was refused; the previous table keeps serving.
    Failure,
}

impl ReloadResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadResult::Success => "success",
            ReloadResult::Failure => "failure",
        }
    }
}
/// Counts one client-blamed failure (docs/data-path.md: never against an upstream). An upstream kind
/// passed here is a bug; it is counted under its own name rather than lost.
pub fn client_error(kind: ErrorKind) {
    static HANDLES: [OnceLock<Counter>; ErrorKind::CLIENT.len()] =
        [const { OnceLock::new() }; ErrorKind::CLIENT.len()];
    match ErrorKind::CLIENT.iter().position(|e| *e == kind) {
        Some(k) => HANDLES[k]
            .get_or_init(|| {
                handle();
                ::metrics::counter!(CLIENT_ERRORS, "kind" => kind.as_str())
            })
            .increment(1),
        None => ::metrics::counter!(CLIENT_ERRORS, "kind" => kind.as_str()).increment(1),
    }
}

/// Counts one reload and, on success, moves the info gauge to the new version.
pub fn reload(result: ReloadResult, old_version: Option<&str>, new_version: Option<&str>) {
    ::metrics::counter!(RELOADS, "result" => result.as_str()).increment(1);
    if let Some(new) = new_version {
        if let Some(old) = old_version.filter(|o| *o != new) {
            ::metrics::gauge!(TABLE_INFO, "version" => old.to_owned()).set(0.0);
        }
        ::metrics::gauge!(TABLE_INFO, "version" => new.to_owned()).set(1.0);
    }
}

/// Counts a request in while the guard lives.
pub struct InFlight(&'static Gauge);

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InFlight")
    }
}

impl InFlight {
    /// One more request in flight.
    pub fn start() -> InFlight {
        static GAUGE: OnceLock<Gauge> = OnceLock::new();
        let gauge = GAUGE.get_or_init(|| {
            handle();
            ::metrics::gauge!(IN_FLIGHT)
        });
        gauge.increment(1.0);
        InFlight(gauge)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.decrement(1.0);
    }
}
