//! The answers the router writes itself to an HTTP/1.x client on the own engine: `100
//! Continue`, a problem+json refusal, a whole answer it made (a merged fan-out page), each
//! with its length, the request id and `Date`.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use super::RequestId;
use crate::http1::write;
use crate::problem::Problem;
use crate::relay::{write_all, Buffered};

/// The status's reason phrase (RFC 9110 §15; empty for an unknown code, RFC 9112 §4).
pub(super) fn reason(status: u16) -> &'static [u8] {
    http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("")
        .as_bytes()
}

/// Writes `100 Continue` to a client that waits for it (`*expect`), once; false if the
/// client was gone.
pub(super) async fn send_continue<S>(
    client: &mut Buffered<S>,
    expect: &mut bool,
    idle: Duration,
) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if !std::mem::take(expect) {
        return true;
    }
    write_all(&mut client.io, b"HTTP/1.1 100 Continue\r\n\r\n", idle)
        .await
        .is_ok()
}

/// Writes a problem+json answer to the client; false if the client was gone.
pub(super) async fn write_problem<S>(
    client: &mut Buffered<S>,
    problem: Problem,
    id: &RequestId,
    close: bool,
    idle: Duration,
) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    write_response(client, problem.into_response(), id, close, idle).await
}

/// Writes an answer the router made whole (a refusal, a merged fan-out page) to the
/// client, with its length, the request id and `Date`; false if the client was gone.
pub(super) async fn write_response<S>(
    client: &mut Buffered<S>,
    resp: http::Response<http_body_util::Full<bytes::Bytes>>,
    id: &RequestId,
    close: bool,
    idle: Duration,
) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    use futures_util::FutureExt;
    use http_body_util::BodyExt;
    let status = resp.status();
    let mut wire = Vec::with_capacity(512);
    write::status_line(&mut wire, status.as_u16(), reason(status.as_u16()));
    for (name, value) in resp.headers() {
        write::field(&mut wire, name.as_str().as_bytes(), value.as_bytes());
    }
    let body = match resp.into_body().collect().now_or_never() {
        Some(Ok(collected)) => collected.to_bytes(),
        _ => bytes::Bytes::new(),
    };
    wire.extend_from_slice(b"content-length: ");
    write::decimal(&mut wire, body.len() as u64);
    wire.extend_from_slice(b"\r\n");
    write::field(&mut wire, b"x-request-id", id.as_bytes());
    // The router's own answer: an origin server with a clock sends `Date` (RFC 9110 §6.6.1).
    write::field(&mut wire, b"date", &crate::clock::http_date());
    if close {
        write::field(&mut wire, b"connection", b"close");
    }
    wire.extend_from_slice(b"\r\n");
    wire.extend_from_slice(&body);
    write_all(&mut client.io, &wire, idle).await.is_ok()
}
