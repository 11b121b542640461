//! The own HTTP/1.1 engine's connection loop (`http1_engine: own`), plain or TLS with ALPN
//! `http/1.1` (or none): read a request head
//! within the header read timeout, let `Proxy::h1` carry the request, and go on with the
//! next one while the connection is kept alive.
//!
//! An idle connection holds no buffer: the loop waits for the socket to become readable
//! before taking one from the worker's cache (`http1::conn`), and gives it back as soon as
//! nothing is pending. A request the engine hands back ([`Outcome::Handoff`]) continues the
//! connection under hyper's engine, the bytes read so far read again there.

use std::future::Future;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::watch;

use super::announce::{self, Protocol, Rewind};
use std::net::SocketAddr;
use std::sync::Arc;

use super::{Conn, Shared};
use crate::http1::head::{parse_request, HeadError, RequestHead};
use crate::problem::Problem;
use crate::proxy::h1::Outcome;
use crate::relay::Buffered;

/// A client connection the own engine serves: plain TCP, or TLS.
pub(super) trait ClientIo: AsyncRead + AsyncWrite + Unpin + Send + 'static {
    /// Waits until the connection has bytes to read, without holding a buffer: `Ok(true)`.
    /// `Ok(false)`: it cannot tell (TLS may hold decrypted bytes already), the caller reads.
    fn readable(&self) -> impl Future<Output = std::io::Result<bool>> + Send;
}

impl ClientIo for TcpStream {
    async fn readable(&self) -> std::io::Result<bool> {
        TcpStream::readable(self).await.map(|()| true)
    }
}

impl ClientIo for tokio_rustls::server::TlsStream<TcpStream> {
    async fn readable(&self) -> std::io::Result<bool> {
        Ok(false)
    }
}

/// A plain connection accepted on a worker, served by the own engine: `super::connection`'s
/// plain path without its others.
pub(super) async fn serve_plain(shared: Arc<Shared>, stream: TcpStream, client: SocketAddr) {
    let _open = shared.open.clone();
    let _counted = crate::memory::OpenConnection::start();
    let _ = stream.set_nodelay(true);
    let conn = shared.conn(client);
    drop(shared);
    serve(conn, stream, true).await
}

/// Serves an HTTP/1.1 connection until it closes, is idle for too long, or the listener
/// drains. `sniff`: its first bytes may be HTTP/2's preface (h2c, or TLS without ALPN),
/// then served by hyper's HTTP/2; with ALPN `http/1.1` they are HTTP/1.1 whatever they are.
pub(super) async fn serve<S: ClientIo>(conn: Conn, stream: S, sniff: bool) {
    let settings = conn.settings.clone();
    let mut draining = conn.draining.clone();
    let limits = &conn.proxy.config().limits;
    let (max_fields, max_bytes) = (limits.max_headers, limits.max_header_bytes.max(8192));
    let idle = conn.proxy.config().timeouts.idle();
    let mut client = Buffered::new(stream);
    let mut head = RequestHead::default();
    let mut wait = settings.header_timeout;
    // Until the first bytes tell HTTP/1.1 from HTTP/2 with prior knowledge (h2c).
    let mut first = sniff;
    loop {
        if client.pending().is_empty() {
            let waited = tokio::select! {
                ready = tokio::time::timeout(wait, client.io.readable()) => ready,
                _ = draining_now(&mut draining) => return,
            };
            match waited {
                Ok(Ok(true)) => {}
                // TLS: read, within the same wait.
                Ok(Ok(false)) => {
                    let read = tokio::select! {
                        read = client.fill(wait, max_bytes) => read,
                        _ = draining_now(&mut draining) => return,
                    };
                    if !matches!(read, Ok(n) if n > 0) {
                        return;
                    }
                }
                Ok(Err(_)) | Err(_) => return,
            }
        }
        let deadline = tokio::time::Instant::now() + settings.header_timeout;
        let parsed = loop {
            let http1 = !first
                || match announce::decide(client.pending()) {
                    Some(Protocol::Http2) => {
                        return Box::pin(handoff(conn, client, Protocol::Http2)).await
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
                // A slow or silent client (slowloris): closed, as hyper's engine does.
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return,
                Err(e) if e.kind() == std::io::ErrorKind::OutOfMemory => {
                    break Err(HeadError::TooLarge)
                }
                Err(_) => return,
            }
        };
        if let Err(e) = parsed {
            Box::pin(refuse_head(&mut client, e, idle)).await;
            return;
        }
        let draining_flag = *draining.borrow();
        // Boxed: the request's future (its relays and timers) lives only while a request
        // does, so an idle connection's task stays small.
        let outcome = Box::pin(conn.proxy.h1(&mut client, &head, &conn.addr, draining_flag)).await;
        // An idle connection holds no field list either.
        crate::relay::give_fields(std::mem::take(&mut head.fields));
        match outcome {
            Outcome::KeepAlive if !draining_flag => wait = idle,
            Outcome::KeepAlive | Outcome::Close => {
                let _ = tokio::io::AsyncWriteExt::shutdown(&mut client.io).await;
                return;
            }
            Outcome::Handoff => return Box::pin(handoff(conn, client, Protocol::Http1)).await,
        }
    }
}

/// Completes when the listener starts draining.
async fn draining_now(draining: &mut watch::Receiver<bool>) {
    if draining.wait_for(|d| *d).await.is_err() {
        std::future::pending::<()>().await;
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

/// Serves the rest of the connection with hyper's engine (HTTP/1.1, or HTTP/2 for an h2c
/// client), the pending bytes first.
async fn handoff<S: ClientIo>(conn: Conn, client: Buffered<S>, protocol: Protocol) {
    let Buffered { io, buf, start } = client;
    let rewind = Rewind::with_bytes(io, buf, start);
    conn.serve(protocol, rewind).await
}
