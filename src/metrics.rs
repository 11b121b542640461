//! Prometheus metrics (SPEC §8): names, units and the recorder.
//!
//! Names follow Prometheus conventions: a `iuid_router_` prefix, `_total` for counters,
//! `_seconds` for durations, an `_info` gauge (value 1) carrying the table version as a label.
//! The recorder is process-wide (the `metrics` facade has one global recorder), so routers
//! started in one process — as the tests do — share one registry.

use std::sync::{Arc, OnceLock};

use ::metrics::SharedString;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Requests answered, by `route` kind (`path`, `header`, `graphql`, `none`), `region`
/// (`none` when refused before one was chosen) and `status` class (`2xx` … `5xx`).
pub const REQUESTS: &str = "iuid_router_requests_total";
/// Requests being handled now.
pub const IN_FLIGHT: &str = "iuid_router_requests_in_flight";
/// Time from sending a request upstream to its response headers, by `region`, in seconds.
pub const UPSTREAM_DURATION: &str = "iuid_router_upstream_request_duration_seconds";
/// Upstream failures by `region` and `kind` (`connect`, `timeout`, `reset`).
pub const UPSTREAM_ERRORS: &str = "iuid_router_upstream_errors_total";
/// Routing decisions by `rule` kind (`override`, `country`, `default_region`, `unrouted`).
pub const DECISIONS: &str = "iuid_router_routing_decisions_total";
/// Routing-table reloads by `result` (`success`, `failure`).
pub const RELOADS: &str = "iuid_router_table_reloads_total";
/// 1 for the routing-table `version` now serving, 0 for versions served before.
pub const TABLE_INFO: &str = "iuid_router_routing_table_info";

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
                handle
            }
            Err(e) => {
                tracing::warn!(error = %e, "a metrics recorder is already installed");
                PrometheusBuilder::new().build_recorder().handle()
            }
        }
    })
}

fn describe() {
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
    ::metrics::describe_counter!(UPSTREAM_ERRORS, "Upstream failures by region and kind.");
    ::metrics::describe_counter!(DECISIONS, "Routing decisions by rule kind.");
    ::metrics::describe_counter!(RELOADS, "Routing-table reloads by result.");
    ::metrics::describe_gauge!(
        TABLE_INFO,
        "The routing-table version serving (1) and served before (0)."
    );
}

/// A region name as a metric label, shared rather than copied per request.
pub fn label(name: &Arc<str>) -> SharedString {
    SharedString::from_shared(name.clone())
}

/// `2xx`, `4xx`, … for a status code.
pub fn status_class(status: u16) -> &'static str {
    match status {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// Counts one answered request.
pub fn request(route: &'static str, region: SharedString, status: u16) {
    ::metrics::counter!(REQUESTS, "route" => route, "region" => region, "status" => status_class(status))
        .increment(1);
}

/// Records one upstream exchange's time to response headers.
pub fn upstream_duration(region: SharedString, seconds: f64) {
    ::metrics::histogram!(UPSTREAM_DURATION, "region" => region).record(seconds);
}

/// Counts one upstream failure.
pub fn upstream_error(region: SharedString, kind: &'static str) {
    ::metrics::counter!(UPSTREAM_ERRORS, "region" => region, "kind" => kind).increment(1);
}

/// Counts one routing decision.
pub fn decision(rule: &'static str) {
    ::metrics::counter!(DECISIONS, "rule" => rule).increment(1);
}

/// Counts one reload and, on success, moves the info gauge to the new version.
pub fn reload(result: &'static str, old_version: Option<&str>, new_version: Option<&str>) {
    ::metrics::counter!(RELOADS, "result" => result).increment(1);
    if let Some(new) = new_version {
        if let Some(old) = old_version.filter(|o| *o != new) {
            ::metrics::gauge!(TABLE_INFO, "version" => old.to_owned()).set(0.0);
        }
        ::metrics::gauge!(TABLE_INFO, "version" => new.to_owned()).set(1.0);
    }
}

/// Counts a request in while the guard lives.
pub struct InFlight;

impl InFlight {
    /// One more request in flight.
    pub fn start() -> InFlight {
        ::metrics::gauge!(IN_FLIGHT).increment(1.0);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        ::metrics::gauge!(IN_FLIGHT).decrement(1.0);
    }
}
