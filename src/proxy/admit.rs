//! Phase 0: requests a proxy must refuse before reading anything else of them.
//!
//! Every protocol's (`phases::Proxy::admit_head`, over any `RequestView`):
//! - `CONNECT` asks for a tunnel, which this router does not offer: 405, nothing forwarded
//!   (forwarded, the client got no status line at all);
//! - `Host`: RFC 9112 §3.2 requires 400 for an HTTP/1.1 request with none, more than one, or
//!   an invalid one ([`check_host`]); its value reaches `X-Forwarded-Host` and
//!   `Forwarded: host=`.
//!
//! A request in `http` parts only ([`admit_parts`]; the own engine's codec refuses these in
//! its head's bytes, `crate::http1`):
//! - a transfer coding other than `chunked` (`gzip, chunked`): the other coding would be
//!   dropped silently; RFC 9112 §6.1 asks for 501;
//! - `chunked` applied more than once (two `Transfer-Encoding` lines of it): 400, RFC 9112
//!   §6.1, since a later hop may frame the body otherwise;
//! - a request target in authority-form (`GET host:80`, `GET !`) for another method than
//!   `CONNECT`: 400, RFC 9112 §3.2 (hyper's client would send it upstream as `/`);
//! - a request target with raw bytes outside US-ASCII: 400 (they must be percent-encoded).

use http::header::TRANSFER_ENCODING;
use http::request::Parts;

use crate::error::{Error, ErrorKind};
use crate::problem::Problem;

/// Checks what only a request in `http` parts can carry wrong: its transfer coding and its
/// target's form and bytes (each a header lookup; a request with nothing odd costs a few
/// dozen instructions). The method and `Host` are every protocol's
/// (`phases::Proxy::admit_head`, which runs first).
pub fn admit_parts(parts: &Parts) -> Result<(), Problem> {
    let mut chunked = 0;
    for line in parts.headers.get_all(TRANSFER_ENCODING) {
        for coding in line.as_bytes().split(|&b| b == b',') {
            let coding = coding.trim_ascii();
            if coding.is_empty() {
                continue;
            }
            // hyper accepts a request only when `chunked` is its last coding; anything before
            // it would be dropped.
            if !coding.eq_ignore_ascii_case(b"chunked") {
                return Err(Problem::UnsupportedTransferCoding);
            }
            chunked += 1;
        }
    }
    if chunked > 1 {
        // RFC 9112 §6.1: chunked must not be applied more than once; two lines (or two
        // entries) of it are a framing a later hop may read otherwise.
        let kind = ErrorKind::BadFraming;
        crate::metrics::client_error(kind);
        return Err(Problem::Client(Error::new(
            kind,
            "Transfer-Encoding names chunked more than once",
        )));
    }
    // RFC 9112 §3.2: authority-form is for CONNECT alone. hyper's parser takes `GET !` or
    // `GET host:80` as one, and its client would send it as `/`: another resource than
    // the one asked for. The own engine refuses it as this.
    if parts.uri.scheme().is_none() && parts.uri.authority().is_some() {
        return Err(Problem::BadHead(
            "a request target in none of the forms of RFC 9112 §3.2",
        ));
    }
    // Bytes outside US-ASCII in the target must be percent-encoded (a word-at-a-time scan).
    if !parts
        .uri
        .path_and_query()
        .is_none_or(|pq| pq.as_str().is_ascii())
    {
        return Err(Problem::BadTarget);
    }
    Ok(())
}

/// RFC 9112 §3.2's `Host` rule over a request's `Host` values: exactly one valid one, or
/// none in HTTP/1.0.
pub(super) fn check_host<'a>(
    mut hosts: impl Iterator<Item = &'a [u8]>,
    http11: bool,
) -> Result<(), Problem> {
    match (hosts.next(), hosts.next()) {
        (None, _) if http11 => Err(Problem::BadHost("none was sent")),
        (None, _) => Ok(()),
        (Some(_), Some(_)) => Err(Problem::BadHost("more than one was sent")),
        (Some(host), None) if valid_host(host) => Ok(()),
        (Some(_), None) => Err(Problem::BadHost("its value is not a host[:port]")),
    }
}

/// `uri-host [ ":" port ]` (RFC 9110 §7.2, RFC 3986 §3.2.2): an IP literal in brackets, or a
/// reg-name of unreserved, sub-delim and percent-encoded characters, then optional digits.
fn valid_host(value: &[u8]) -> bool {
    let (host, port) = if value.first() == Some(&b'[') {
        let Some(end) = value.iter().position(|&b| b == b']') else {
            return false;
        };
        let literal = &value[1..end];
        if literal.is_empty()
            || !literal
                .iter()
                .all(|&b| b.is_ascii_hexdigit() || matches!(b, b':' | b'.' | b'v' | b'V'))
        {
            return false;
        }
        (&value[..=end], &value[end + 1..])
    } else {
        match value.iter().position(|&b| b == b':') {
            Some(colon) => (&value[..colon], &value[colon..]),
            None => (value, &value[value.len()..]),
        }
    };
    let port_ok = match port {
        [] => true,
        [b':', digits @ ..] => digits.len() <= 5 && digits.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    let reg_name_ok =
        host.first() == Some(&b'[') || (!host.is_empty() && host.iter().all(|&b| reg_name_byte(b)));
    port_ok && reg_name_ok
}

/// A byte a reg-name may hold: unreserved, sub-delims, or `%` of a percent-encoding.
fn reg_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric()
        || matches!(
            b,
            b'-' | b'.'
                | b'_'
                | b'~'
                | b'%'
                | b'!'
                | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(target: &str) -> Parts {
        let (parts, ()) = http::Request::get(target)
            .header(http::header::HOST, "t")
            .body(())
            .expect("request")
            .into_parts();
        parts
    }

    #[test]
    fn targets_in_no_form_are_refused() {
        for bad in ["!", "t:80"] {
            assert!(
                matches!(admit_parts(&parts(bad)), Err(Problem::BadHead(_))),
                "{bad}"
            );
        }
        for ok in ["/", "/a?b", "*", "http://t/a"] {
            assert!(admit_parts(&parts(ok)).is_ok(), "{ok}");
        }
    }

    #[test]
    fn hosts() {
        for ok in [
            "example.com",
            "example.com:8080",
            "127.0.0.1:80",
            "[::1]:8080",
            "[::1]",
            "a_b.local",
        ] {
            assert!(valid_host(ok.as_bytes()), "{ok}");
        }
        for bad in [
            "",
            "a b",
            "host:port",
            "host:123456",
            "[::1",
            "[]",
            "ex/ample",
            "user@host",
            "h\"ost",
            ":80",
        ] {
            assert!(!valid_host(bad.as_bytes()), "{bad}");
        }
    }
}
