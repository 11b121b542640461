//! The answers the router writes itself to an HTTP/1.x client on the own engine: `100
//! Continue`, a problem+json refusal, a whole answer it made (a merged fan-out page), each
//! with its length, the request id and `Date`.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};

use futures_util::FutureExt;
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::StatusCode;
use http_body::Body as _;
use http_body_util::BodyExt;

use crate::error::{Error, ErrorKind};
use crate::http1::{write, Framing, FramingError};
use crate::metrics;
use crate::problem::Problem;
use crate::proxy::request_id::RequestId;
use crate::proxy::upgrade::UpstreamUpgrade;
use crate::proxy::ProxyBody;
use crate::relay::{self, RelayError};
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
    alt_svc: Option<&http::HeaderValue>,
) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    write_response(client, problem.into_response(), id, close, idle, alt_svc).await
}

/// Writes an answer the router made whole (a refusal, a merged fan-out page) to the
/// client, with its length, the request id and `Date` (an origin server with a clock sends
/// it, RFC 9110 §6.6.1); false if the client was gone.
pub(super) async fn write_response<S>(
    client: &mut Buffered<S>,
    mut resp: http::Response<http_body_util::Full<bytes::Bytes>>,
    id: &RequestId,
    close: bool,
    idle: Duration,
    alt_svc: Option<&http::HeaderValue>,
) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    id.stamp(resp.headers_mut());
    let resp = resp.map(http_body_util::Either::Right);
    // Boxed: a refusal's rare path, and the streaming writer's future would otherwise size
    // every head path request's future for it (measured: +1,100 instructions per REST
    // request in copies of it).
    let writing = Box::pin(write_answer(
        &mut client.io,
        resp,
        false,
        false,
        close,
        idle,
        alt_svc,
    ));
    let (written, _) = writing.await;
    written.is_ok()
}

/// Whether the connection can go on after an answer.
pub(super) enum Kept {
    Alive,
    Closing,
}

/// Writes an answer in `http` form, the shared phases' or one the router made: its head
/// under RFC 9112's framing rules for the client's version, then its body as it comes.
/// The upstream's side of a `101` comes back to be tunnelled. The one writer of an `http`
/// answer on the own engine (the head path relays an upstream's answer as bytes,
/// `respond.rs`). `alt_svc`: HTTP/3's announcement (docs/http3.md), added when given.
pub(super) async fn write_answer<W: AsyncWrite + Unpin>(
    to: &mut W,
    mut resp: http::Response<ProxyBody>,
    http10: bool,
    head_request: bool,
    close: bool,
    idle: Duration,
    alt_svc: Option<&http::HeaderValue>,
) -> (Result<Kept, RelayError>, Option<UpstreamUpgrade>) {
    if let Some(alt_svc) = alt_svc {
        resp.headers_mut()
            .insert(http::header::ALT_SVC, alt_svc.clone());
    }
    let status = resp.status();
    let upgrade = match status == StatusCode::SWITCHING_PROTOCOLS {
        true => resp.extensions_mut().remove::<UpstreamUpgrade>(),
        false => None,
    };
    if status == StatusCode::SWITCHING_PROTOCOLS && (upgrade.is_none() || http10) {
        // The phases let a 101 through only to an upgrade they forwarded.
        let failed = RelayError::Write {
            error: None,
            timed_out: false,
        };
        return (Err(failed), None);
    }
    let no_body = head_request
        || status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    let headers = resp.headers_mut();
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    headers.remove(TRANSFER_ENCODING);
    let length = declared.or(resp.body().size_hint().exact());
    let framing = match (no_body, length) {
        (true, _) => Framing::Empty,
        (false, Some(n)) => Framing::Length(n),
        (false, None) if http10 => Framing::Close,
        (false, None) => Framing::Chunked,
    };
    let close = close || framing == Framing::Close;
    let headers = resp.headers_mut();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        headers.remove(CONNECTION);
    }
    if !no_body || declared.is_none() {
        headers.remove(CONTENT_LENGTH);
    }
    let mut wire = Vec::with_capacity(512);
    let reason = status.canonical_reason().unwrap_or("").as_bytes();
    write::status_line_for(
        &mut wire,
        if http10 { 0 } else { 1 },
        status.as_u16(),
        reason,
    );
    for (name, value) in resp.headers() {
        write::field(&mut wire, name.as_str().as_bytes(), value.as_bytes());
    }
    if !resp.headers().contains_key(DATE) {
        write::field(&mut wire, b"date", &crate::clock::http_date());
    }
    match framing {
        Framing::Length(n) if !no_body => {
            wire.extend_from_slice(b"content-length: ");
            write::decimal(&mut wire, n);
            wire.extend_from_slice(b"\r\n");
        }
        Framing::Chunked => write::field(&mut wire, b"transfer-encoding", b"chunked"),
        _ => {}
    }
    match (close, http10) {
        _ if status == StatusCode::SWITCHING_PROTOCOLS => {}
        (true, false) => write::field(&mut wire, b"connection", b"close"),
        (false, true) => write::field(&mut wire, b"connection", b"keep-alive"),
        _ => {}
    }
    wire.extend_from_slice(b"\r\n");
    let mut body = resp.into_body();
    // The head goes with the first frame when that one is there already (one write, as
    // hyper's server sends them); otherwise alone, at once (a stream's head is not held
    // back until its first bytes).
    let mut ready = match framing {
        Framing::Empty => None,
        _ => body.frame().now_or_never(),
    };
    let mut head = Some(wire);
    if ready.is_none() {
        if let Some(wire) = head.take() {
            if let Err(e) = relay::write_all(to, &wire, idle).await {
                return (Err(e), None);
            }
        }
        if framing == Framing::Empty {
            let kept = if close { Kept::Closing } else { Kept::Alive };
            return (Ok(kept), upgrade);
        }
    }
    let mut sent = 0u64;
    loop {
        let frame = match ready.take() {
            Some(frame) => frame,
            None => body.frame().await,
        };
        let frame = match frame {
            None => break,
            // The upstream's body broke: the answer is left incomplete, and closed.
            Some(Err(_)) => return (Ok(Kept::Closing), None),
            Some(Ok(frame)) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers: not carried to an HTTP/1.x client
        };
        if data.is_empty() {
            continue;
        }
        sent += data.len() as u64;
        let mut prefix = head.take().unwrap_or_default();
        let written = match framing {
            Framing::Chunked => {
                prefix.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
                relay::write_two(to, &prefix, &data, idle)
                    .await
                    .and(relay::write_all(to, b"\r\n", idle).await)
            }
            Framing::Length(n) if sent > n => return (Ok(Kept::Closing), None),
            _ if prefix.is_empty() => relay::write_all(to, &data, idle).await,
            _ => relay::write_two(to, &prefix, &data, idle).await,
        };
        if let Err(e) = written {
            return (Err(e), None);
        }
    }
    // What is left: the head of an answer with no data, and the chunked coding's end.
    let mut rest = head.take().unwrap_or_default();
    if framing == Framing::Chunked {
        rest.extend_from_slice(b"0\r\n\r\n");
    }
    if !rest.is_empty() {
        if let Err(e) = relay::write_all(to, &rest, idle).await {
            return (Err(e), None);
        }
    }
    if let Framing::Length(n) = framing {
        if sent != n {
            return (Ok(Kept::Closing), None);
        }
    }
    let kept = if close { Kept::Closing } else { Kept::Alive };
    (Ok(kept), upgrade)
}

/// The problem for a request whose framing the codec refused.
pub(super) fn framing_problem(e: FramingError) -> Problem {
    match e {
        FramingError::UnsupportedCoding => Problem::UnsupportedTransferCoding,
        e => {
            metrics::client_error(ErrorKind::BadFraming);
            Problem::Client(Error::new(ErrorKind::BadFraming, e.to_string()))
        }
    }
}

/// Whether the request's only expectation is `100-continue` (RFC 9110 §10.1.1), which the
/// head path answers itself; another is ignored, through the shared phases.
pub(super) fn expects_continue(buf: &[u8], head: &crate::http1::head::RequestHead) -> bool {
    let mut all = crate::http1::head::all(buf, &head.fields, b"expect");
    all.all(|v| v.trim_ascii().eq_ignore_ascii_case(b"100-continue"))
}

/// Answers a request head the codec refused (with a fresh request id); the caller then
/// closes the connection.
pub async fn refuse<S>(client: &mut Buffered<S>, problem: Problem, idle: std::time::Duration)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    write_problem(client, problem, &RequestId::fresh(), true, idle, None).await;
}
