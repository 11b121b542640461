//! The metrics of the QUIC listener (docs/http3.md, docs/metrics.md): what happened to each
//! connection attempt, each request sent in 0-RTT, and each connection the router closed.
//! Counted once per connection or per early request, never per packet.

use super::handle;

/// Counter `{result}`: QUIC connection attempts (Initial packets that would start one), by
/// `result`: `accepted` (its handshake began), `retry` (asked to prove its address first,
/// RFC 9000 §8.1.2), `refused` (CONNECTION_CLOSE at once: past 4× `http3.max_handshakes`
/// in progress), `failed` (the handshake began and did not complete).
pub const HTTP3_HANDSHAKES: &str = "iuid_router_http3_handshakes_total";
/// Counter `{outcome}`: requests that arrived in 0-RTT early data, by `outcome`: `forwarded`
/// (a safe method, sent on with `Early-Data: 1`), `waited` (any other, held until the
/// handshake completed, RFC 8470 §3).
pub const HTTP3_EARLY_DATA: &str = "iuid_router_http3_early_data_total";
/// Counter `{reason}`: HTTP/3 connections the router closed, by `reason`: `idle` (no request
/// for `timeouts.idle_ms`), `stream_resets` (more streams cancelled by the client than
/// `http3.max_streams` in a second: a Rapid Reset flood, closed H3_EXCESSIVE_LOAD).
pub const HTTP3_CLOSED: &str = "iuid_router_http3_closed_total";

/// `result` of [`HTTP3_HANDSHAKES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handshake {
    /// The handshake began.
    Accepted,
    /// A Retry was sent instead.
    Retry,
    /// Refused at once.
    Refused,
    /// Began and did not complete.
    Failed,
}

/// Counts one connection attempt by what became of it.
pub fn handshake(result: Handshake) {
    handle();
    let result = match result {
        Handshake::Accepted => "accepted",
        Handshake::Retry => "retry",
        Handshake::Refused => "refused",
        Handshake::Failed => "failed",
    };
    ::metrics::counter!(HTTP3_HANDSHAKES, "result" => result).increment(1);
}

/// Counts one request that came in early data: `forwarded` at once, or else waited.
pub fn early_data(forwarded: bool) {
    handle();
    let outcome = if forwarded { "forwarded" } else { "waited" };
    ::metrics::counter!(HTTP3_EARLY_DATA, "outcome" => outcome).increment(1);
}

/// Counts one connection the router closed: for being idle, or else for a flood of resets.
pub fn closed(idle: bool) {
    handle();
    let reason = if idle { "idle" } else { "stream_resets" };
    ::metrics::counter!(HTTP3_CLOSED, "reason" => reason).increment(1);
}
