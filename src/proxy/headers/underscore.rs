//! Request fields whose names hold `_` (docs/data-path.md, "Field names with `_`"):
//! CGI-style upstreams (Rack and Puma, WSGI, PHP) read `X-Iuid_Region` and `X-Iuid-Region`
//! as one key, `HTTP_X_IUID_REGION`, so a name that reads, with `_` as `-`, as one of the
//! router's own fields is removed as that field is; any other goes by
//! `limits.underscore_fields`. Declared once here for both appliers (`raw.rs` on bytes,
//! `rewrite_request` on a `HeaderMap`).

use http::header::{HeaderMap, HeaderName};

use super::{UnderscoreFields, CLIENT_CERT_NAMES, HOP_BY_HOP_NAMES};

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
pub(super) fn own_with_underscores(name: &[u8]) -> bool {
    OWN_PREFIXES
        .iter()
        .any(|p| name.len() > p.len() && reads_as(&name[..p.len()], p))
        || OWN_DASHED.iter().any(|o| reads_as(name, o))
        || CLIENT_CERT_NAMES.iter().any(|o| reads_as(name, o))
        || HOP_BY_HOP_NAMES.iter().any(|o| reads_as(name, o))
}

/// The rule for a request field whose name holds `_` ([`has_underscore`]), declared once
/// for both appliers (`raw.rs` on bytes, [`super::rewrite_request`] on a `HeaderMap`):
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
pub(super) fn remove_underscore_fields(headers: &mut HeaderMap, setting: UnderscoreFields) {
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
