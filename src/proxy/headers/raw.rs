//! This module's header rules for the own HTTP/1.1 engine (`proxy::h1`): the same rules
//! applied to field lines as bytes while the head going on is written, instead of to a
//! `HeaderMap`. Fields keep their order and the case of their names as sent (a `HeaderMap`
//! lowercases names and groups lines of one name); what is removed and added is the same,
//! which `tests/h1_conformance.rs` checks.

use super::{
    owned_by_proxies, ClientAddr, CLIENT_CERT_LENGTHS, CLIENT_CERT_NAMES, HOP_BY_HOP_LENGTHS,
    HOP_BY_HOP_NAMES,
};
use crate::http1::head::Field;
use crate::http1::write;

/// Field names `Connection` lines nominate (at most this many are kept; beyond, every
/// unknown field would have to be compared with each).
const MAX_NOMINATED: usize = 16;

/// The fields a message's `Connection` lines nominate for removal (RFC 9110 §7.6.1), minus
/// the hop-by-hop ones (removed anyway) and those the proxies own.
#[derive(Debug, Default)]
pub struct Nominated<'b> {
    /// One slot past `MAX_NOMINATED`: the router's own ([`Nominated::also`]).
    names: [&'b [u8]; MAX_NOMINATED + 1],
    len: usize,
}

impl<'b> Nominated<'b> {
    /// Reads the `Connection` lines among `fields`.
    pub fn of(buf: &'b [u8], fields: &[Field]) -> Nominated<'b> {
        let mut nominated = Nominated::default();
        for field in fields {
            if !field.name.of(buf).eq_ignore_ascii_case(b"connection") {
                continue;
            }
            for token in field.value.of(buf).split(|&b| b == b',') {
                let token = token.trim_ascii();
                if token.is_empty() || is_hop_by_hop(token) || owned_by_proxies(token) {
                    continue;
                }
                if nominated.len < MAX_NOMINATED {
                    nominated.names[nominated.len] = token;
                    nominated.len += 1;
                }
            }
        }
        nominated
    }

    /// Adds a name the router itself removes from this message (a client's `Forwarded`
    /// from a peer outside `trusted_proxies`): no test a field on the path where none is.
    pub fn also(&mut self, name: &'b [u8]) {
        if self.len <= MAX_NOMINATED {
            self.names[self.len] = name;
            self.len += 1;
        }
    }

    /// Whether `name` was nominated.
    pub fn has(&self, name: &[u8]) -> bool {
        self.names[..self.len]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(name))
    }

    /// Whether `Connection` asked to close the connection after this message.
    pub fn close(buf: &[u8], fields: &[Field]) -> bool {
        Nominated::asks(buf, fields, b"close")
    }

    /// Whether a `Connection` line names `token` (`close`, `keep-alive`).
    pub fn asks(buf: &[u8], fields: &[Field], token: &[u8]) -> bool {
        fields.iter().any(|f| {
            f.name.of(buf).eq_ignore_ascii_case(b"connection")
                && f.value
                    .of(buf)
                    .split(|&b| b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(token))
        })
    }
}

/// A hop-by-hop field (RFC 9110 §7.6.1, plus `Keep-Alive` and `Proxy-Connection`).
pub fn is_hop_by_hop(name: &[u8]) -> bool {
    let len = name.len();
    len < 32
        && HOP_BY_HOP_LENGTHS & (1 << len) != 0
        && HOP_BY_HOP_NAMES
            .iter()
            .any(|h| h.as_bytes().eq_ignore_ascii_case(name))
}

fn is_client_cert(name: &[u8]) -> bool {
    let len = name.len();
    len < 32
        && CLIENT_CERT_LENGTHS & (1 << len) != 0
        && CLIENT_CERT_NAMES
            .iter()
            .any(|h| h.as_bytes().eq_ignore_ascii_case(name))
}

/// What the request rewrite needs besides the fields.
#[derive(Debug)]
pub struct RawForwarding<'a> {
    /// The client.
    pub client: &'a ClientAddr,
    /// The client's `Host` value, if it sent one.
    pub original_host: Option<&'a [u8]>,
    /// This router's `Via` entry.
    pub via: &'a [u8],
    /// Keep the client's `Host`.
    pub preserve_host: bool,
    /// The request id going upstream.
    pub request_id: &'a [u8],
    /// The request has a `Connection` line (else its nominations are not looked for).
    pub nominates: bool,
    /// The request's trace (docs/traces.md): the client's `traceparent` and `tracestate`
    /// are left out, and the trace's written when they are the same for every attempt
    /// (each attempt of a sampled request writes its own).
    pub trace: Option<&'a crate::trace::Traced>,
    /// `limits.underscore_fields` ([`super::underscore_field`]).
    pub underscores: super::UnderscoreFields,
}

/// Writes the fields of a request going upstream: the client's fields under docs/data-path.md's
/// rules (hop-by-hop and nominated fields, client-certificate fields, the forwarding fields
/// the router sets, `Host`, `Content-Length`, the request id removed), the client's `Host`
/// with `preserve_host`, and the forwarding fields. The upstream's `Host` (per attempt) and
/// the framing fields are the caller's.
pub fn write_request_fields(
    out: &mut Vec<u8>,
    buf: &[u8],
    fields: &[Field],
    f: &RawForwarding<'_>,
) {
    let mut nominated = match f.nominates {
        true => Nominated::of(buf, fields),
        false => Nominated::default(),
    };
    // A peer outside `trusted_proxies`: its forwarding fields are replaced, not appended to.
    let replaces = f.client.replaces_forwarding;
    if replaces {
        nominated.also(b"forwarded");
    }
    if let (true, Some(host)) = (f.preserve_host, f.original_host) {
        write::field(out, b"Host", host);
    }
    let mut prior_xff = 0;
    // Only looked for when the request came with some (its trace fields are the router's).
    let client_trace = f.trace.is_some_and(crate::trace::Traced::client_fields);

    for field in fields {
        let name = field.name.of(buf);
        // First, as `rewrite_request` takes them first: each line counted once.
        let dropped = (super::has_underscore(name)
            && super::underscore_field(name, f.underscores, 1))
            || is_hop_by_hop(name)
            || is_client_cert(name)
            || name.eq_ignore_ascii_case(b"host")
            || name.eq_ignore_ascii_case(b"content-length")
            || name.eq_ignore_ascii_case(b"x-request-id")
            || name.eq_ignore_ascii_case(b"x-forwarded-proto")
            || name.eq_ignore_ascii_case(b"x-forwarded-host")
            || nominated.has(name)
            || (super::is_router_field(name) && !super::peer_copy(f.client, name))
            || (client_trace
                && (name.eq_ignore_ascii_case(b"traceparent")
                    || name.eq_ignore_ascii_case(b"tracestate")));
        if name.eq_ignore_ascii_case(b"x-forwarded-for") {
            prior_xff += usize::from(!replaces);
            continue;
        }
        if !dropped {
            write::field(out, name, field.value.of(buf));
        }
    }
    // X-Forwarded-For: earlier lines folded into one, this client's address last.
    out.extend_from_slice(b"X-Forwarded-For: ");
    if prior_xff > 0 {
        for field in fields {
            if field.name.of(buf).eq_ignore_ascii_case(b"x-forwarded-for") {
                let value = field.value.of(buf).trim_ascii();
                // A line with bytes outside visible ASCII (obs-text) holds no address: it is
                // left out, as hyper's engine leaves out a value that is not text (the
                // differential tests found the own engine passing `caf\xe9` on).
                let text = value
                    .iter()
                    .all(|&b| b == b'\t' || (b' '..=b'~').contains(&b));
                if !value.is_empty() && text {
                    out.extend_from_slice(value);
                    out.extend_from_slice(b", ");
                }
            }
        }
    }
    out.extend_from_slice(f.client.ip_text());
    out.extend_from_slice(b"\r\n");
    let (proto, proto_pair): (&[u8], &[u8]) = if f.client.tls {
        (b"https", b";proto=https")
    } else {
        (b"http", b";proto=http")
    };
    write::field(out, b"X-Forwarded-Proto", proto);
    if let Some(host) = f.original_host {
        write::field(out, b"X-Forwarded-Host", host);
    }
    out.extend_from_slice(b"Forwarded: ");
    out.extend_from_slice(f.client.forwarded_for());
    // quoted-string: a host that could break the quoting is left out (as for hyper's engine).
    if let Some(host) = f
        .original_host
        .filter(|h| !h.contains(&b'"') && !h.contains(&b'\\'))
    {
        out.extend_from_slice(b";host=\"");
        out.extend_from_slice(host);
        out.push(b'"');
    }
    out.extend_from_slice(proto_pair);
    out.extend_from_slice(b"\r\n");
    write::field(out, b"Via", f.via);
    if let Some(cert) = &f.client.client_cert {
        write::field(out, b"X-Forwarded-Client-Cert", cert.as_bytes());
    }
    write::field(out, b"X-Request-Id", f.request_id);
    if let Some((traceparent, tracestate)) = f.trace.and_then(crate::trace::Traced::fields) {
        out.extend_from_slice(traceparent.line());
        if let Some(state) = tracestate {
            write::field(out, b"tracestate", state.as_bytes());
        }
    }
}

/// Writes the fields of a response going back: hop-by-hop and nominated fields removed,
/// `Content-Length` too with `drop_length` (`Transfer-Encoding` framed the body, or a 1xx or
/// 204 answer, which has none), the upstream's request id
/// replaced by the request's; then `Via` and the request id (none on a 1xx answer). With
/// `alt_svc` (HTTP/3 on, docs/http3.md), the router's `Alt-Svc` replaces the upstream's,
/// which names the upstream's own services, not the router's. The framing and `Connection`
/// fields are the caller's.
pub fn write_response_fields(
    out: &mut Vec<u8>,
    buf: &[u8],
    fields: &[Field],
    via: &[u8],
    request_id: Option<&[u8]>,
    drop_length: bool,
    alt_svc: Option<&[u8]>,
) {
    let nominated = Nominated::of(buf, fields);
    for field in fields {
        let name = field.name.of(buf);
        let dropped = is_hop_by_hop(name)
            || name.eq_ignore_ascii_case(b"x-request-id")
            || (drop_length && name.eq_ignore_ascii_case(b"content-length"))
            || nominated.has(name)
            || (alt_svc.is_some() && name.eq_ignore_ascii_case(b"alt-svc"));
        if !dropped {
            write::field(out, name, field.value.of(buf));
        }
    }
    write::field(out, b"Via", via);
    if let Some(id) = request_id {
        write::field(out, b"X-Request-Id", id);
    }
    if let Some(alt_svc) = alt_svc {
        write::field(out, b"Alt-Svc", alt_svc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http1::head::{parse_request, RequestHead};

    #[test]
    fn a_request_is_rewritten_under_the_same_rules_as_on_hyper() {
        let buf = b"GET / HTTP/1.1\r\nHost: h.example\r\nConnection: keep-alive, X-Secret, Via\r\n\
X-Secret: 1\r\nX-Forwarded-For: 10.0.0.1\r\nX-Forwarded-Client-Cert: forged\r\nAccept: */*\r\n\
X-Request-Id: old\r\nVia: 1.1 edge\r\n\r\n";
        let mut head = RequestHead::default();
        assert_eq!(parse_request(buf, &mut head, 100, 8192), Ok(true));
        let client = ClientAddr::new("192.0.2.7:5000".parse().expect("addr"));
        let f = RawForwarding {
            client: &client,
            original_host: Some(b"h.example"),
            via: b"1.1 eu",
            preserve_host: false,
            request_id: b"rid",
            nominates: true,
            trace: None,
            underscores: crate::config::UnderscoreFields::Drop,
        };
        let mut out = Vec::new();
        write_request_fields(&mut out, buf, &head.fields, &f);
        let text = String::from_utf8(out).expect("ascii");
        assert_eq!(
            text,
            "Accept: */*\r\nVia: 1.1 edge\r\n\
X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: h.example\r\n\
Forwarded: for=192.0.2.7;host=\"h.example\";proto=http\r\nVia: 1.1 eu\r\nX-Request-Id: rid\r\n"
        );
    }
}
