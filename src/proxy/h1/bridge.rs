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
use http::{StatusCode, Version};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};

use super::answer::{write_answer, Kept};
use super::Outcome;
use crate::http1::head::{RequestHead, Seen};
use crate::http1::{framing, Chunked, Framing};
use crate::proxy::headers::ClientAddr;
use crate::proxy::life::Life;
use crate::proxy::upgrade::{ClientUpgrade, UpstreamUpgrade};
use crate::proxy::Proxy;
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
        mut life: Life,
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
            .map_err(super::answer::framing_problem)
            .and_then(|framing| Ok((super::fanout::parts_of(buf, head, None)?, framing)));
        let (mut parts, framing) = match parts {
            Ok(made) => made,
            Err(problem) => {
                let status = problem.status().as_u16();
                life.refused(problem.slug());
                super::answer::write_problem(
                    client,
                    problem,
                    &life.id,
                    true,
                    idle,
                    self.alt_svc.as_ref(),
                )
                .await;
                life.finish(self, status);
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
        let body = Inbound::Own(body);

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
                let handling = self.carry(parts, body, addr, life);
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
                let writing = write_answer(
                    &mut write_half,
                    resp,
                    http10,
                    head_request,
                    close,
                    idle,
                    self.alt_svc.as_ref(),
                );
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
