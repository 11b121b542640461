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
//! - A request field whose name holds `_` may be read by the upstream as the same name with
//!   `-` (CGI's `HTTP_X_IUID_REGION`): one that reads as the router's own is removed, any
//!   other goes by `limits.underscore_fields` ([`underscore_field`]).

use http::header::{
    HeaderMap, HeaderName, HeaderValue, CONNECTION, CONTENT_LENGTH, FORWARDED, HOST,
    TRANSFER_ENCODING, UPGRADE, VIA,
};
use http::{uri::Authority, Version};

pub use crate::config::UnderscoreFields;
pub use crate::problem::LoopReason;

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
/// for the services that serve it: docs/moves.md "In a mesh").
pub fn peer_copy(client: &ClientAddr, name: &[u8]) -> bool {
    client.trusted_peer && name.eq_ignore_ascii_case(b"x-iuid-mirror")
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

/// The router's own request fields whose names hold `-`, as [`underscore_field`] compares
/// a name with `_` to them, with the client-certificate and hop-by-hop fields
/// (`Transfer-Encoding`, `Keep-Alive`, `Proxy-Connection`) and the prefixes
/// `X-Iuid-` and `X-Forwarded-`. Its own names without `-` (`Forwarded`, `Via`,
/// `traceparent`, `tracestate`, `Host`) can be spelled no other way with `_`.
const OWN_DASHED: [&str; 2] = ["x-request-id", "content-length"];

/// The prefixes of [`OWN_DASHED`]'s families: `X-Iuid-*` ([`is_router_field`]) and
/// `X-Forwarded-*`.
const OWN_PREFIXES: [&str; 2] = ["x-iuid-", "x-forwarded-"];

/// Whether a field name holds `_`: one byte scan, the only cost of the rule for the names
/// that do not (nearly all). `core`'s inlined scan, not the `memchr` crate's: for names of a
/// few bytes its dispatch cost 84 instructions a name (callgrind, the GraphQL bench).
#[inline]
pub fn has_underscore(name: &[u8]) -> bool {
    name.contains(&b'_')
}

/// Whether `name`, with `_` read as `-` and case ignored, is `own` (lowercase).
fn reads_as(name: &[u8], own: &str) -> bool {
    name.len() == own.len()
        && name.iter().zip(own.as_bytes()).all(|(&n, &o)| {
            let n = if n == b'_' {
                b'-'
            } else {
                n.to_ascii_lowercase()
            };
            n == o
        })
}

/// Whether `name` (which holds `_`), with `_` read as `-`, is one of the router's own
/// request fields ([`OWN_DASHED`], [`OWN_PREFIXES`], the client-certificate and hop-by-hop
/// fields).
fn own_with_underscores(name: &[u8]) -> bool {
    OWN_PREFIXES
        .iter()
        .any(|p| name.len() > p.len() && reads_as(&name[..p.len()], p))
        || OWN_DASHED.iter().any(|o| reads_as(name, o))
        || CLIENT_CERT_NAMES.iter().any(|o| reads_as(name, o))
        || HOP_BY_HOP_NAMES.iter().any(|o| reads_as(name, o))
}

/// The rule for a request field whose name holds `_` ([`has_underscore`]), declared once
/// for both appliers (`raw.rs` on bytes, [`rewrite_request`] on a `HeaderMap`):
/// docs/data-path.md "Field names with `_`". CGI-style upstreams (Rack and Puma, WSGI, PHP)
/// read `X-Iuid_Region` and `X-Iuid-Region` as one key, `HTTP_X_IUID_REGION`: a name that
/// reads, with `_` as `-`, as one of the router's own fields is removed as that field is,
/// whatever the setting; any other goes by `limits.underscore_fields`. Whether it is removed;
/// its `lines` counted in `iuid_router_underscore_fields_total`.
pub fn underscore_field(name: &[u8], setting: UnderscoreFields, lines: u64) -> bool {
    let own = own_with_underscores(name);
    let dropped = own || setting == UnderscoreFields::Drop;
    crate::metrics::underscore_fields(own, dropped, lines);
    dropped
}

/// Removes the fields with `_` in their names that [`underscore_field`] drops, once
/// [`hop_by_hop_present`] saw one (the names are copied: rare).
fn remove_underscore_fields(headers: &mut HeaderMap, setting: UnderscoreFields) {
    let names: Vec<HeaderName> = headers
        .keys()
        .filter(|n| has_underscore(n.as_str().as_bytes()))
        .cloned()
        .collect();
    for name in names {
        let lines = headers.get_all(&name).iter().count() as u64;
        if underscore_field(name.as_str().as_bytes(), setting, lines) {
            headers.remove(name);
        }
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

/// Checks the request's `Via` lines (all of them, comma-separated entries) against this
/// router's region and `max_hops`.
pub fn check_loop(headers: &HeaderMap, region: &str, max_hops: usize) -> Result<(), LoopReason> {
    check_via(
        headers.get_all(VIA).iter().map(HeaderValue::as_bytes),
        region,
        max_hops,
    )
}

/// [`check_loop`] over the `Via` lines' values, as bytes.
pub fn check_via<'a>(
    lines: impl Iterator<Item = &'a [u8]>,
    region: &str,
    max_hops: usize,
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

pub use client::ClientAddr;
#[cfg(test)]
mod tests;
