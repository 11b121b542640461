//! The metrics of a region's bad day (docs/failover.md, docs/metrics.md): each region's
//! health share, the requests sent to its failover region, and the owners learned from a
//! region's `421` hints. Counted on the rare path only: a request that stays with its owner
//! touches none of them.

use super::handle;

/// Gauge `{region}`: the share of the region's upstreams neither ejected nor failing their
/// active check, 0 to 1 (docs/failover.md "How much fails over"); set every second.
pub const REGION_HEALTH: &str = "iuid_router_region_health_ratio";
/// Counter `{region,to,access}`: requests of `region`'s entities sent to its failover region
/// `to`, by `access` (`read`, `write`: a `serves: all` failover's writes).
pub const FAILOVER_REQUESTS: &str = "iuid_router_failover_requests_total";
/// Counter `{from,to}`: `421 Misdirected Request` answers with `X-Iuid-Owner` that the
/// router followed, from the region that answered to the owner it named.
pub const OWNER_HINTS: &str = "iuid_router_owner_hints_total";

/// Sets `region`'s health share (0 to 1).
pub fn region_health(region: &str, share: f64) {
    handle();
    ::metrics::gauge!(REGION_HEALTH, "region" => region.to_owned()).set(share);
}

/// Counts one request of `region` sent to its failover region `to`.
pub fn failover(region: &str, to: &str, reads: bool) {
    handle();
    let access = if reads { "read" } else { "write" };
    ::metrics::counter!(
        FAILOVER_REQUESTS,
        "region" => region.to_owned(),
        "to" => to.to_owned(),
        "access" => access
    )
    .increment(1);
}

/// Counts one owner hint followed from `from` to `to`.
pub fn owner_hint(from: &str, to: &str) {
    handle();
    ::metrics::counter!(OWNER_HINTS, "from" => from.to_owned(), "to" => to.to_owned()).increment(1);
}

pub(super) fn describe() {
    ::metrics::describe_gauge!(
        REGION_HEALTH,
        "Share of a region's upstreams neither ejected nor failing their active check (0 to 1)."
    );
    ::metrics::describe_counter!(
        FAILOVER_REQUESTS,
        "Requests of a region's entities sent to its failover region, by access."
    );
    ::metrics::describe_counter!(
        OWNER_HINTS,
        "421 answers with X-Iuid-Owner followed to the owner they named."
    );
}
