//! The own engine's HTTP/1.1 exchange for requests in `http` form: what the shared phases
//! send to an HTTP/1.1 upstream (HTTP/2 and gRPC clients, fan-out legs, `nodes` splits,
//! legacy probes, the bridge's requests, health checks). The same pooled sockets as the
//! head path's ([`super::raw`]), with no connection task: the request's own task writes the
//! head and body and reads the answer's head; the answer's body ([`RawBody`]) reads the
//! socket when it is polled and checks the connection back in at its framed end.
//!
//! Why not hyper's client: a request waiting on a slow upstream held hyper's connection
//! task and its two 8 KiB buffers (~30 KiB, measured with `valgrind --tool=dhat`: 1,000
//! HTTP/2 streams waiting on a black hole); here it holds a socket and no buffer until the
//! answer starts to come (docs/overload.md). Requests that ask for an upgrade stay on
//! hyper's client, which hands over the switched connection.
//!
//! Framing is decided as the head path decides it (`http1::framing`, RFC 9112 §6): a
//! request body is sent by its `Content-Length` or chunked; an answer whose framing two
//! readers could disagree on is read to its end and its connection closed; a body cut
//! midway is an error, never an end.

use super::stale::StaleResend;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, Version};
use http_body::Body;
use http_body_util::{BodyExt, Either};

use super::body::Inbound;
use super::raw::{AnswerHead, RawConn};
use super::raw_body::RawBody;
use super::regions::{ConnectSlot, Connects};
use super::{connect_slot, Exchange, UpstreamBody, UpstreamState};
use crate::error::{Error, ErrorKind};
use crate::http1::head::ResponseHead;

use crate::http1::{framing, write, Framing};
use crate::relay::{self as conn, write_all, write_two};

/// Sends `req` (origin form, `Host` set) on a pooled or new connection and reads the
/// answer's head; its body streams from the connection afterwards. A pooled connection the
/// upstream closed as the request left is replaced by a new one once (`stale.rs`;
/// `resendable`: whether the request may be sent twice).
///
/// Errors: `Connect`; `Shed(PendingConnects)`; the client's body failing (reported through
/// its watch, which the caller reads first); else `Reset` (closed, reset, a head that is
/// not HTTP/1.1 or frames its body ambiguously) or `Timeout` (a write that made no progress
/// for `idle_ms`). The response-header timeout is the caller's.
pub(super) fn exchange<'a>(
    state: &'a Arc<UpstreamState>,
    req: Request<UpstreamBody>,
    connects: Option<Connects<'a>>,
    resendable: bool,
) -> impl Future<Output = Result<Response<Inbound>, Exchange>> + Send + 'a {
    // The head is made before the future: what the future keeps is what it needs while it
    // waits (rustc keeps an `async fn`'s arguments beside what they are moved into).
    let (mut parts, body) = req.into_parts();
    let head_request = parts.method == Method::HEAD;
    let (held, mut streamed) = match body {
        Either::Right(mut full) => (Some(held_bytes(&mut full)), None),
        Either::Left(streamed) => (None, Some(streamed)),
    };
    let ended = streamed.as_ref().is_none_or(|b| b.is_end_stream());
    let framing = request_framing(&mut parts, held.as_ref().map(|b| b.len() as u64), ended);
    // Kept past its write only while a stale pooled connection could make it go again: a
    // request waiting on its answer holds no head.
    let mut wire = Some(head_bytes(&parts));
    drop(parts);
    async move {
        let idle = state.timeouts.idle();
        let mut pooled = state.raw_pool().checkout(idle);
        let mut stale = StaleResend::new(held.is_some(), resendable);
        loop {
            let retried = stale.retried();
            let (mut up, reused) = next_conn(state, &mut pooled, retried, connects, idle).await?;
            stale.taken(reused);
            let Some(head) = wire.as_deref() else {
                let e = Error::new(ErrorKind::Reset, "the request head was not kept");
                return Err(e.into());
            };
            let written = match &held {
                Some(bytes) if !bytes.is_empty() => write_two(&mut up.io, head, bytes, idle).await,
                _ => write_all(&mut up.io, head, idle).await,
            };
            if written.is_err() && stale.after_write() {
                continue;
            }
            if !stale.may_resend() {
                wire = None;
            }
            written.map_err(|e| upload_error(&e))?;
            if let Some(body) = &mut streamed {
                upload(&mut up, body, framing, idle).await?;
                // The body's end (its drop) tells the caller the response-header timer starts.
                streamed = None;
            }
            let within = state.timeouts.response_headers();
            match read_head(&mut up, within, state.answer_head).await {
                Err(e) if stale.after_read(e.kind, up.pending().is_empty()) => continue,
                Err(e) => return Err(e.into()),
                Ok(head) => return answer(state, up, head, head_request).map_err(Exchange::Own),
            }
        }
    }
}

/// The bytes of a held body (a `Full` is ready at once).
fn held_bytes(full: &mut http_body_util::Full<Bytes>) -> Bytes {
    let mut cx = Context::from_waker(std::task::Waker::noop());
    match Pin::new(full).poll_frame(&mut cx) {
        Poll::Ready(Some(Ok(frame))) => frame.into_data().unwrap_or_default(),
        _ => Bytes::new(),
    }
}

/// The request's framing, its fields set to say it: a held body by its length (none for an
/// empty one, unless the method carries a body or a length was sent), a streamed one by its
/// `Content-Length` when it has one, else chunked. `Transfer-Encoding` is the router's to
/// set (RFC 9112 §6.1): whatever the client's hop said was decoded.
fn request_framing(parts: &mut http::request::Parts, held: Option<u64>, ended: bool) -> Framing {
    parts.headers.remove(TRANSFER_ENCODING);
    let length = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    match held {
        Some(n) => {
            let carries = matches!(parts.method, Method::POST | Method::PUT | Method::PATCH);
            if n > 0 || carries || length.is_some() {
                parts.headers.insert(CONTENT_LENGTH, HeaderValue::from(n));
                Framing::Length(n)
            } else {
                Framing::Empty
            }
        }
        None => match length {
            Some(n) => Framing::Length(n),
            None if ended => Framing::Empty,
            None => {
                parts
                    .headers
                    .insert(TRANSFER_ENCODING, HeaderValue::from_static("chunked"));
                Framing::Chunked
            }
        },
    }
}

/// `method SP origin-form SP HTTP/1.1`, then the fields (RFC 9112 §3, §5), in a buffer of
/// their size.
fn head_bytes(parts: &http::request::Parts) -> Vec<u8> {
    let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
    let fields: usize = parts
        .headers
        .iter()
        .map(|(n, v)| n.as_str().len() + v.len() + 4)
        .sum();
    let mut wire = Vec::with_capacity(parts.method.as_str().len() + target.len() + fields + 14);
    wire.extend_from_slice(parts.method.as_str().as_bytes());
    wire.push(b' ');
    wire.extend_from_slice(target.as_bytes());
    wire.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &parts.headers {
        write::field(&mut wire, name.as_str().as_bytes(), value.as_bytes());
    }
    wire.extend_from_slice(b"\r\n");
    wire
}

/// A streamed request body written by `framing`; its trailers are dropped (RFC 9110 §6.5.1:
/// a proxy may). Errors: the client's body failed (its watch says so; `Aborted` here), a
/// body longer than its `Content-Length` (the client's), or the upstream took nothing for
/// `idle` or failed (`Timeout`, `Reset`).
async fn upload<B>(
    up: &mut RawConn,
    body: &mut B,
    framing: Framing,
    idle: Duration,
) -> Result<(), Error>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut left = match framing {
        Framing::Length(n) => n,
        _ => u64::MAX,
    };
    let mut size = Vec::with_capacity(20);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Error::new(ErrorKind::Aborted, e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if data.is_empty() {
            continue;
        }
        if framing == Framing::Chunked {
            size.clear();
            size.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
            write_all(&mut up.io, &size, idle)
                .await
                .map_err(|e| upload_error(&e))?;
            write_two(&mut up.io, &data, b"\r\n", idle)
                .await
                .map_err(|e| upload_error(&e))?;
        } else {
            left = left.checked_sub(data.len() as u64).ok_or_else(|| {
                Error::new(
                    ErrorKind::BadFraming,
                    "the request body is longer than its Content-Length",
                )
            })?;
            write_all(&mut up.io, &data, idle)
                .await
                .map_err(|e| upload_error(&e))?;
        }
    }
    match framing {
        Framing::Chunked => write_all(&mut up.io, b"0\r\n\r\n", idle)
            .await
            .map_err(|e| upload_error(&e)),
        // Never completed on the other side: the connection is dropped unfinished.
        Framing::Length(_) if left > 0 => Err(Error::new(
            ErrorKind::BadFraming,
            "the request body ended before its Content-Length",
        )),
        _ => Ok(()),
    }
}

fn upload_error(e: &conn::RelayError) -> Error {
    let kind = match e {
        conn::RelayError::Write {
            timed_out: true, ..
        } => ErrorKind::Timeout,
        _ => ErrorKind::Reset,
    };
    Error::new(kind, format!("sending the request: {e}"))
}

/// Reads the final answer's head; `100 Continue` and other 1xx answers are dropped (the
/// shared phases relay none). No buffer is held until the answer starts to come.
async fn read_head(
    up: &mut RawConn,
    within: Duration,
    bounds: AnswerHead,
) -> Result<ResponseHead, Error> {
    let mut head = ResponseHead::default();
    let reset = |detail: String| Error::new(ErrorKind::Reset, detail);
    loop {
        if !up.pending().is_empty() {
            match bounds.parse(up, &mut head) {
                Ok(true) if (100..200).contains(&head.status) && head.status != 101 => {
                    up.consume(head.len);
                    continue;
                }
                Ok(true) => return Ok(head),
                Ok(false) => {}
                Err(e) => {
                    conn::give_fields(std::mem::take(&mut head.fields));
                    return Err(reset(format!("{e} from the upstream")));
                }
            }
        }
        let read = if up.buf.capacity() == 0 {
            wait_readable(up).await
        } else {
            up.fill(within, bounds.max_bytes).await
        };
        match read {
            Ok(0) => {
                conn::give_fields(std::mem::take(&mut head.fields));
                return Err(reset(
                    "the upstream closed the connection before a response".to_owned(),
                ));
            }
            Ok(_) => {}
            Err(e) => {
                conn::give_fields(std::mem::take(&mut head.fields));
                return Err(reset(format!("reading the response: {e}")));
            }
        }
    }
}

/// [`crate::relay::Buffered::fill_when_readable`] with no timer of its own (the caller's
/// response-header timeout bounds it).
async fn wait_readable(up: &mut RawConn) -> io::Result<usize> {
    loop {
        std::future::poll_fn(|cx| crate::relay::Readiness::poll_readable(&mut up.io, cx)).await?;
        if let Some(read) = up.read_now(false).await {
            return read;
        }
    }
}

/// The answer in `http` form: its fields as they came (hop-by-hop ones are the phases' to
/// drop), its body read from `up` by its framing.
fn answer(
    state: &Arc<UpstreamState>,
    mut up: RawConn,
    head: ResponseHead,
    head_request: bool,
) -> Result<Response<Inbound>, Error> {
    let reset = |detail: String| Error::new(ErrorKind::Reset, detail);
    let built = build(&up, &head, head_request);
    conn::give_fields(head.fields);
    let (resp, framing, reusable) = built.map_err(reset)?;
    up.consume(head.len);
    let body = RawBody::new(Arc::clone(state), up, framing, reusable);
    Ok(resp.map(|()| Inbound::Raw(Box::new(body))))
}

/// The response head in `http` form, the body's framing, and whether the connection can be
/// used again after it.
fn build(
    up: &RawConn,
    head: &ResponseHead,
    head_request: bool,
) -> Result<(Response<()>, Framing, bool), String> {
    let buf = up.pending();
    let status = StatusCode::from_u16(head.status)
        .map_err(|_| format!("status {} from the upstream", head.status))?;
    let (framing, exact) = framing::response_framing(buf, head, head_request)
        .map_err(|e| format!("{e:?} in the upstream's answer"))?;
    let mut headers = HeaderMap::with_capacity(head.fields.len());
    let mut close = head.minor == 0;
    for field in &head.fields {
        let name = HeaderName::from_bytes(field.name.of(buf))
            .map_err(|_| "a field name that is not a token from the upstream".to_owned())?;
        let value = HeaderValue::from_bytes(field.value.of(buf))
            .map_err(|_| "a field value with a control byte from the upstream".to_owned())?;
        if name == CONNECTION {
            let tokens = value.as_bytes().split(|b| *b == b',');
            for token in tokens.map(<[u8]>::trim_ascii) {
                if token.eq_ignore_ascii_case(b"close") {
                    close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") && head.minor == 0 {
                    close = false;
                }
            }
        }
        headers.append(name, value);
    }
    // Framed by `Transfer-Encoding` (RFC 9112 §6.3 rule 3): a length beside it is not passed on.
    if framing == Framing::Chunked && headers.contains_key(CONTENT_LENGTH) {
        headers.remove(CONTENT_LENGTH);
    }
    let mut resp = Response::new(());
    *resp.status_mut() = status;
    *resp.version_mut() = if head.minor == 0 {
        Version::HTTP_10
    } else {
        Version::HTTP_11
    };
    *resp.headers_mut() = headers;
    // After a `101` the connection speaks another protocol: never pooled.
    Ok((resp, framing, exact && !close && head.status != 101))
}

/// The connection for an attempt and whether it was used before: the pooled one taken
/// before the first attempt; after a stale pooled one (`retried`), a new one; else a new
/// one raced against one freed meanwhile, which is taken instead of waiting on the connect
/// (under load, hundreds of connects at once would each risk `connect_ms`; the new one is
/// then finished and pooled by its task, not dropped midway: a TLS handshake dropped so was
/// wasted on both sides, and the bench's UPSTREAM_TLS mode saw thousands a round). Both
/// the head path's exchange (`proxy::h1`) and the shared phases' (`exchange` here) take it.
///
/// Errors: `Connect`; `Shed(PendingConnects)` when the region has its limit of connections
/// being made.
pub async fn next_conn(
    state: &Arc<UpstreamState>,
    pooled: &mut Option<RawConn>,
    retried: bool,
    connects: Option<Connects<'_>>,
    idle: Duration,
) -> Result<(RawConn, bool), Error> {
    if let Some(up) = pooled.take() {
        return Ok((up, true));
    }
    let slot = connect_slot(connects)?;
    if retried {
        let conn = Box::pin(state.raw_connect()).await;
        drop(slot);
        return Ok((conn?, false));
    }
    // Boxed: a connect's future (TCP, then TLS) would otherwise take room in every waiting
    // request's, long after its connection was made.
    let mut connecting = Box::pin(connect_in_background(state, slot));
    tokio::select! {
        biased;
        connected = &mut connecting => Ok((connected?, false)),
        freed = state.raw_pool().freed(idle) => Ok((freed, true)),
    }
}

/// A new connection to an `https://` upstream, made on a task of its own: awaited, it is
/// the caller's; dropped before it is made (the caller took a freed connection), the task
/// still makes it and checks it into the calling worker's pool, as hyper-util's pool
/// finishes every connect it starts (dropped midway, a TLS handshake was wasted on both
/// sides). Errors: `Connect`.
///
/// A plain connect stays inline, dropped when overtaken: it costs a SYN, and a task each
/// would hold memory that requests waiting on a silent upstream keep (measured by
/// `tests/idle_memory.rs`: 2 KiB more per waiting request).
async fn connect_in_background(
    state: &Arc<UpstreamState>,
    slot: Option<ConnectSlot>,
) -> Result<RawConn, Error> {
    if !state.is_tls() {
        let conn = state.raw_connect().await;
        drop(slot);
        return conn;
    }
    let (made, connected) = tokio::sync::oneshot::channel();
    let upstream = Arc::clone(state);
    tokio::spawn(async move {
        let conn = upstream.raw_connect().await;
        drop(slot);
        if let Err(Ok(unwanted)) = made.send(conn) {
            upstream.raw_pool().checkin(unwanted);
        }
    });
    match connected.await {
        Ok(conn) => conn,
        Err(_) => Err(Error::new(
            ErrorKind::Connect,
            "connect failed: its task ended before the connection was made",
        )),
    }
}
