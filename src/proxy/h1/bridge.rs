//! The own engine's way into the shared phases (`Proxy::handle`, the code HTTP/2 and gRPC
//! requests run) for the requests its head path (`Proxy::h1`) does not carry itself: an
//! upgrade (WebSocket), a target not in origin form, a gRPC route (refused over HTTP/1.1),
//! a legacy id to probe, a region reached over HTTP/2, a chunked GraphQL body or a `nodes`
//! split, a fan-out `GET` with a body. The connection stays on this engine: its codec
//! reads the request and writes the answer; only the phases are shared.
//!
//! The head is made into `http` parts, its body into an [`OwnBody`] fed from the
//! connection as the phases ask for it (decoded, its trailer section dropped, its end only
//! at its framing's end, so a body cut midway is never completed upstream). While the
//! phases run, the connection's read half feeds the body and its write half carries
//! `100 Continue` (when the body is first asked for) and then the answer: framed by its
//! length, chunked, or (to an HTTP/1.0 client) by the connection's close. A `101` answer
//! to an upgrade joins the two connections into a byte tunnel, closed after `idle_ms`
//! without a byte either way. An answer that comes before the request's body was read
//! whole ends its connection: the rest of the body is never read as a request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::problem::Shed;
use bytes::Bytes;
use futures_util::FutureExt;
use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
use http::{Request, StatusCode, Version};
use http_body::Body as _;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};

use super::{Outcome, RequestId};
use crate::http1::head::{RequestHead, Seen};
use crate::http1::{framing, write, Chunked, Framing};
use crate::proxy::headers::ClientAddr;
use crate::proxy::upgrade::{ClientUpgrade, UpstreamUpgrade};
use crate::proxy::{Proxy, ProxyBody};
use crate::relay::{self, Buffered, RelayError};
use crate::upstream::body::{Feed, Inbound, OwnBody};

impl Proxy {
    /// Serves one request whose head `head` starts `client.pending()` through the shared
    /// phases, end to end. `expect`: the client still waits for `100 Continue`.
    pub(super) async fn h1_bridge<S>(
        &self,
        client: &mut Buffered<S>,
        head: &RequestHead,
        addr: &ClientAddr,
        client_close: bool,
        expect: bool,
    ) -> Outcome
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        crate::metrics::http1_shared();
        let idle = self.config.timeouts.idle();
        let buf = client.pending();
        let http10 = head.minor == 0;
        let framing = match head.seen.has(Seen::FRAMING) {
            true => framing::request_framing(buf, head),
            false => Ok(Framing::Empty),
        };
        let parts = framing
            .map_err(super::framing_problem)
            .and_then(|framing| Ok((super::fanout::parts_of(buf, head, None)?, framing)));
        let (mut parts, framing) = match parts {
            Ok(made) => made,
            Err(problem) => {
                super::answer::write_problem(client, problem, &RequestId::fresh(), true, idle)
                    .await;
                return Outcome::Close;
            }
        };
        client.consume(head.len);
        parts.version = match http10 {
            true => Version::HTTP_10,
            false => Version::HTTP_11,
        };
        if head.seen.has(Seen::UPGRADE) {
            parts.extensions.insert(ClientUpgrade);
        }
        let head_request = parts.method == http::Method::HEAD;
        let polled = expect.then(|| Arc::new(Notify::new()));
        let (feed, body) = match framing {
            Framing::Length(n) => OwnBody::channel(Some(n), polled.clone()),
            Framing::Chunked => OwnBody::channel(None, polled.clone()),
            // A request has no close-delimited body (RFC 9112 §6.3).
            Framing::Empty | Framing::Close => OwnBody::channel(Some(0), None),
        };
        let req = Request::from_parts(parts, Inbound::Own(body));

        // The two halves of the client connection: the body read from one while the answer
        // is written to the other. The bytes read so far go with the read half.
        let (read_half, mut write_half) = tokio::io::split(&mut client.io);
        let mut reader = Buffered {
            io: read_half,
            buf: std::mem::take(&mut client.buf),
            start: client.start,
        };
        // Every way out puts the read half's buffer back on the connection.
        let outcome = 'carried: {
            let mut body_done = matches!(framing, Framing::Empty | Framing::Close);
            let mut body_failed = false;
            let mut continued = polled.is_none();
            let (written, upgrade) = {
                let handling = self.handle(req, addr);
                let pumping = pump(&mut reader, framing, feed, idle);
                let waiting = async {
                    match &polled {
                        Some(polled) => polled.notified().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::pin!(handling, pumping, waiting);
                let resp = loop {
                    tokio::select! {
                        resp = &mut handling => break Some(resp),
                        () = &mut waiting, if !continued => {
                            continued = true;
                            let line = b"HTTP/1.1 100 Continue\r\n\r\n";
                            if relay::write_all(&mut write_half, line, idle).await.is_err() {
                                break None;
                            }
                        }
                        pumped = &mut pumping, if continued && !body_done => {
                            body_done = true;
                            body_failed = pumped.is_err();
                        }
                    }
                };
                // `None`: the client is gone.
                let Some(resp) = resp else {
                    break 'carried Outcome::Close;
                };
                // A client still waiting for `100 Continue` sends no body: closed after.
                // A shed answer closes the connection, as on the head path (docs/overload.md).
                let close = client_close
                    || !continued
                    || resp.extensions().get::<Shed>().is_some()
                    || (resp.status() != StatusCode::SWITCHING_PROTOCOLS && body_failed);
                let writing =
                    write_answer(&mut write_half, resp, http10, head_request, close, idle);
                tokio::pin!(writing);
                // The answer goes while what is left of the body is still read (an upload the
                // upstream answers as it goes).
                loop {
                    tokio::select! {
                        written = &mut writing => break written,
                        pumped = &mut pumping, if continued && !body_done => {
                            body_done = true;
                            body_failed = pumped.is_err();
                        }
                    }
                }
            };
            if let (Ok(Kept::Alive), Some(upstream)) = (&written, upgrade) {
                tunnel(&mut reader, &mut write_half, upstream, idle).await;
                break 'carried Outcome::Close;
            }
            match written {
                Ok(Kept::Alive) if body_done && !body_failed && !client_close => Outcome::KeepAlive,
                _ => Outcome::Close,
            }
        };
        drop(write_half);
        client.buf = reader.buf;
        client.start = reader.start;
        outcome
    }
}

/// Feeds a request body of `framing` from `from` (its pending bytes first) to the phases,
/// decoded; the end is sent only at the framing's end. Errors: the client's framing broke,
/// it went away or fell silent for `idle` (the body fails with it), or the phases dropped
/// the body (the connection cannot go on past what was not read).
async fn pump<R: AsyncRead + Unpin>(
    from: &mut Buffered<R>,
    framing: Framing,
    feed: mpsc::Sender<Feed>,
    idle: Duration,
) -> Result<(), RelayError> {
    let result = pump_frames(from, framing, &feed, idle).await;
    match &result {
        Ok(()) => {
            let _ = feed.send(Feed::End).await;
        }
        Err(e) => {
            let kind = match e {
                RelayError::Framing(_) => std::io::ErrorKind::InvalidData,
                RelayError::Read {
                    timed_out: true, ..
                } => std::io::ErrorKind::TimedOut,
                _ => std::io::ErrorKind::UnexpectedEof,
            };
            let _ = feed.try_send(Feed::Failed(std::io::Error::new(kind, e.to_string())));
        }
    }
    result
}

async fn pump_frames<R: AsyncRead + Unpin>(
    from: &mut Buffered<R>,
    framing: Framing,
    feed: &mpsc::Sender<Feed>,
    idle: Duration,
) -> Result<(), RelayError> {
    let gone = || RelayError::Write {
        error: None,
        timed_out: false,
    };
    let send = async |data: &[u8]| {
        feed.send(Feed::Data(Bytes::copy_from_slice(data)))
            .await
            .map_err(|_| gone())
    };
    match framing {
        Framing::Empty | Framing::Close => Ok(()),
        Framing::Length(mut left) => {
            while left > 0 {
                relay::more(from, idle).await?;
                let pending = from.pending();
                let take = pending
                    .len()
                    .min(usize::try_from(left).unwrap_or(usize::MAX));
                send(&pending[..take]).await?;
                from.consume(take);
                left -= take as u64;
            }
            Ok(())
        }
        Framing::Chunked => {
            // Decoded: the data alone goes on; the trailer section is checked and dropped.
            let mut chunked = Chunked::decoding();
            while !chunked.is_done() {
                relay::more(from, idle).await?;
                let data = chunked.in_data();
                let progress = chunked.scan(from.pending()).map_err(RelayError::Framing)?;
                if data && progress.used > 0 {
                    send(&from.pending()[..progress.used]).await?;
                }
                from.consume(progress.used);
            }
            Ok(())
        }
    }
}

/// Whether the connection can go on after an answer.
enum Kept {
    Alive,
    Closing,
}

/// Writes the phases' answer: its head under RFC 9112's framing rules for the client's
/// version, then its body. The upstream's side of a `101` comes back to be tunnelled.
async fn write_answer<W: AsyncWrite + Unpin>(
    to: &mut W,
    mut resp: http::Response<ProxyBody>,
    http10: bool,
    head_request: bool,
    close: bool,
    idle: Duration,
) -> (Result<Kept, RelayError>, Option<UpstreamUpgrade>) {
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

/// Joins the client (what it sent after its upgrade request first) and the upstream's
/// switched connection into a byte tunnel, both ways, until both sides are done or neither
/// sent a byte for `idle`.
async fn tunnel<R, W>(
    client_read: &mut Buffered<R>,
    client_write: &mut W,
    upstream: UpstreamUpgrade,
    idle: Duration,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let upstream = match upstream.0.await {
        Ok(upgraded) => upgraded,
        Err(e) => {
            tracing::debug!(error = %e, "upgrade failed");
            return;
        }
    };
    let (mut up_read, mut up_write) = tokio::io::split(TokioIo::new(upstream));
    let start = tokio::time::Instant::now();
    let last = AtomicU64::new(0);
    let touch = || last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
    let upward = async {
        let pending = client_read.pending().len();
        if pending > 0 {
            up_write.write_all(client_read.pending()).await?;
            client_read.consume(pending);
        }
        let mut buf = vec![0; relay::BUFFER];
        loop {
            let n = client_read.io.read(&mut buf).await?;
            if n == 0 {
                return up_write.shutdown().await;
            }
            up_write.write_all(&buf[..n]).await?;
            touch();
        }
    };
    let downward = async {
        let mut buf = vec![0; relay::BUFFER];
        loop {
            let n = up_read.read(&mut buf).await?;
            if n == 0 {
                return client_write.shutdown().await;
            }
            client_write.write_all(&buf[..n]).await?;
            touch();
        }
    };
    let watchdog = async {
        loop {
            let at = start + Duration::from_millis(last.load(Ordering::Relaxed)) + idle;
            if tokio::time::Instant::now() >= at {
                return;
            }
            tokio::time::sleep_until(at).await;
        }
    };
    let both = async {
        let (up, down): (std::io::Result<()>, std::io::Result<()>) = tokio::join!(upward, downward);
        tracing::debug!(up = ?up.err(), down = ?down.err(), "tunnel closed");
    };
    tokio::select! {
        () = both => {}
        () = watchdog => tracing::debug!("tunnel idle; closed"),
    }
}
