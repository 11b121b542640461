//! The own HTTP/1.x engine's connection loop, every HTTP/1.x client connection's, plain or
//! TLS with ALPN `http/1.1` (or none): read a request head within the header read timeout,
//! let `Proxy::h1` carry the request, and go on with the next one while the connection is
//! kept alive. A connection whose first bytes are HTTP/2's preface (h2c with prior
//! knowledge, TLS without ALPN) goes to hyper's HTTP/2 server, those bytes read again there.
//!
//! An idle connection holds no buffer: the loop waits for the socket to become readable
//! before taking one from the worker's cache (`http1::conn`), and gives it back as soon as
//! nothing is pending.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use super::announce::{self, Protocol, Rewind};
use super::{Conn, Settings, Shared};
use crate::http1::head::{parse_request, HeadError, RequestHead};
use crate::problem::Problem;
use crate::proxy::h1::Outcome;
use crate::relay::Buffered;

/// A client connection the own engine serves: plain TCP, or TLS.
pub(super) trait ClientIo:
    AsyncRead + AsyncWrite + Unpin + Send + Sync + crate::relay::Readiness + 'static
{
    /// Polls until the connection has bytes to read, without holding a buffer and without
    /// state of its own (the socket keeps the waker): `Ready(Ok(true))`. `Ready(Ok(false))`:
    /// it cannot tell (TLS may hold decrypted bytes already), the caller reads.
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<bool>>;

    /// Whether closing takes a message first (TLS's `close_notify`, RFC 8446 §6.1), so the
    /// connection is shut down before it is dropped. A plain socket is just closed: the
    /// kernel sends its FIN after what was written, and a `shutdown` before the `close`
    /// would be one more system call per connection for nothing.
    const CLOSE_NOTIFY: bool;
}

/// The TCP socket's readiness: what rustls holds already is read when the socket next is.
impl crate::relay::Readiness for tokio_rustls::server::TlsStream<TcpStream> {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        self.get_ref().0.poll_read_ready(cx)
    }
}

impl ClientIo for tokio_rustls::server::TlsStream<TcpStream> {
    const CLOSE_NOTIFY: bool = true;

    /// Decrypted bytes rustls holds already (or the peer's close, or a broken record):
    /// read at once. Else the TCP socket's readiness, with no buffer held: an idle TLS
    /// connection waited in a read with a 16 KiB buffer of its own before (`bench/idle.py`,
    /// TLS HTTP/1.1: 20.9 KiB per idle connection against nginx's 15.0). A readable socket
    /// is read without waiting (`read_now`): what came may be TLS's own (a key update) or a
    /// part of a record, and the wait goes on without the buffer.
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<bool>> {
        match self.get_mut().1.process_new_packets() {
            Ok(state) if state.plaintext_bytes_to_read() == 0 && !state.peer_has_closed() => {}
            _ => return Poll::Ready(Ok(false)),
        }
        self.get_ref().0.poll_read_ready(cx).map_ok(|()| true)
    }
}

/// Where a connection's state (`Conn`) comes from.
pub(super) enum Start {
    /// Made before (TLS: with the client's certificate); the caller counts the connection
    /// open.
    Made(Box<Conn>),
    /// A plain connection just accepted: its state is made from the listener's when the
    /// first bytes come, and until then its task holds its socket, a timer and a drain
    /// waiter alone (one that never sends a request costs that and its socket's
    /// registration). It counts itself open.
    Plain(Arc<Shared>, SocketAddr),
}

/// Serves an HTTP/1.1 connection until it closes, is idle for too long, or the listener
/// drains. `sniff`: its first bytes may be HTTP/2's preface (h2c, or TLS without ALPN),
/// then served by hyper's HTTP/2; with ALPN `http/1.1` they are HTTP/1.1 whatever they are.
///
/// This future is an idle connection's task, so it is kept small: the request's future is
/// boxed, and the idle wait is one future for its three sources. The connection's state
/// lives in it, not in a box of its own: in a burst, a box made as each connection's first
/// request starts sat between that request's short-lived allocations and kept their
/// freed memory from going back to the OS (`bench/idle.py` burst of 3,000: 2.3–3.0 KiB
/// per idle connection after, 1.8–2.8 without the box and with the caches' shrink).
///
/// Not an `async fn`: an async fn keeps its arguments beside the locals they are moved to.
#[allow(clippy::manual_async_fn)] // on purpose: see above
pub(super) fn serve<S: ClientIo>(
    start: Start,
    mut client: Buffered<S>,
    sniff: bool,
) -> impl Future<Output = ()> + Send {
    async move {
        let _open = match &start {
            Start::Plain(shared, _) => Some(shared.open.clone()),
            Start::Made(_) => None,
        };
        if let (Start::Plain(shared, _), true) = (&start, client.pending().is_empty()) {
            let settings = &shared.settings;
            if !next_bytes(&mut client, settings.header_timeout, settings).await {
                return;
            }
        }
        let conn = match start {
            Start::Made(conn) => *conn,
            Start::Plain(shared, addr) => shared.conn(addr),
        };
        // Between requests: the idle timeout; before the first, the header read timeout.
        let mut kept_alive = false;
        // Until the first bytes tell HTTP/1.1 from HTTP/2 with prior knowledge (h2c).
        let mut first = sniff;
        loop {
            let settings = &conn.settings;
            let wait = if kept_alive {
                settings.idle
            } else {
                settings.header_timeout
            };
            if client.pending().is_empty() && !next_bytes(&mut client, wait, settings).await {
                return;
            }
            // Not live across the idle wait above, so the idle task has no room for it.
            let mut head = RequestHead::default();
            let max_bytes = conn.proxy.config().limits.max_header_bytes.max(8192);
            let deadline = tokio::time::Instant::now() + conn.settings.header_timeout;
            let parsed = loop {
                let http1 = !first
                    || match announce::decide(client.pending()) {
                        Some(Protocol::Http2) => {
                            return Box::pin(handoff_h2(Box::new(conn), client)).await
                        }
                        Some(Protocol::Http1) => {
                            first = false;
                            true
                        }
                        // A prefix of HTTP/2's preface (or nothing yet): read on.
                        None => false,
                    };
                if http1 {
                    if head.fields.capacity() == 0 {
                        head.fields = crate::relay::take_fields();
                    }
                    let max_fields = conn.proxy.config().limits.max_headers;
                    match parse_request(client.pending(), &mut head, max_fields, max_bytes) {
                        Ok(true) => break Ok(()),
                        Ok(false) => {}
                        Err(e) => break Err(e),
                    }
                }
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                match client.fill(left, max_bytes).await {
                    Ok(0) => return,
                    Ok(_) => {}
                    // A slow or silent client (slowloris): closed, as nginx does.
                    Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return,
                    Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
                        break Err(HeadError::TooLarge)
                    }
                    Err(_) => return,
                }
            };
            let idle = conn.proxy.config().timeouts.idle();
            if let Err(e) = parsed {
                Box::pin(refuse_head(&mut client, e, idle)).await;
                return;
            }
            let draining = *conn.draining.borrow();
            // Boxed: the request's future (its relays and timers) lives only while a request
            // does.
            let outcome = Box::pin(conn.proxy.h1(&mut client, &head, &conn.addr, draining)).await;
            // An idle connection holds no field list either.
            crate::relay::give_fields(std::mem::take(&mut head.fields));
            match outcome {
                Outcome::KeepAlive if !draining => kept_alive = true,
                Outcome::KeepAlive | Outcome::Close => {
                    if S::CLOSE_NOTIFY {
                        let _ = Box::pin(tokio::io::AsyncWriteExt::shutdown(&mut client.io)).await;
                    }
                    return;
                }
            }
        }
    }
}

/// Waits (at most `within`) for the client's next bytes and reads what is there, holding
/// no buffer while it waits. `false`: the connection is done (closed, silent for `within`,
/// or the listener drains with `Drain::CloseIdle`).
///
/// One future for the three sources: the socket's readiness (its waker kept by the
/// socket), one timer, and the drain's `Notify` (`Settings::drain`). tokio takes a new
/// socket for readable until a read says otherwise, so readiness is confirmed by a read
/// without waiting (the read the parse needs anyway); nothing there, the wait goes on.
async fn next_bytes<S: ClientIo>(
    client: &mut Buffered<S>,
    within: Duration,
    settings: &Settings,
) -> bool {
    let drain = settings.drain.notified();
    let mut drain = std::pin::pin!(drain);
    drain.as_mut().enable();
    if settings.close_idle() {
        return false;
    }
    let timer = tokio::time::sleep(within);
    let mut timer = std::pin::pin!(timer);
    loop {
        let ready = std::future::poll_fn(|cx| {
            if drain.as_mut().poll(cx).is_ready() {
                return Poll::Ready(None);
            }
            if let Poll::Ready(ready) = ClientIo::poll_readable(&mut client.io, cx) {
                return Poll::Ready(ready.ok());
            }
            match timer.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        let read = match ready {
            None => return false,
            Some(true) => match client.read_now(true).await {
                Some(read) => read,
                None => continue,
            },
            // TLS: read, within what is left of the wait (boxed: a plain connection's
            // task is not sized for it).
            Some(false) => {
                let left = timer
                    .deadline()
                    .saturating_duration_since(tokio::time::Instant::now());
                let read = Box::pin(client.fill(left, usize::MAX));
                tokio::select! {
                    read = read => read,
                    () = drain.as_mut() => return false,
                }
            }
        };
        match read {
            Ok(0) => return false,
            Ok(_) => return true,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            Err(_) => return false,
        }
    }
}

/// Answers a head the codec refused (400, or 431 when it is too large) and closes.
async fn refuse_head<S: ClientIo>(client: &mut Buffered<S>, e: HeadError, idle: Duration) {
    let problem = match e {
        HeadError::TooLarge | HeadError::TooManyFields => Problem::HeadTooLarge,
        HeadError::NonAsciiTarget => Problem::BadTarget,
        HeadError::Invalid(why) => Problem::BadHead(why),
    };
    crate::proxy::h1::refuse(client, problem, idle).await;
}

/// Serves the rest of the connection with hyper's HTTP/2 (an h2c client with prior
/// knowledge, or TLS without ALPN), the pending bytes first.
fn handoff_h2<S: ClientIo>(conn: Box<Conn>, client: Buffered<S>) -> impl Future<Output = ()> {
    let Buffered { io, buf, start } = client;
    let rewind = Rewind::with_bytes(io, buf, start);
    conn.serve_h2(rewind)
}
