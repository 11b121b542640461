//! Header rules of a forwarding proxy (RFC 9110 §7.6, RFC 7239; docs/data-path.md).
//!
//! - Hop-by-hop fields describe one connection, so they are removed in both directions, with
//!   every field the `Connection` lines name (RFC 9110 §7.6.1) except those the proxies
//!   own (`Forwarded`, `X-Forwarded-*`, `Via`, the request id and trace context, credentials,
//!   client-certificate fields), which a client must not be able to erase.
//! - Client-certificate fields (`X-Forwarded-Client-Cert`, `X-SSL-Client-*`, …) are removed
//!   from every request: only the router vouches for a certificate it verified.
//! - `Via` records each proxy a message passed (RFC 9110 §7.6.3); it is also how routing
//!   loops are caught: a request that already passed this region, or too many proxies, is
//!   answered 508 instead of being sent round again.
//! - `X-Forwarded-*` (de facto) and `Forwarded` (RFC 7239) tell the upstream who the client
//!   was, because the upstream only sees the router's address.
//! - A request field whose name holds `_`, which CGI upstreams read as `-` ([`underscore`]).

use http::header::{
    HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, FORWARDED, HOST,
    TRANSFER_ENCODING, UPGRADE, VIA,
};
use http::uri::Authority;

pub use crate::config::UnderscoreFields;
pub use crate::problem::LoopReason;
use underscore::remove_underscore_fields;
pub use underscore::{has_underscore, underscore_field};
pub use via::{check_loop, check_via, via_value, ViaValues};

/// Hop-by-hop fields of RFC 9110 §7.6.1, plus the pre-standard `Keep-Alive` and
/// `Proxy-Connection` that clients still send.
/// `Connection` comes first and `Upgrade` last: [`may_upgrade`] and [`strip_present`] rely on it.
const HOP_BY_HOP_NAMES: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    // Answered by the router itself (`100 Continue`), as Envoy and nginx answer it.
    "expect",
    "upgrade",
];

static HOP_BY_HOP: [HeaderName; 8] = {
    let n = HOP_BY_HOP_NAMES;
    [
        HeaderName::from_static(n[0]),
        HeaderName::from_static(n[1]),
        HeaderName::from_static(n[2]),
        HeaderName::from_static(n[3]),
        HeaderName::from_static(n[4]),
        HeaderName::from_static(n[5]),
        HeaderName::from_static(n[6]),
        HeaderName::from_static(n[7]),
    ]
};

/// Bit `n` set when some hop-by-hop name is `n` bytes long (all are shorter than 32): most
/// field names have another length and are passed over without comparing them to seven
/// names (callgrind: 700 instructions a request saved on a typical response).
const HOP_BY_HOP_LENGTHS: u32 = {
    let mut mask = 0u32;
    let mut i = 0;
    while i < HOP_BY_HOP_NAMES.len() {
        mask |= 1 << HOP_BY_HOP_NAMES[i].len();
        i += 1;
    }
    mask
};

/// Fields that carry a client certificate's identity, as TLS-terminating proxies set them
/// (Envoy's `X-Forwarded-Client-Cert`, nginx's and HAProxy's `X-SSL-Client-*` conventions,
/// RFC 9440's `Client-Cert`). Only this router may vouch for a certificate it verified, so a
/// client's own are removed from every request (docs/tls-h2-grpc.md); with
/// `tls.client_auth.forward_client_cert: set` the router sets `X-Forwarded-Client-Cert` itself.
const CLIENT_CERT_NAMES: [&str; 11] = [
    "x-forwarded-client-cert",
    "x-ssl-client-verify",
    "x-ssl-client-cert",
    "x-ssl-client-dn",
    "x-ssl-client-s-dn",
    "x-client-cert",
    "x-client-cert-cn",
    "x-client-verify",
    "ssl-client-cert",
    "client-cert",
    "client-cert-chain",
];

/// `CLIENT_CERT_NAMES` as names, for removal.
static CLIENT_CERT: [HeaderName; 11] = {
    let n = CLIENT_CERT_NAMES;
    [
        HeaderName::from_static(n[0]),
        HeaderName::from_static(n[1]),
        HeaderName::from_static(n[2]),
        HeaderName::from_static(n[3]),
        HeaderName::from_static(n[4]),
        HeaderName::from_static(n[5]),
        HeaderName::from_static(n[6]),
        HeaderName::from_static(n[7]),
        HeaderName::from_static(n[8]),
        HeaderName::from_static(n[9]),
        HeaderName::from_static(n[10]),
    ]
};

/// `X-Forwarded-Client-Cert`: the verified client certificate (Envoy's format).
pub static X_FORWARDED_CLIENT_CERT: HeaderName = HeaderName::from_static("x-forwarded-client-cert");

/// Bit `n` set when some client-certificate name is `n` bytes long (as for hop-by-hop).
const CLIENT_CERT_LENGTHS: u32 = {
    let mut mask = 0u32;
    let mut i = 0;
    while i < CLIENT_CERT_NAMES.len() {
        mask |= 1 << CLIENT_CERT_NAMES[i].len();
        i += 1;
    }
    mask
};

/// In the bits of [`hop_by_hop_present`]: some client-certificate field is present.
const CLIENT_CERT_BIT: u16 = 1 << 8;

/// In the bits of [`hop_by_hop_present`]: some `X-Iuid-*` field is present
/// ([`is_router_field`]).
const ROUTER_FIELD_BIT: u16 = 1 << 9;

/// In the bits of [`hop_by_hop_present`]: some field name holds `_` ([`underscore_field`]).
const UNDERSCORE_BIT: u16 = 1 << 10;

/// Bit `i` set when `HOP_BY_HOP[i]` is in `headers`; with `requests`, [`CLIENT_CERT_BIT`]
/// set when a client-certificate field is, [`ROUTER_FIELD_BIT`] when an `X-Iuid-*` one is
/// and [`UNDERSCORE_BIT`] when a name holds `_`. The same pass over the names finds them all.
fn hop_by_hop_present(headers: &HeaderMap, requests: bool) -> u16 {
    let lengths = HOP_BY_HOP_LENGTHS;
    let certs = if requests { CLIENT_CERT_LENGTHS } else { 0 };
    let mut present = 0u16;
    for name in headers.keys() {
        // No hop-by-hop or client-certificate name holds `_`; an `X-Iuid-*` one that does is
        // removed (and counted) with the `_` names, as the own engine's head path does.
        if requests && has_underscore(name.as_str().as_bytes()) {
            present |= UNDERSCORE_BIT;
            continue;
        }
        if requests && name.as_str().starts_with("x-iuid-") {
            present |= ROUTER_FIELD_BIT;
            continue;
        }
        let len = name.as_str().len();
        if len >= 32 || (lengths | certs) & (1 << len) == 0 {
            continue;
        }
        if let Some(i) = HOP_BY_HOP.iter().position(|h| h == name) {
            present |= 1 << i;
        } else if certs & (1 << len) != 0 && CLIENT_CERT.iter().any(|h| h == name) {
            present |= CLIENT_CERT_BIT;
        }
    }
    present
}

/// A field only the router writes (`X-Iuid-*`: `X-Iuid-Region`, `X-Iuid-Move`,
/// `X-Iuid-Mirror`, docs/moves.md): a client's is never passed on, so that an upstream
/// can trust them.
pub fn is_router_field(name: &[u8]) -> bool {
    // The first byte first: most names are told apart by it alone.
    name.len() > 7 && name[0] | 0x20 == b'x' && name[..7].eq_ignore_ascii_case(b"x-iuid-")
}

/// Whether `name` is a trusted peer's `X-Iuid-Mirror` (another edge's mirror copy, kept
/// for the services that serve it: docs/moves.md "In a mesh") or `X-Iuid-Failover` (a read
/// another edge failed over to this region: docs/failover.md "In a mesh").
pub fn peer_copy(client: &ClientAddr, name: &[u8]) -> bool {
    client.trusted_peer
        && (name.eq_ignore_ascii_case(b"x-iuid-mirror")
            || name.eq_ignore_ascii_case(b"x-iuid-failover"))
}

/// Removes a client's `X-Iuid-*` fields ([`is_router_field`], but [`peer_copy`]; a
/// `HeaderMap`'s names are lowercase), once [`hop_by_hop_present`] saw one.
fn remove_router_fields(headers: &mut HeaderMap, client: &ClientAddr) {
    let router_field = |n: &&HeaderName| {
        n.as_str().starts_with("x-iuid-") && !peer_copy(client, n.as_str().as_bytes())
    };
    let names: Vec<HeaderName> = headers.keys().filter(router_field).cloned().collect();
    for name in names {
        headers.remove(name);
    }
}

/// Fields a `Connection` line may not nominate for removal (RFC 9110 §7.6.1 lets a sender
/// nominate any field, but these were added or vouched for by the router or a proxy in front
/// of it, and a client could otherwise erase, for example, the `X-Forwarded-For` chain before
/// it): `Forwarded`, `X-Forwarded-*`, `Via`, `X-Request-Id`, the trace context, credentials
/// and the client-certificate fields.
fn owned_by_proxies(token: &[u8]) -> bool {
    const OWNED: [&str; 6] = [
        "forwarded",
        "via",
        "x-request-id",
        "traceparent",
        "tracestate",
        "authorization",
    ];
    let prefixed = token.len() > 12 && token[..12].eq_ignore_ascii_case(b"x-forwarded-");
    prefixed
        || OWNED
            .iter()
            .any(|o| o.as_bytes().eq_ignore_ascii_case(token))
        || CLIENT_CERT_NAMES
            .iter()
            .any(|o| o.as_bytes().eq_ignore_ascii_case(token))
}

/// `present` (from [`hop_by_hop_present`]) has `Transfer-Encoding`.
fn has_transfer_encoding(present: u16) -> bool {
    // HOP_BY_HOP[5] is `Transfer-Encoding`.
    present & (1 << 5) != 0
}

/// `present` (from [`hop_by_hop_present`]) has both `Connection` and `Upgrade`.
fn may_upgrade(present: u16) -> bool {
    // HOP_BY_HOP[0] is `Connection`, HOP_BY_HOP[7] `Upgrade`.
    present & 1 != 0 && present & (1 << 7) != 0
}

/// `X-Forwarded-For`: client addresses, appended by each proxy.
pub static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
/// `X-Forwarded-Proto`: the scheme the client used.
pub static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
/// `X-Forwarded-Host`: the `Host` the client sent.
pub static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// Removes hop-by-hop fields and the fields named in `Connection` (RFC 9110 §7.6.1), but
/// never one the proxies own (`owned_by_proxies`).
///
/// One pass over the names (standard names compare as integers) finds which hop-by-hop
/// fields are present, usually none or just `Connection`; only those are removed, each
/// removal being a hash and a probe. Names listed in `Connection` are looked up without
/// allocating.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    strip_present(headers, hop_by_hop_present(headers, false));
}

/// [`strip_hop_by_hop`] with the fields present already known.
fn strip_present(headers: &mut HeaderMap, present: u16) {
    if present == 0 {
        return;
    }
    // HOP_BY_HOP[0] is `Connection`.
    if present & 1 != 0 {
        // Copies of the lines (reference counts), as removing needs the map; a second line
        // is rare, and an empty `Vec` does not allocate.
        let mut all = headers.get_all(CONNECTION).iter();
        let first = all.next().cloned();
        let rest: Vec<HeaderValue> = all.cloned().collect();
        for line in first.iter().chain(&rest) {
            for token in line.as_bytes().split(|&b| b == b',') {
                let token = token.trim_ascii();
                let listed = HOP_BY_HOP
                    .iter()
                    .any(|h| h.as_str().as_bytes().eq_ignore_ascii_case(token));
                if listed || token.is_empty() || owned_by_proxies(token) {
                    continue;
                }
                if let Ok(name) = std::str::from_utf8(token) {
                    headers.remove(name);
                }
            }
        }
    }
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present & (1 << i) != 0 {
            headers.remove(name);
        }
    }
    if present & CLIENT_CERT_BIT != 0 {
        for name in &CLIENT_CERT {
            headers.remove(name);
        }
    }
}

/// What the request rewrite needs to know besides the headers.
#[derive(Debug)]
pub struct Forwarding<'a> {
    /// The client.
    pub client: &'a ClientAddr,
    /// The host the client asked for (its `Host`, or the authority of an HTTP/2 request).
    pub original_host: Option<&'a HeaderValue>,
    /// This router's `Via` entry.
    pub via: &'a HeaderValue,
    /// Keep the client's `Host` (docs/data-path.md `preserve_host`).
    pub preserve_host: bool,
    /// `limits.underscore_fields`: what becomes of a field with `_` in its name that is not
    /// one of the router's own ([`underscore_field`]).
    pub underscores: UnderscoreFields,
}

/// Applies docs/data-path.md to a request about to go upstream: hop-by-hop fields removed (an upgrade
/// keeps `Connection: upgrade` and its `Upgrade`), `X-Forwarded-For` appended (replaced, with
/// `Forwarded`, for a peer outside `trusted_proxies`),
/// `X-Forwarded-Proto`/`-Host` and `Forwarded` set, `Via` added. `Host` is left to [`aim`]
/// (or kept, with `preserve_host`).
pub fn rewrite_request(headers: &mut HeaderMap, f: &Forwarding<'_>) {
    let original_host = f.original_host.cloned();
    let present = hop_by_hop_present(headers, true);
    if present & ROUTER_FIELD_BIT != 0 {
        remove_router_fields(headers, f.client);
    }
    if present & UNDERSCORE_BIT != 0 {
        remove_underscore_fields(headers, f.underscores);
    }
    let upgrade = if may_upgrade(present) {
        upgrade_of(headers)
    } else {
        None
    };
    strip_present(headers, present);
    if let Some(protocol) = upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, protocol);
    }
    if has_transfer_encoding(present) {
        // `Transfer-Encoding` is hop-by-hop, but the body it framed still goes upstream, and
        // hyper's client sends no body for a GET (or HEAD) that names none: a search API's
        // `GET` with a chunked body would arrive bare, and a malformed body would not stop a
        // request the client never finished. Admission allowed `chunked` alone, once.
        headers.insert(TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
    }
    canonical_length(headers);
    if f.client.replaces_forwarding {
        // A peer outside `trusted_proxies` names no client: the router's elements alone go on.
        headers.remove(&X_FORWARDED_FOR);
        headers.remove(FORWARDED);
    }
    append_forwarded_for(headers, f.client.xff());
    let (proto, proto_pair) = if f.client.tls {
        ("https", ";proto=https")
    } else {
        ("http", ";proto=http")
    };
    headers.insert(&X_FORWARDED_PROTO, HeaderValue::from_static(proto));

    // quoted-string: `host:port` is not a token; a host that could break the quoting is left
    // out of `Forwarded`.
    let quoted_host = original_host
        .as_ref()
        .and_then(|h| h.to_str().ok())
        .filter(|text| !text.contains(['"', '\\']));
    const HOST_PAIR: usize = ";host=\"\"".len();
    // Exactly the length: a `String` without spare capacity becomes a `HeaderValue` without
    // another allocation.
    let forwarded_for = std::str::from_utf8(f.client.forwarded_for()).unwrap_or("for=unknown");
    let len =
        forwarded_for.len() + quoted_host.map_or(0, |h| HOST_PAIR + h.len()) + proto_pair.len();
    let mut forwarded = String::with_capacity(len);
    forwarded.push_str(forwarded_for);
    if let Some(text) = quoted_host {
        forwarded.push_str(";host=\"");
        forwarded.push_str(text);
        forwarded.push('"');
    }
    forwarded.push_str(proto_pair);
    if let Some(host) = &original_host {
        headers.insert(&X_FORWARDED_HOST, host.clone());
    }
    if let Ok(v) = HeaderValue::try_from(forwarded) {
        headers.append(FORWARDED, v);
    }

    headers.append(VIA, f.via.clone());
    // A client's own client-certificate fields were removed above.
    if let Some(cert) = &f.client.client_cert {
        headers.insert(&X_FORWARDED_CLIENT_CERT, cert.clone());
    }

    if f.preserve_host {
        if let Some(host) = original_host {
            headers.insert(HOST, host);
        }
    }
}

/// `Content-Length` as a plain decimal (`010` as `10`), as the own engine writes it: a
/// next hop that reads leading zeros as octal (HTTP Garden found such servers) would
/// frame the body otherwise. RFC 9110 §8.6 allows the zeros; hyper's parser read the value
/// already, so a value starting with `0` is all that needs looking at.
fn canonical_length(headers: &mut HeaderMap) {
    let Some(value) = headers.get(CONTENT_LENGTH) else {
        return;
    };
    let bytes = value.as_bytes();
    if bytes.len() < 2 || bytes[0] != b'0' {
        return;
    }
    let Some(n) = std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok())
    else {
        return;
    };
    headers.insert(CONTENT_LENGTH, HeaderValue::from(n));
}

/// Appends `ip` to `X-Forwarded-For`, folding earlier lines into one (the usual case, no
/// earlier line, copies nothing).
fn append_forwarded_for(headers: &mut HeaderMap, ip: &HeaderValue) {
    if !headers.contains_key(&X_FORWARDED_FOR) {
        headers.insert(&X_FORWARDED_FOR, ip.clone());
        return;
    }
    let mut xff = String::with_capacity(64);
    for prior in headers.get_all(&X_FORWARDED_FOR) {
        match prior.to_str().map(str::trim) {
            Ok(text) if !text.is_empty() => {
                xff.push_str(text);
                xff.push_str(", ");
            }
            _ => {}
        }
    }
    xff.push_str(ip.to_str().unwrap_or("unknown"));
    if let Ok(v) = HeaderValue::try_from(xff) {
        headers.insert(&X_FORWARDED_FOR, v);
    }
}

/// Points a request at an upstream: the absolute URI its client is addressed by
/// (`http://<authority><path and query>`, the client's path and query byte for byte) and
/// `Host` set to `host`, the upstream's `host:port`, unless `preserve_host` keeps the
/// client's (a request without one still gets the upstream's: HTTP/1.1 requires `Host`).
pub fn aim(
    parts: &mut http::request::Parts,
    authority: &Authority,
    host: &HeaderValue,
    preserve_host: bool,
) {
    let path_and_query = match parts.uri.path_and_query() {
        // An absolute-form target with an empty path (`http://host?x=1`) keeps `?x=1` as
        // its text; its origin form is `/?x=1` (RFC 9112 §3.2.1), which `Display` writes.
        Some(pq) if pq.as_str().starts_with('?') => {
            http::uri::PathAndQuery::try_from(pq.to_string())
                .unwrap_or_else(|_| http::uri::PathAndQuery::from_static("/"))
        }
        Some(pq) => pq.clone(),
        None => http::uri::PathAndQuery::from_static("/"),
    };
    let mut uri = http::uri::Parts::default();
    uri.scheme = Some(http::uri::Scheme::HTTP);
    uri.authority = Some(authority.clone());
    uri.path_and_query = Some(path_and_query);
    if let Ok(uri) = http::Uri::from_parts(uri) {
        parts.uri = uri;
    }
    if !preserve_host || !parts.headers.contains_key(HOST) {
        parts.headers.insert(HOST, host.clone());
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

/// Applies docs/data-path.md to a response on its way back: hop-by-hop fields removed (a `101` keeps
/// its `Connection: upgrade` and `Upgrade`), `Via` added.
///
/// A response with both `Transfer-Encoding` and `Content-Length` was framed by the former
/// (hyper decoded it chunked), so its `Content-Length` is removed too (RFC 9112 §6.3: an
/// intermediary MUST remove it before forwarding); kept, it would announce a length the body
/// as forwarded does not have, and the client would get a complete-looking, truncated answer.
pub fn rewrite_response(status: http::StatusCode, headers: &mut HeaderMap, via: &HeaderValue) {
    let present = hop_by_hop_present(headers, false);
    if has_transfer_encoding(present) {
        headers.remove(http::header::CONTENT_LENGTH);
    }
    let upgrade = if status == http::StatusCode::SWITCHING_PROTOCOLS && may_upgrade(present) {
        upgrade_of(headers)
    } else {
        None
    };
    strip_present(headers, present);
    if let Some(protocol) = upgrade {
        headers.insert(CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(UPGRADE, protocol);
    }
    headers.append(VIA, via.clone());
}

mod client;
pub mod raw;
pub mod underscore;
mod via;

pub use client::ClientAddr;
#[cfg(test)]
mod tests;
