//! A refusal as a gRPC client reads it (docs/tls-h2-grpc.md): the status code for its HTTP
//! status, in a trailers-only answer.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::Full;

use super::RouterMade;

/// The gRPC status code for a refusal's HTTP status (docs/tls-h2-grpc.md; gRPC's `statuscodes.md`):
/// 400 → 3 INVALID_ARGUMENT, 404 → 5 NOT_FOUND, 413 and 429 → 8 RESOURCE_EXHAUSTED, 502/503 → 14
/// UNAVAILABLE, 504 → 4 DEADLINE_EXCEEDED, 508 → 10 ABORTED; beyond that list, 405/501
/// → 12 UNIMPLEMENTED, 408 → 4 DEADLINE_EXCEEDED, anything else 2 UNKNOWN.
pub fn grpc_code(status: StatusCode) -> u8 {
    match status.as_u16() {
        400 => 3,
        404 => 5,
        413 | 429 => 8,
        502 | 503 => 14,
        504 | 408 => 4,
        508 => 10,
        405 | 501 => 12,
        _ => 2,
    }
}

/// The HTTP status a gRPC answer's `grpc-status` stands for, as `google.rpc.Code` maps them
/// (OK → 200, INVALID_ARGUMENT → 400, NOT_FOUND → 404, UNAVAILABLE → 503, …): what a gRPC
/// answer is counted as in `iuid_router_requests_total{status}` (docs/metrics.md), since
/// its HTTP status is 200 whatever happened. `None`: no `grpc-status` in `headers` (it
/// comes in trailers, after the head).
pub fn counted_status(headers: &http::HeaderMap) -> Option<u16> {
    let code: u8 = headers.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    Some(match code {
        0 => 200,
        1 => 499,
        3 | 9 | 11 => 400,
        4 => 504,
        5 => 404,
        6 | 10 => 409,
        7 => 403,
        8 => 429,
        12 => 501,
        14 => 503,
        16 => 401,
        _ => 500,
    })
}

/// A refusal as gRPC sees it: HTTP 200, trailers-only (`grpc-status`, `grpc-message`
/// percent-encoded as the gRPC HTTP/2 protocol asks), no body.
pub fn grpc_response(made: &RouterMade) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::new()));
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/grpc"),
    );
    headers.insert(
        "grpc-status",
        HeaderValue::from(u16::from(grpc_code(made.status))),
    );
    let mut message = String::with_capacity(made.detail.len());
    for b in made.detail.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            message.push(char::from(b));
        } else {
            message.push_str(&format!("%{b:02X}"));
        }
    }
    if let Ok(v) = HeaderValue::from_str(&message) {
        headers.insert("grpc-message", v);
    }
    if let Some(ms) = made.retry_after_ms {
        // The client's retry policy waits this long before it tries again (gRFC A6).
        headers.insert("grpc-retry-pushback-ms", HeaderValue::from(ms));
    }
    resp
}
