//! Message heads (RFC 9112 §2–§5) parsed once with `httparse` into offsets over the read
//! buffer: nothing is copied, and the `fields` vector is the connection's, reused from one
//! request to the next.
//!
//! `httparse` already refuses what RFC 9112 forbids in a head: a bare CR, whitespace between
//! a field name and its colon, obs-fold in requests, invalid bytes in names and values, and
//! a request line that is not `method SP target SP version`. This module adds what a proxy
//! must also refuse: raw bytes outside US-ASCII in the target (they must be
//! percent-encoded), a target in none of RFC 9112 §3.2's forms or with a byte the URI
//! grammar refuses (as hyper's engine does), and more fields or bytes than the limits allow.
//! A fragment (`#…`) is not part of a request target: it is dropped, as hyper's engine
//! drops it.

use std::mem::MaybeUninit;

/// A byte range of the read buffer (offsets, so a head does not borrow the buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Span {
    /// First byte.
    pub start: u32,
    /// One past the last byte.
    pub end: u32,
}

impl Span {
    /// The bytes of `buf` this span covers (empty if `buf` is shorter: never panics).
    pub fn of<'b>(&self, buf: &'b [u8]) -> &'b [u8] {
        buf.get(self.start as usize..self.end as usize)
            .unwrap_or_default()
    }

    /// Where `part`, a slice `httparse` returned from `buf`, lies in it (an empty span for
    /// an empty part, wherever its pointer points).
    fn within(buf: &[u8], part: &[u8]) -> Span {
        let start = (part.as_ptr() as usize).wrapping_sub(buf.as_ptr() as usize);
        match start.checked_add(part.len()) {
            Some(end) if !part.is_empty() && end <= buf.len() => Span {
                start: start as u32,
                end: end as u32,
            },
            _ => Span::default(),
        }
    }
}

/// One field line: its name and value (the value without surrounding whitespace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// The name, as sent (case kept).
    pub name: Span,
    /// The value.
    pub value: Span,
}

/// Which of the fields a proxy looks for a head has, found in the parse's one pass over the
/// names (by length first): the passes that look for an absent one are skipped.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen(u16);

impl Seen {
    /// `Host`.
    pub const HOST: Seen = Seen(1);
    /// `Connection`.
    pub const CONNECTION: Seen = Seen(1 << 1);
    /// `Upgrade`.
    pub const UPGRADE: Seen = Seen(1 << 2);
    /// `Expect`.
    pub const EXPECT: Seen = Seen(1 << 3);
    /// `Content-Type`.
    pub const CONTENT_TYPE: Seen = Seen(1 << 4);
    /// `Via`.
    pub const VIA: Seen = Seen(1 << 5);
    /// `X-Request-Id`.
    pub const REQUEST_ID: Seen = Seen(1 << 6);
    /// `Content-Length` or `Transfer-Encoding`.
    pub const FRAMING: Seen = Seen(1 << 7);
    /// `X-Forwarded-For`.
    pub const FORWARDED_FOR: Seen = Seen(1 << 8);
    /// `traceparent` or `tracestate` (W3C Trace Context).
    pub const TRACE: Seen = Seen(1 << 9);

    /// Whether `field` was seen.
    pub fn has(self, field: Seen) -> bool {
        self.0 & field.0 != 0
    }

    fn of(name: &[u8]) -> Seen {
        let is = |known: &[u8]| name.eq_ignore_ascii_case(known);
        match name.len() {
            3 if is(b"via") => Seen::VIA,
            4 if is(b"host") => Seen::HOST,
            6 if is(b"expect") => Seen::EXPECT,
            7 if is(b"upgrade") => Seen::UPGRADE,
            10 if is(b"connection") => Seen::CONNECTION,
            10 if is(b"tracestate") => Seen::TRACE,
            11 if is(b"traceparent") => Seen::TRACE,
            12 if is(b"content-type") => Seen::CONTENT_TYPE,
            12 if is(b"x-request-id") => Seen::REQUEST_ID,
            14 if is(b"content-length") => Seen::FRAMING,
            15 if is(b"x-forwarded-for") => Seen::FORWARDED_FOR,
            17 if is(b"transfer-encoding") => Seen::FRAMING,
            _ => Seen(0),
        }
    }
}

/// A request head: request line and fields, as offsets into the buffer it was parsed from.
#[derive(Debug, Default)]
pub struct RequestHead {
    /// The method token.
    pub method: Span,
    /// The request target, as sent.
    pub target: Span,
    /// The minor version: 1 for HTTP/1.1, 0 for HTTP/1.0.
    pub minor: u8,
    /// The field lines in order.
    pub fields: Vec<Field>,
    /// Which of the fields a proxy looks for are there.
    pub seen: Seen,
    /// The head's length in bytes, with its final CRLF: the body starts there.
    pub len: usize,
}

/// A response head.
#[derive(Debug, Default)]
pub struct ResponseHead {
    /// The status code, 100–999 (`httparse` reads any three digits; below 100 is refused).
    pub status: u16,
    /// The minor version.
    pub minor: u8,
    /// The field lines in order.
    pub fields: Vec<Field>,
    /// The head's length in bytes.
    pub len: usize,
}

/// Why a head was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    /// Not a valid head (`httparse`'s reason).
    Invalid(&'static str),
    /// Raw bytes outside US-ASCII in the request target.
    NonAsciiTarget,
    /// More field lines than the limit.
    TooManyFields,
    /// The head is longer than the limit (and not complete within it).
    TooLarge,
}

impl std::fmt::Display for HeadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeadError::Invalid(why) => write!(f, "invalid message head: {why}"),
            HeadError::NonAsciiTarget => f.write_str("the request target has raw non-ASCII bytes"),
            HeadError::TooManyFields => f.write_str("too many header fields"),
            HeadError::TooLarge => f.write_str("the header section is too large"),
        }
    }
}

/// Field lines parsed at most: the larger of the configured limit and this is what the
/// stack array holds.
pub const MAX_FIELDS: usize = 256;

fn invalid(e: httparse::Error) -> HeadError {
    match e {
        httparse::Error::TooManyHeaders => HeadError::TooManyFields,
        e => HeadError::Invalid(e.description_str()),
    }
}

trait Describe {
    fn description_str(&self) -> &'static str;
}

impl Describe for httparse::Error {
    fn description_str(&self) -> &'static str {
        match self {
            httparse::Error::HeaderName => "invalid header name",
            httparse::Error::HeaderValue => "invalid header value",
            httparse::Error::NewLine => "invalid line ending",
            httparse::Error::Status => "invalid status",
            httparse::Error::Token => "invalid token",
            httparse::Error::TooManyHeaders => "too many headers",
            httparse::Error::Version => "invalid HTTP version",
        }
    }
}

/// The head's length once `httparse` found its end within `max_bytes`; `None` while more
/// bytes may complete it. Errors: `max_bytes` read, or a longer head.
fn complete(
    status: httparse::Status<usize>,
    buf: &[u8],
    max_bytes: usize,
) -> Result<Option<usize>, HeadError> {
    match status {
        httparse::Status::Complete(len) if len <= max_bytes => Ok(Some(len)),
        httparse::Status::Partial if buf.len() < max_bytes => Ok(None),
        _ => Err(HeadError::TooLarge),
    }
}

/// Parses a request head at the start of `buf` into `head` (its `fields` reused).
///
/// Returns `Ok(true)` when the head is complete (`head.len` is its length), `Ok(false)` when
/// more bytes are needed. Errors: the head is invalid, has more than `max_fields` fields, or
/// `max_bytes` were read without its end.
pub fn parse_request(
    buf: &[u8],
    head: &mut RequestHead,
    max_fields: usize,
    max_bytes: usize,
) -> Result<bool, HeadError> {
    // Uninitialized: a zeroed array of 256 fields would cost 8 KiB of stores per head.
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let max_fields = max_fields.min(MAX_FIELDS);
    let mut req = httparse::Request::new(&mut []);
    let status = httparse::ParserConfig::default()
        .parse_request_with_uninit_headers(&mut req, buf, &mut storage[..max_fields])
        .map_err(invalid)?;
    let Some(len) = complete(status, buf, max_bytes)? else {
        return Ok(false);
    };
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return Err(HeadError::Invalid("incomplete request line"));
    };
    if !target.is_ascii() {
        return Err(HeadError::NonAsciiTarget);
    }
    let target = request_target(method.as_bytes(), target.as_bytes())?;
    head.method = Span::within(buf, method.as_bytes());
    head.target = Span::within(buf, target);
    head.minor = minor;
    head.len = len;
    head.fields.clear();
    let mut seen = 0;
    head.fields.extend(req.headers.iter().map(|h| {
        seen |= Seen::of(h.name.as_bytes()).0;
        Field {
            name: Span::within(buf, h.name.as_bytes()),
            value: Span::within(buf, h.value),
        }
    }));
    head.seen = Seen(seen);
    Ok(true)
}

/// A request target as RFC 9112 §3.2 has it, or why not (the differential tests found each
/// case forwarded where hyper's engine refuses or rewrites it):
/// - origin-form (`/path?query`): its bytes must be those the `http` crate's URI parser
///   (hyper's engine) accepts: RFC 3986's, and some that browsers send unencoded
///   (`"{}|\^[]` in the path, `` `{}|\^[] `` in the query); never `<` or `>`. A
///   fragment is cut off: it is not part of a target, and hyper's engine drops it too, so
///   neither engine routes by it or forwards it;
/// - asterisk-form (`*`), absolute-form (`scheme://…`) and, for `CONNECT`, authority-form:
///   as they are (the own engine hands them to hyper's);
/// - anything else (`GET !`, `GET host:80`) is refused: hyper's engine would forward it as
///   `/`, a request for another resource than the one sent.
fn request_target<'b>(method: &[u8], target: &'b [u8]) -> Result<&'b [u8], HeadError> {
    if target.first() == Some(&b'/') {
        let end = target
            .iter()
            .position(|&b| b == b'#')
            .unwrap_or(target.len());
        let (path, query) = match target[..end].iter().position(|&b| b == b'?') {
            Some(q) => (&target[..q], &target[q + 1..end]),
            None => (&target[..end], &b""[..]),
        };
        let in_path = |b: &u8| {
            matches!(b, 0x21 | 0x24..=0x3B | 0x3D | 0x40..=0x5F | 0x61..=0x7A | 0x7C | 0x7E)
                || matches!(b, b'"' | b'{' | b'}')
        };
        let in_query = |b: &u8| matches!(b, 0x21 | 0x24..=0x3B | 0x3D | 0x3F..=0x7E);
        if !path.iter().all(in_path) || !query.iter().all(in_query) {
            return Err(HeadError::Invalid(
                "a request target byte that must be percent-encoded",
            ));
        }
        return Ok(&target[..end]);
    }
    let scheme = target.iter().position(|&b| b == b':').is_some_and(|colon| {
        colon > 0
            && target[0].is_ascii_alphabetic()
            && target[..colon]
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.'))
            && target[colon..].starts_with(b"://")
    });
    if target == b"*" || scheme || method == b"CONNECT" {
        return Ok(target);
    }
    Err(HeadError::Invalid(
        "a request target in none of the forms of RFC 9112 §3.2",
    ))
}

/// Parses a response head at the start of `buf` into `head`, as [`parse_request`] does.
/// obs-fold is refused here too (RFC 9112 §5.2 lets a proxy refuse it: 502), and so is a
/// status below 100 (RFC 9110 §15: invalid), which would otherwise pass for a bodiless 1xx
/// and leave its body to be read as the next response.
pub fn parse_response(
    buf: &[u8],
    head: &mut ResponseHead,
    max_fields: usize,
    max_bytes: usize,
) -> Result<bool, HeadError> {
    let mut storage = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_FIELDS];
    let max_fields = max_fields.min(MAX_FIELDS);
    let mut resp = httparse::Response::new(&mut []);
    let status = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, buf, &mut storage[..max_fields])
        .map_err(invalid)?;
    let Some(len) = complete(status, buf, max_bytes)? else {
        return Ok(false);
    };
    let (Some(code), Some(minor)) = (resp.code, resp.version) else {
        return Err(HeadError::Invalid("incomplete status line"));
    };
    if code < 100 {
        return Err(HeadError::Invalid("status code below 100"));
    }
    head.status = code;
    head.minor = minor;
    head.len = len;
    head.fields.clear();
    head.fields.extend(resp.headers.iter().map(|h| Field {
        name: Span::within(buf, h.name.as_bytes()),
        value: Span::within(buf, h.value),
    }));
    Ok(true)
}

/// The fields named `name` (ASCII case-insensitive), in order, as (name, value) bytes.
pub fn all<'b>(
    buf: &'b [u8],
    fields: &'b [Field],
    name: &'b [u8],
) -> impl Iterator<Item = &'b [u8]> + 'b {
    fields
        .iter()
        .filter(move |f| f.name.of(buf).eq_ignore_ascii_case(name))
        .map(move |f| f.value.of(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_head_is_offsets_into_its_buffer() {
        let buf = b"GET /v1/a?b=c HTTP/1.1\r\nHost: x\r\nX-A:  1 \r\n\r\nbody";
        let mut head = RequestHead::default();
        assert_eq!(parse_request(buf, &mut head, 100, 8192), Ok(true));
        assert_eq!(head.method.of(buf), b"GET");
        assert_eq!(head.target.of(buf), b"/v1/a?b=c");
        assert_eq!(head.minor, 1);
        assert_eq!(&buf[head.len..], b"body");
        let names: Vec<_> = head.fields.iter().map(|f| f.name.of(buf)).collect();
        assert_eq!(names, [&b"Host"[..], b"X-A"]);
        assert_eq!(all(buf, &head.fields, b"x-a").next(), Some(&b"1"[..]));
    }

    #[test]
    fn partial_heads_wait_and_bad_ones_are_refused() {
        let mut head = RequestHead::default();
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\nHo", &mut head, 100, 8192),
            Ok(false)
        );
        assert_eq!(
            parse_request(b"GET / HTTP/1.1\r\nHo", &mut head, 100, 10),
            Err(HeadError::TooLarge)
        );
        assert!(parse_request(b"GET / HTTP/1.1\r\nA : b\r\n\r\n", &mut head, 100, 8192).is_err());
        assert!(parse_request(
            b"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n",
            &mut head,
            100,
            8192
        )
        .is_err());
        assert_eq!(
            parse_request("GET /δ HTTP/1.1\r\n\r\n".as_bytes(), &mut head, 100, 8192),
            Err(HeadError::NonAsciiTarget)
        );
        assert_eq!(
            parse_request(
                b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\n\r\n",
                &mut head,
                1,
                8192
            ),
            Err(HeadError::TooManyFields)
        );
    }

    #[test]
    fn a_target_is_in_a_form_of_rfc_9112_and_its_fragment_is_cut_off() {
        let mut head = RequestHead::default();
        let target = |line: &str, head: &mut RequestHead| {
            let text = format!("{line}\r\nHost: x\r\n\r\n");
            parse_request(text.as_bytes(), head, 100, 8192)
                .map(|_| String::from_utf8_lossy(head.target.of(text.as_bytes())).into_owned())
        };
        for (line, kept) in [
            ("GET /a/b?c=d HTTP/1.1", "/a/b?c=d"),
            ("GET /t?page=1#posts-17 HTTP/1.1", "/t?page=1"),
            ("GET /#x HTTP/1.1", "/"),
            (
                "GET /{\"a\"}|^[0]?q={`|^[]} HTTP/1.1",
                "/{\"a\"}|^[0]?q={`|^[]}",
            ),
            ("OPTIONS * HTTP/1.1", "*"),
            ("GET http://h/a HTTP/1.1", "http://h/a"),
            ("CONNECT h:443 HTTP/1.1", "h:443"),
        ] {
            assert_eq!(target(line, &mut head), Ok(kept.to_owned()), "{line}");
        }
        for line in [
            "GET /a<b HTTP/1.1",
            "GET /a`b HTTP/1.1",
            "GET /a?b=\"c\" HTTP/1.1",
            "GET /a?b>c HTTP/1.1",
            "GET ! HTTP/1.1",
            "GET h:80 HTTP/1.1",
            "GET a/b HTTP/1.1",
        ] {
            assert!(
                matches!(target(line, &mut head), Err(HeadError::Invalid(_))),
                "{line}"
            );
        }
    }

    #[test]
    fn a_response_head_is_parsed_the_same_way() {
        let buf = b"HTTP/1.1 204 No Content\r\nVia: 1.1 a\r\n\r\n";
        let mut head = ResponseHead::default();
        assert_eq!(parse_response(buf, &mut head, 100, 8192), Ok(true));
        assert_eq!((head.status, head.minor, head.len), (204, 1, buf.len()));
        assert!(parse_response(b"HTTP/1.1 2000 OK\r\n\r\n", &mut head, 100, 8192).is_err());
        // Found by the fuzz target: `000` was status 0, framed as a bodiless 1xx.
        for status in ["000", "099", "042"] {
            let text = format!("HTTP/1.1 {status} X\r\nContent-Length: 3\r\n\r\nabc");
            assert_eq!(
                parse_response(text.as_bytes(), &mut head, 100, 8192),
                Err(HeadError::Invalid("status code below 100")),
                "{text}"
            );
        }
        let text = b"HTTP/1.1 100 Continue\r\n\r\n";
        assert_eq!(parse_response(text, &mut head, 100, 8192), Ok(true));
        assert_eq!(head.status, 100);
    }
}
