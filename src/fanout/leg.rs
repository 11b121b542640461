//! Why one region's part of a fan-out failed: a closed set, named alike in the page's
//! `regions` and in the leg metric.

use serde::Serialize;

/// Why a region gave no usable answer: the `error` of a page's `regions` entry and the
/// `outcome` of `iuid_router_fanout_legs_total` (docs/fanout.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LegError {
    /// The region could not be connected to.
    Connect,
    /// The connection was reset or the answer broke off.
    Reset,
    /// No whole answer within the route's `timeout_ms`.
    Timeout,
    /// Every upstream of the region is ejected.
    Unavailable,
    /// The region is at `limits.region_max_in_flight` (docs/overload.md): not asked.
    Overloaded,
    /// A `region` rate limit refused the leg (docs/rate-limits.md): not asked.
    RateLimited,
    /// A non-2xx status (the entry gives it, and the problem type if any).
    Status,
    /// The answer is over `limits.fanout_region_bytes`.
    TooLarge,
    /// The answer is not JSON.
    NotJson,
    /// No array at the route's `items` pointer.
    NoItemsArray,
    /// An item whose id does not parse (the entry gives its index and id).
    BadId,
    /// The answer did not fit in `limits.fanout_buffer_bytes`: the router's bound, so the
    /// whole request is refused (503), never reported as a region's failure.
    BufferFull,
}

impl LegError {
    /// The name as JSON and the metric write it.
    pub fn as_str(self) -> &'static str {
        match self {
            LegError::Connect => "connect",
            LegError::Reset => "reset",
            LegError::Timeout => "timeout",
            LegError::Unavailable => "unavailable",
            LegError::Overloaded => "overloaded",
            LegError::RateLimited => "rate_limited",
            LegError::Status => "status",
            LegError::TooLarge => "too_large",
            LegError::NotJson => "not_json",
            LegError::NoItemsArray => "no_items_array",
            LegError::BadId => "bad_id",
            LegError::BufferFull => "buffer_full",
        }
    }
}

impl std::fmt::Display for LegError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
