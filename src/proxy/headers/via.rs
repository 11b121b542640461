//! `Via` (RFC 9110 §7.6.3): the entry this router adds to every message it forwards, and
//! the loop check on a request's entries (docs/data-path.md, "Loops and `Via`"): a request
//! that already passed this region, or `limits.max_hops` proxies, is answered 508 instead of
//! being sent round again.

use http::header::{HeaderMap, HeaderValue, VIA};
use http::Version;

use super::LoopReason;

/// Checks the request's `Via` lines (all of them, comma-separated entries) against this
/// router's region and `max_hops`.
pub fn check_loop(headers: &HeaderMap, region: &str, max_hops: usize) -> Result<(), LoopReason> {
    check_via(
        headers.get_all(VIA).iter().map(HeaderValue::as_bytes),
        region,
        max_hops,
        false,
    )
}

/// [`check_loop`] over the `Via` lines' values, as bytes. `failed_over`: a trusted peer
/// failed the request over to this region (docs/failover.md, "In a mesh"): it comes back
/// once by design, so only `max_hops` bounds it.
pub fn check_via<'a>(
    lines: impl Iterator<Item = &'a [u8]>,
    region: &str,
    max_hops: usize,
    failed_over: bool,
) -> Result<(), LoopReason> {
    let mut hops = 0;
    for value in lines {
        for entry in via_entries(value) {
            hops += 1;
            // entry = received-protocol RWS received-by [ RWS comment ]
            let mut words = entry
                .split(|b| b.is_ascii_whitespace())
                .filter(|w| !w.is_empty());
            let _protocol = words.next();
            if words.next() == Some(region.as_bytes()) && !failed_over {
                return Err(LoopReason::SeenRegion);
            }
        }
    }
    if hops >= max_hops {
        return Err(LoopReason::TooManyHops(hops));
    }
    Ok(())
}

/// Splits a `Via` value on commas outside `( comments )`, skipping empty entries.
fn via_entries(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut depth = 0u32;
    value
        .split(move |&b| {
            match b {
                b'(' => depth += 1,
                b')' => depth = depth.saturating_sub(1),
                _ => {}
            }
            b == b',' && depth == 0
        })
        .map(<[u8]>::trim_ascii)
        .filter(|e| !e.is_empty())
}

/// The `Via` entry this router adds, e.g. `1.1 eu` (RFC 9110 §7.6.3: the protocol version of
/// the message received, then the pseudonym).
pub fn via_value(version: Version, region: &str) -> Option<HeaderValue> {
    let protocol = match version {
        Version::HTTP_09 => "0.9",
        Version::HTTP_10 => "1.0",
        Version::HTTP_2 => "2",
        Version::HTTP_3 => "3",
        _ => "1.1",
    };
    HeaderValue::try_from(format!("{protocol} {region}")).ok()
}

/// This router's `Via` entries, one per protocol version a client may speak, made once.
#[derive(Debug)]
pub struct ViaValues {
    http10: HeaderValue,
    /// For HTTP/1.1 messages, and responses (upstreams speak HTTP/1.1).
    pub http11: HeaderValue,
    http2: HeaderValue,
    http3: HeaderValue,
}

impl ViaValues {
    /// The entries for `region`.
    pub fn new(region: &str) -> ViaValues {
        let make = |v| via_value(v, region).unwrap_or(HeaderValue::from_static("1.1 iuid-router"));
        ViaValues {
            http10: make(http::Version::HTTP_10),
            http11: make(http::Version::HTTP_11),
            http2: make(http::Version::HTTP_2),
            http3: make(http::Version::HTTP_3),
        }
    }

    /// The entry for a message of this version.
    pub fn for_version(&self, version: http::Version) -> &HeaderValue {
        match version {
            http::Version::HTTP_10 | http::Version::HTTP_09 => &self.http10,
            http::Version::HTTP_2 => &self.http2,
            http::Version::HTTP_3 => &self.http3,
            _ => &self.http11,
        }
    }
}
