//! How long a message body is (RFC 9112 §6.3), decided strictly: where two hops could read
//! a message's length differently, the message is refused instead of guessed at.

use super::head::{Field, RequestHead, ResponseHead};

/// A body's framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked` (RFC 9112 §7.1).
    Chunked,
    /// Until the connection closes (a response with neither length nor chunked, RFC 9112
    /// §6.3 rule 8): the upstream connection cannot be reused.
    Close,
}

/// Why a message's framing was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramingError {
    /// Both `Transfer-Encoding` and `Content-Length` (RFC 9112 §6.1: a request smuggling
    /// vector; refused rather than read by one of them).
    LengthAndChunked,
    /// `Content-Length` that is not 1*DIGIT, or several that differ (RFC 9110 §8.6).
    BadLength,
    /// `chunked` applied more than once (RFC 9112 §6.1).
    ChunkedTwice,
    /// `Transfer-Encoding` whose last coding is not `chunked` (`xchunked`, `chunked, gzip`,
    /// or no coding at all): a request's length cannot be told, RFC 9112 §6.3 rule 4 asks for
    /// 400 (hyper's engine answers so); a response is read until the close.
    ChunkedNotLast,
    /// A request's transfer coding other than `chunked` before it (`gzip, chunked`;
    /// RFC 9112 §6.1: 501 for a coding the server does not understand).
    UnsupportedCoding,
    /// `Transfer-Encoding` in an HTTP/1.0 message (RFC 9112 §6.1: faulty framing).
    CodingInHttp10,
}

impl std::fmt::Display for FramingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FramingError::LengthAndChunked => "both Transfer-Encoding and Content-Length",
            FramingError::BadLength => "Content-Length is invalid or given twice differently",
            FramingError::ChunkedTwice => "Transfer-Encoding names chunked more than once",
            FramingError::ChunkedNotLast => "Transfer-Encoding does not end with chunked",
            FramingError::UnsupportedCoding => "a transfer coding other than chunked",
            FramingError::CodingInHttp10 => "Transfer-Encoding in an HTTP/1.0 message",
        })
    }
}

/// What the framing fields of a head say, before the message kind's rules.
struct Fields {
    /// `Content-Length`'s value, if any (all lines and list entries agreeing).
    length: Option<u64>,
    /// `Transfer-Encoding` present (any value).
    coded: bool,
    /// The codings: chunked alone (`Ok(true)`), no `Transfer-Encoding` (`Ok(false)`).
    chunked: Result<bool, FramingError>,
}

fn read_fields(buf: &[u8], fields: &[Field]) -> Result<Fields, FramingError> {
    let mut length: Option<u64> = None;
    let mut coded = false;
    // The codings of every line, in order: how many are chunked, whether the last is, and
    // whether another is named.
    let (mut chunks, mut last_chunked, mut other) = (0, false, false);
    for field in fields {
        let name = field.name.of(buf);
        if name.eq_ignore_ascii_case(b"content-length") {
            // `1, 1` (a list of equal values) is allowed by RFC 9110 §8.6; anything else odd
            // is refused.
            for entry in field.value.of(buf).split(|&b| b == b',') {
                let n = parse_length(entry.trim_ascii()).ok_or(FramingError::BadLength)?;
                if length.is_some_and(|l| l != n) {
                    return Err(FramingError::BadLength);
                }
                length = Some(n);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            coded = true;
            for coding in field.value.of(buf).split(|&b| b == b',') {
                let coding = coding.trim_ascii();
                if coding.is_empty() {
                    continue;
                }
                last_chunked = coding.eq_ignore_ascii_case(b"chunked");
                chunks += usize::from(last_chunked);
                other |= !last_chunked;
            }
        }
    }
    // In the order hyper's engine refuses them (its parser, then `proxy::admit`), so both
    // engines answer alike: chunked not last (400), another coding (501), chunked twice (400).
    let chunked = match (coded, last_chunked, other, chunks) {
        (false, ..) => Ok(false),
        (true, false, ..) => Err(FramingError::ChunkedNotLast),
        (true, true, true, _) => Err(FramingError::UnsupportedCoding),
        (true, true, false, 1) => Ok(true),
        (true, true, false, _) => Err(FramingError::ChunkedTwice),
    };
    Ok(Fields {
        length,
        coded,
        chunked,
    })
}

/// `1*DIGIT`, at most 19 digits (no sign, no spaces, no hex).
fn parse_length(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(text.iter().fold(0u64, |n, &d| n * 10 + u64::from(d - b'0')))
}

/// A request's body framing (RFC 9112 §6.3 rules 3–6, strictly).
///
/// Errors: both `Transfer-Encoding` and `Content-Length`; a bad or conflicting length;
/// `chunked` not last; another coding (→ 501); `chunked` twice; `Transfer-Encoding` in
/// HTTP/1.0.
pub fn request_framing(buf: &[u8], head: &RequestHead) -> Result<Framing, FramingError> {
    let f = read_fields(buf, &head.fields)?;
    if f.coded {
        if head.minor == 0 {
            return Err(FramingError::CodingInHttp10);
        }
        if f.length.is_some() {
            return Err(FramingError::LengthAndChunked);
        }
        f.chunked?;
        return Ok(Framing::Chunked);
    }
    Ok(match f.length {
        Some(0) | None => Framing::Empty,
        Some(n) => Framing::Length(n),
    })
}

/// A response's body framing, given whether the request was `HEAD` (RFC 9112 §6.3 rules
/// 1–8). `Ok((framing, exact))`: `exact` is false when the response was framed in a way
/// another reader might not agree with (a body announced on a 204 or 304), and its connection
/// must not be reused.
///
/// A response with both `Transfer-Encoding` and `Content-Length` is framed by the former (RFC
/// 9112 §6.3 rule 3; the caller drops the length before forwarding) and its connection is
/// not reused.
///
/// Errors (the upstream's fault, 502): a bad or conflicting length, `chunked` twice, or
/// codings in an HTTP/1.0 response.
pub fn response_framing(
    buf: &[u8],
    head: &ResponseHead,
    head_request: bool,
) -> Result<(Framing, bool), FramingError> {
    let f = read_fields(buf, &head.fields)?;
    let bodiless = head_request || head.status < 200 || matches!(head.status, 204 | 304);
    if bodiless {
        // A HEAD answer's length describes the GET's body; a 204 or 304 with a framing of
        // its own is odd enough not to trust the connection after it.
        let odd = !head_request && (f.coded || f.length.is_some_and(|n| n > 0));
        return Ok((Framing::Empty, !odd));
    }
    if f.coded {
        if head.minor == 0 {
            return Err(FramingError::CodingInHttp10);
        }
        return match f.chunked {
            Ok(true) => Ok((Framing::Chunked, f.length.is_none())),
            // A coding without chunked last: the body runs to the close (rule 4).
            Ok(false) | Err(FramingError::UnsupportedCoding | FramingError::ChunkedNotLast) => {
                Ok((Framing::Close, false))
            }
            Err(e) => Err(e),
        };
    }
    Ok(match f.length {
        Some(0) => (Framing::Empty, true),
        Some(n) => (Framing::Length(n), true),
        None => (Framing::Close, false),
    })
}

#[cfg(test)]
mod tests {
    use super::super::head::{parse_request, parse_response};
    use super::*;

    fn req(text: &str) -> Result<Framing, FramingError> {
        let mut head = RequestHead::default();
        assert_eq!(
            parse_request(text.as_bytes(), &mut head, 100, 8192),
            Ok(true),
            "{text}"
        );
        request_framing(text.as_bytes(), &head)
    }

    fn resp(text: &str, head_request: bool) -> Result<(Framing, bool), FramingError> {
        let mut head = ResponseHead::default();
        assert_eq!(
            parse_response(text.as_bytes(), &mut head, 100, 8192),
            Ok(true),
            "{text}"
        );
        response_framing(text.as_bytes(), &head, head_request)
    }

    #[test]
    fn request_framing_is_strict() {
        assert_eq!(req("GET / HTTP/1.1\r\n\r\n"), Ok(Framing::Empty));
        assert_eq!(
            req("POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n"),
            Ok(Framing::Length(5))
        );
        assert_eq!(
            req("POST / HTTP/1.1\r\nContent-Length: 5, 5\r\nContent-Length: 5\r\n\r\n"),
            Ok(Framing::Length(5))
        );
        assert_eq!(
            req("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Ok(Framing::Chunked)
        );
        let bad = [
            (
                "Content-Length: 5\r\nContent-Length: 6",
                FramingError::BadLength,
            ),
            ("Content-Length: +5", FramingError::BadLength),
            ("Content-Length: 0x5", FramingError::BadLength),
            ("Content-Length: 5 5", FramingError::BadLength),
            (
                "Content-Length: 99999999999999999999",
                FramingError::BadLength,
            ),
            (
                "Transfer-Encoding: chunked\r\nContent-Length: 5",
                FramingError::LengthAndChunked,
            ),
            (
                "Transfer-Encoding: chunked, chunked",
                FramingError::ChunkedTwice,
            ),
            (
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
                FramingError::ChunkedTwice,
            ),
            (
                "Transfer-Encoding: gzip, chunked",
                FramingError::UnsupportedCoding,
            ),
            (
                "Transfer-Encoding: chunked, gzip",
                FramingError::ChunkedNotLast,
            ),
            ("Transfer-Encoding: xchunked", FramingError::ChunkedNotLast),
            (
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
                FramingError::ChunkedNotLast,
            ),
            ("Transfer-Encoding: ,", FramingError::ChunkedNotLast),
            (
                "Transfer-Encoding: gzip, chunked, chunked",
                FramingError::UnsupportedCoding,
            ),
        ];
        for (fields, error) in bad {
            assert_eq!(
                req(&format!("POST / HTTP/1.1\r\n{fields}\r\n\r\n")),
                Err(error),
                "{fields}"
            );
        }
        assert_eq!(
            req("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Err(FramingError::CodingInHttp10)
        );
    }

    #[test]
    fn response_framing_follows_the_request_and_status() {
        assert_eq!(
            resp("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", false),
            Ok((Framing::Length(3), true))
        );
        assert_eq!(
            resp("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n", true),
            Ok((Framing::Empty, true))
        );
        assert_eq!(
            resp("HTTP/1.1 200 OK\r\n\r\n", false),
            Ok((Framing::Close, false))
        );
        assert_eq!(
            resp("HTTP/1.1 204 No\r\n\r\n", false),
            Ok((Framing::Empty, true))
        );
        assert_eq!(
            resp("HTTP/1.1 204 No\r\nContent-Length: 4\r\n\r\n", false),
            Ok((Framing::Empty, false))
        );
        assert_eq!(
            resp(
                "HTTP/1.1 304 No\r\nTransfer-Encoding: chunked\r\n\r\n",
                false
            ),
            Ok((Framing::Empty, false))
        );
        assert_eq!(
            resp("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", false),
            Ok((Framing::Close, false))
        );
        assert_eq!(
            resp(
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: ,chunked\r\nContent-Length: 2\r\n\r\n",
                false
            ),
            Ok((Framing::Chunked, false))
        );
        assert_eq!(
            resp(
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n",
                false
            ),
            Err(FramingError::BadLength)
        );
    }
}
