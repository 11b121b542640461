//! Header rules of a forwarding proxy (RFC 9110 §7.6, RFC 7239; SPEC §6).
//!
//! - Hop-by-hop fields describe one connection, so they are removed in both directions, with
//!   every field the `Connection` lines name (RFC 9110 §7.6.1).
//! - `Via` records each proxy a message passed (RFC 9110 §7.6.3); it is also how routing
//!   loops are caught: a request that already passed this region, or too many proxies, is
//!   answered 508 instead of being sent round again.
//! - `X-Forwarded-*` (de facto) and `Forwarded` (RFC 7239) tell the upstream who the client
//!   was, because the upstream only sees the router's address.

use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use http::header::{HeaderMap, HeaderName, HeaderValue, CONNECTION, HOST, TE, TRAILER};
use http::header::{FORWARDED, TRANSFER_ENCODING, UPGRADE, VIA};
use http::{uri::Authority, Version};

/// Hop-by-hop fields of RFC 9110 §7.6.1, plus the pre-standard `Keep-Alive` and
/// `Proxy-Connection` that clients still send.
static HOP_BY_HOP: [HeaderName; 7] = [
    CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
];

/// `X-Forwarded-For`: client addresses, appended by each proxy.
pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`: the scheme the client used.
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`: the `Host` the client sent.
pub static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Removes hop-by-hop fields and the fields named in `Connection` (RFC 9110 §7.6.1).
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(CONNECTION) {
        let mut named: Vec<HeaderName> = Vec::new();
        for value in headers.get_all(CONNECTION) {
            for token in value.as_bytes().split(|&b| b == b',') {
                if let Ok(name) = HeaderName::from_bytes(token.trim_ascii()) {
                    named.push(name);
                }
            }
        }
        for name in named {
            headers.remove(name);
        }
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Why a request is a routing loop (SPEC §6: 508).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopReason {
    /// `Via` already names this router's region.
    SeenRegion,
    /// `Via` lists this many entries, at least `max_hops`.
    TooManyHops(usize),
}

/// Checks the request's `Via` lines (all of them, comma-separated entries) against this
/// router's region and `max_hops`.
pub fn check_loop(headers: &HeaderMap, region: &str, max_hops: usize) -> Result<(), LoopReason> {
    let mut hops = 0;
    for value in headers.get_all(VIA) {
        for entry in via_entries(value.as_bytes()) {
            hops += 1;
            // entry = received-protocol RWS received-by [ RWS comment ]
            let mut words = entry
                .split(|b| b.is_ascii_whitespace())
                .filter(|w| !w.is_empty());
            let _protocol = words.next();
            if words.next() == Some(region.as_bytes()) {
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
}

impl ViaValues {
    /// The entries for `region`.
    pub fn new(region: &str) -> ViaValues {
        let make = |v| via_value(v, region).unwrap_or(HeaderValue::from_static("1.1 iuid-router"));
        ViaValues {
            http10: make(http::Version::HTTP_10),
            http11: make(http::Version::HTTP_11),
            http2: make(http::Version::HTTP_2),
        }
    }

    /// The entry for a message of this version.
    pub fn for_version(&self, version: http::Version) -> &HeaderValue {
        match version {
            http::Version::HTTP_10 | http::Version::HTTP_09 => &self.http10,
            http::Version::HTTP_2 | http::Version::HTTP_3 => &self.http2,
            _ => &self.http11,
        }
    }
}

/// What the request rewrite needs to know besides the headers.
#[derive(Debug)]
pub struct Forwarding<'a> {
    /// The client's socket address.
    pub client: SocketAddr,
    /// The host the client asked for (its `Host`, or the authority of an HTTP/2 request).
    pub original_host: Option<&'a HeaderValue>,
    /// This router's `Via` entry.
    pub via: &'a HeaderValue,
    /// Keep the client's `Host` (SPEC §6 `preserve_host`).
    pub preserve_host: bool,
}

/// Applies SPEC §6 to a request about to go upstream: hop-by-hop fields removed (an upgrade
/// keeps `Connection: upgrade` and its `Upgrade`), `X-Forwarded-For` appended,
/// `X-Forwarded-Proto`/`-Host` and `Forwarded` set, `Via` added. `Host` is left to [`aim`]
/// (or kept, with `preserve_host`).
pub fn rewrite_request(headers: &mut HeaderMap, f: &Forwarding<'_>) {
    let original_host = f.original_host.cloned();
    let upgrade = upgrade_of(headers);
    strip_hop_by_hop(headers);
    if let Some(protocol) = upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, protocol);
    }
    let ip = f.client.ip();

    let mut xff = String::with_capacity(48);
    for (i, prior) in headers.get_all(&X_FORWARDED_FOR).iter().enumerate() {
        if let Ok(text) = prior.to_str() {
            if i > 0 {
                xff.push_str(", ");
            }
            xff.push_str(text.trim());
        }
    }
    if !xff.is_empty() {
        xff.push_str(", ");
    }
    let _ = write!(xff, "{ip}");
    if let Ok(v) = HeaderValue::try_from(xff) {
        headers.insert(&X_FORWARDED_FOR, v);
    }
    headers.insert(&X_FORWARDED_PROTO, HeaderValue::from_static("http"));

    let mut forwarded = String::with_capacity(64);
    match ip {
        IpAddr::V4(v4) => {
            let _ = write!(forwarded, "for={v4}");
        }
        IpAddr::V6(v6) => {
            let _ = write!(forwarded, "for=\"[{v6}]\"");
        }
    }
    if let Some(host) = &original_host {
        if let Ok(text) = host.to_str() {
            // quoted-string: `host:port` is not a token; drop what could break the quoting.
            if !text.contains(['"', '\\']) {
                let _ = write!(forwarded, ";host=\"{text}\"");
            }
        }
        headers.insert(&X_FORWARDED_HOST, host.clone());
    }
    forwarded.push_str(";proto=http");
    if let Ok(v) = HeaderValue::try_from(forwarded) {
        headers.append(FORWARDED, v);
    }

    headers.append(VIA, f.via.clone());

    if f.preserve_host {
        if let Some(host) = original_host {
            headers.insert(HOST, host);
        }
    }
}

/// Points a request at `upstream`: the absolute URI with the client's path and query byte
/// for byte, and `Host` set to the upstream's authority unless `preserve_host`.
pub fn aim(parts: &mut http::request::Parts, upstream: &Authority, preserve_host: bool) {
    let mut uri = http::Uri::builder()
        .scheme("http")
        .authority(upstream.clone());
    uri = match parts.uri.path_and_query() {
        Some(pq) => uri.path_and_query(pq.clone()),
        None => uri.path_and_query("/"),
    };
    if let Ok(uri) = uri.build() {
        parts.uri = uri;
    }
    if !preserve_host {
        if let Ok(v) = HeaderValue::from_str(upstream.as_str()) {
            parts.headers.insert(HOST, v);
        }
    }
}

/// The `Upgrade` value of a request or response that asks for a protocol switch
/// (`Connection: upgrade` and an `Upgrade` field, RFC 9110 §7.8).
pub fn upgrade_of(headers: &HeaderMap) -> Option<HeaderValue> {
    let asks = headers.get_all(CONNECTION).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"upgrade"))
    });
    if asks {
        headers.get(UPGRADE).cloned()
    } else {
        None
    }
}

/// Applies SPEC §6 to a response on its way back: hop-by-hop fields removed (a `101` keeps
/// its `Connection: upgrade` and `Upgrade`), `Via` added.
pub fn rewrite_response(status: http::StatusCode, headers: &mut HeaderMap, via: &HeaderValue) {
    let upgrade = if status == http::StatusCode::SWITCHING_PROTOCOLS {
        upgrade_of(headers)
    } else {
        None
    };
    strip_hop_by_hop(headers);
    if let Some(protocol) = upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, protocol);
    }
    headers.append(VIA, via.clone());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).expect("name"),
                HeaderValue::from_str(v).expect("value"),
            );
        }
        h
    }

    #[test]
    fn connection_named_fields_go() {
        let mut h = map(&[
            ("connection", "keep-alive, X-Secret"),
            ("connection", "x-other"),
            ("x-secret", "1"),
            ("x-other", "1"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("x-kept", "1"),
        ]);
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1, "{h:?}");
        assert!(h.contains_key("x-kept"));
    }

    #[test]
    fn loops_by_region_and_by_count() {
        assert_eq!(check_loop(&map(&[]), "eu", 3), Ok(()));
        assert_eq!(
            check_loop(&map(&[("via", "1.1 us, 1.1 eu (iuid-router, x)")]), "eu", 3),
            Err(LoopReason::SeenRegion)
        );
        assert_eq!(
            check_loop(&map(&[("via", "1.1 a, 1.1 b"), ("via", "2 c")]), "eu", 3),
            Err(LoopReason::TooManyHops(3))
        );
        assert_eq!(
            check_loop(&map(&[("via", "1.1 a (x, y), 1.1 b")]), "eu", 3),
            Ok(())
        );
    }

    #[test]
    fn forwarded_fields() {
        let mut h = map(&[
            ("x-forwarded-for", "10.0.0.1"),
            ("host", "api.example:8443"),
        ]);
        let host = h.get("host").cloned();
        let upstream: Authority = "10.1.1.1:8080".parse().expect("authority");
        let via = HeaderValue::from_static("1.1 eu");
        let client: SocketAddr = "[::1]:5555".parse().expect("addr");
        rewrite_request(
            &mut h,
            &Forwarding {
                client,
                original_host: host.as_ref(),
                via: &via,
                preserve_host: false,
            },
        );
        let mut parts = http::Request::new(()).into_parts().0;
        parts.headers = h;
        aim(&mut parts, &upstream, false);
        let h = parts.headers;
        assert_eq!(parts.uri, "http://10.1.1.1:8080/");
        assert_eq!(h["x-forwarded-for"], "10.0.0.1, ::1");
        assert_eq!(
            h["forwarded"],
            "for=\"[::1]\";host=\"api.example:8443\";proto=http"
        );
        assert_eq!(h["x-forwarded-host"], "api.example:8443");
        assert_eq!(h["host"], "10.1.1.1:8080");
        assert_eq!(h["via"], "1.1 eu");
    }
}
