//! The access log (`access_log: true`, docs/config.md): one line per request, under the
//! `iuid_router::access` target, the same fields whichever protocol carried it; written
//! only by `life::Life::finish`.

use std::time::Instant;

use crate::extract::RouteKind;

/// One request's access log line.
pub(super) struct Access<'a> {
    pub request_id: &'a str,
    pub method: &'a str,
    /// The target's path, without its query.
    pub path: &'a str,
    pub status: u16,
    /// The kind of route that found the id (`None`: no route matched).
    pub route: Option<RouteKind>,
    /// The region's metric label, if one was chosen.
    pub region: Option<&'a str>,
    /// The regions asked, when more than one was.
    pub regions: Option<&'a str>,
    pub upstream: Option<&'a str>,
    /// The trace id and this edge's span id, with `tracing:` (docs/traces.md).
    pub trace: Option<(&'a str, &'a str)>,
    pub started: Instant,
}

/// Writes the line.
pub(super) fn log(a: &Access<'_>) {
    tracing::info!(
        target: "iuid_router::access",
        request_id = a.request_id,
        method = a.method,
        path = a.path,
        status = a.status,
        route = a.route.map_or("none", RouteKind::as_str),
        region = a.region.unwrap_or("-"),
        regions = a.regions.unwrap_or("-"),
        upstream = a.upstream.unwrap_or("-"),
        trace_id = a.trace.map_or("-", |t| t.0),
        span_id = a.trace.map_or("-", |t| t.1),
        duration_ms = a.started.elapsed().as_secs_f64() * 1e3,
    );
}
