//! The public listener: accepts connections and serves their requests, until a shutdown
//! signal; then drains. HTTP/1.x connections are the own engine's (`h1`, `Proxy::h1`);
//! HTTP/2 ones hyper's HTTP/2 server's, each stream through [`Proxy::handle`].
//!
//! HTTP/1.x and HTTP/2 are both served on one port. Each connection's protocol is chosen
//! once: on a plain listener by its first bytes (HTTP/2 with prior knowledge, h2c, told by
//! the own engine's first read), with `tls:` (docs/tls-h2-grpc.md) by the protocol ALPN
//! negotiated, `h2` or `http/1.1`, whatever the client then sends (RFC 7301 §3.2, RFC 9113
//! §3.2), and by the first bytes only when ALPN chose none. The TLS handshake, and then the
//! first bytes, must each come within `limits.header_read_timeout_ms`.
//!
//! An HTTP/2 connection with no stream open for `timeouts.idle_ms` is closed with GOAWAY, and
//! a stream whose response makes no progress for `idle_ms` is reset (`h2`); an HTTP/1
//! client that reads nothing for `idle_ms` has its connection closed (`send_timeout`).
//!
//! Connections are accepted on the [`Workers`] themselves, each on a socket of its own in a
//! `SO_REUSEPORT` group (`accept`), or, for a listener bound without it, here on the caller's
//! runtime and handed to a worker; either way each is served on one worker for its whole
//! life (see `workers` for why).
//!
//! Shutdown order (docs/admin.md, for load balancers): the caller flips `/readyz` to 503 before the
//! `shutdown` future completes; then the listener is closed, so new connections are refused;
//! every open connection is told to finish: HTTP/1 connections close after the response in
//! progress (idle keep-alive ones at once), HTTP/2 ones send GOAWAY; requests in flight get
//! up to the grace period to complete.
//!
//! After a hand-over to a new process ([`Drain::Handover`], docs/upgrades.md) the listening
//! sockets stay open there, so nothing is refused; the drain is the same but for idle
//! HTTP/1 connections, which are kept for their next request (answered with
//! `Connection: close`) rather than closed under a client that may be sending: HTTP/1.1
//! has no GOAWAY to close one without that race.

mod accept;
mod announce;
mod h1;
mod h2;
pub mod h3;
mod plain;
mod waiting;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::config::RouterConfig;
use crate::metrics;
use crate::proxy::headers::ClientAddr;
use crate::proxy::Proxy;
use crate::send_timeout::SendTimeout;
use crate::upstream::body::Inbound;
use crate::workers::Workers;
use announce::Protocol;

/// How the listener drains once its `shutdown` future completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// `SIGTERM`/`SIGINT`: the listening sockets close (new connections are refused), idle
    /// HTTP/1 connections close at once.
    CloseIdle,
    /// The listening sockets were handed to a new process (docs/upgrades.md), which accepts
    /// on them now: this process only stops accepting, and an idle HTTP/1 connection is
    /// kept until its next request, answered with `Connection: close`, or its idle timeout.
    /// What is still open after `within` (`shutdown.drain_timeout_ms`) is cut.
    Handover {
        /// How long the connections may take to finish.
        within: Duration,
    },
}

/// Serves the listening sockets of `group` (one, or a `SO_REUSEPORT` group: [`group`]) on
/// `proxy.config().workers` worker threads until `shutdown` completes, then drains as it
/// says, for at most `grace` ([`Drain::CloseIdle`]) or the hand-over's own bound. With `tls`, connections are HTTPS. Call inside a tokio
/// runtime. With `quic`, HTTP/3 is served on the same port over UDP (`h3`, docs/http3.md).
///
/// Errors: the worker threads could not be started, a socket could not be registered, or
/// `quic`'s UDP port could not be bound.
pub async fn serve(
    group: Vec<std::net::TcpListener>,
    proxy: Arc<Proxy>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    quic: Option<h3::Quic>,
    shutdown: impl Future<Output = Drain>,
    grace: Duration,
) -> std::io::Result<()> {
    let group = group
        .into_iter()
        .map(|socket| {
            socket.set_nonblocking(true)?;
            TcpListener::from_std(socket)
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let workers = Workers::start(proxy.config().workers)?;
    let settings = Arc::new(Settings::new(proxy.config()));
    let drain_settings = settings.clone();
    // Each connection task holds a sender; when all are dropped, the drain is complete.
    let (draining_tx, draining_rx) = watch::channel(false);
    let (open_tx, mut open_rx) = mpsc::channel::<()>(1);
    tokio::pin!(shutdown);
    let shared = Arc::new(Shared {
        proxy,
        settings,
        tls,
        draining: draining_rx,
        open: open_tx,
    });
    if let Some(quic) = &quic {
        h3::start(quic, &workers, &shared)?;
    }
    // Accept on every worker (each its own socket of a SO_REUSEPORT group) when the listener
    // allows it; else here, handing each connection to a worker.
    let (listener, mut drain) = match accept::per_worker(group, &workers, &shared) {
        Ok(()) => (None, Some(shutdown.as_mut().await)),
        Err(listener) => (Some(listener), None),
    };
    if let Some(listener) = &listener {
        loop {
            let (stream, client) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                how = &mut shutdown => {
                    drain = Some(how);
                    break;
                }
            };
            // The socket moves to the worker's event loop: deregistered here, registered there.
            let stream = match stream.into_std() {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::debug!(%client, error = %e, "cannot hand the connection over");
                    continue;
                }
            };
            let shared = shared.clone();
            workers.spawn(async move {
                match TcpStream::from_std(stream) {
                    Ok(stream) => connection(&shared, stream, client, false).await,
                    Err(e) => {
                        tracing::debug!(%client, error = %e, "cannot register the connection")
                    }
                }
            });
        }
    }
    drop(listener);
    let drain = drain.unwrap_or(Drain::CloseIdle);
    tracing::info!(?drain, "listener closed; draining");
    let grace = match drain {
        Drain::CloseIdle => grace,
        Drain::Handover { within } => within,
    };
    if drain == Drain::CloseIdle {
        drain_settings.close_idle.store(true, Ordering::Release);
    }
    let _ = draining_tx.send(true);
    // The own engine's idle connections wait on this, not on the watch (`h1::next_bytes`).
    if drain == Drain::CloseIdle {
        drain_settings.drain.notify_waiters();
    }
    // Each accept loop drops its listener, and its hold on `shared`, when it sees the drain.
    drop(shared);
    if tokio::time::timeout(grace, open_rx.recv()).await.is_err() {
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            "grace period over; cutting the remaining connections"
        );
    }
    // Dropping the workers cuts whatever is left.
    drop(workers);
    Ok(())
}

/// What every accepted connection is served with.
struct Shared {
    proxy: Arc<Proxy>,
    settings: Arc<Settings>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    draining: watch::Receiver<bool>,
    /// Each connection holds a clone; when all are dropped, the drain is complete.
    open: mpsc::Sender<()>,
}

impl Shared {
    /// A new connection's state, for a client at `client`.
    fn conn(&self, client: SocketAddr) -> Conn {
        Conn {
            proxy: self.proxy.clone(),
            addr: match self.tls {
                Some(_) => ClientAddr::with_tls(client),
                None => ClientAddr::new(client),
            }
            .trusting(self.proxy.config().trusted_proxies.as_ref()),
            settings: self.settings.clone(),
            draining: self.draining.clone(),
            client,
        }
    }
}

/// Serves one accepted connection on the worker it was accepted on (or handed to).
/// `nodelay`: it has `TCP_NODELAY` from its listener already (`accept::nodelay`).
async fn connection(shared: &Arc<Shared>, stream: TcpStream, client: SocketAddr, nodelay: bool) {
    if !nodelay {
        let _ = stream.set_nodelay(true);
    }
    let Some(acceptor) = shared.tls.clone() else {
        // The own engine tells HTTP/2's preface from its first read itself (no peek) and
        // hands such a connection to hyper's HTTP/2.
        let start = h1::Start::Plain(shared.clone(), client);
        let stream = plain::PlainClient::from(stream);
        return h1::serve(start, crate::relay::Buffered::new(stream), true).await;
    };
    let _open = shared.open.clone();
    Box::pin(serve_tls(shared.conn(client), acceptor, stream, client)).await
}

/// A TLS connection: the handshake within the header read timeout, then the own engine
/// (ALPN `http/1.1`, or none: it tells HTTP/2's preface from the first bytes itself), or
/// hyper's HTTP/2 (ALPN `h2`).
async fn serve_tls(
    mut conn: Conn,
    acceptor: tokio_rustls::TlsAcceptor,
    stream: TcpStream,
    client: SocketAddr,
) {
    let header_timeout = conn.settings.header_timeout;
    // Boxed, as each branch after it: this future is every TLS connection's for its whole
    // life, and sized by its largest state (a handshake's, HTTP/2's: 6.8 KiB per idle
    // connection, `bench/idle.py`).
    let handshake = Box::pin(tokio::time::timeout(
        header_timeout,
        acceptor.accept(stream),
    ));
    let stream = match handshake.await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => {
            metrics::tls_handshake_failure(metrics::HandshakeFailure::Error);
            tracing::debug!(%client, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            metrics::tls_handshake_failure(metrics::HandshakeFailure::Timeout);
            tracing::debug!(%client, "TLS handshake not done within the header read timeout; closed");
            return;
        }
    };
    let alpn = Protocol::from_alpn(stream.get_ref().1.alpn_protocol());
    if conn.settings.forward_client_cert {
        conn.addr.client_cert = stream
            .get_ref()
            .1
            .peer_certificates()
            .and_then(|chain| chain.first())
            .and_then(|leaf| crate::tls::peer::forwarded_client_cert(leaf));
    }
    served(conn, stream, alpn, client, header_timeout).await
}

/// What serves a TLS connection after its handshake, made before it is awaited so that
/// [`serve_tls`] keeps neither the stream nor the branch it did not take: HTTP/2 for ALPN
/// `h2`, else the own engine, as for plain connections (without ALPN it tells HTTP/2 from
/// the first bytes itself).
fn served(
    conn: Conn,
    stream: tokio_rustls::server::TlsStream<TcpStream>,
    alpn: Option<Protocol>,
    client: SocketAddr,
    header_timeout: Duration,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    if alpn == Some(Protocol::Http2) {
        use futures_util::future::{ready, Either, FutureExt};
        // The header read timeout starts again after the handshake, for the preface. The
        // preface's wait is boxed apart: the connection's future is then HTTP/2's alone.
        let preface = Box::pin(announce::read(stream, header_timeout));
        return Box::pin(preface.then(move |read| match read {
            Some((_, stream)) => Either::Left(conn.serve_h2(stream)),
            None => {
                tracing::debug!(%client, "nothing sent within the header read timeout after the TLS handshake; closed");
                Either::Right(ready(()))
            }
        }));
    }
    let stream = crate::relay::Buffered::new(stream);
    let start = h1::Start::Made(Box::new(conn));
    Box::pin(h1::serve(start, stream, alpn.is_none()))
}

/// Bytes of a response body buffered per HTTP/2 stream before its upstream is read no
/// further (hyper's default is ~400 KiB): 64 streams of 1 MiB answers reached a 26.6 MiB
/// peak with the default (`bench/idle.py`, streams). The client's flow-control window,
/// not this buffer, is what bounds a stream's pace.
const H2_SEND_BUFFER: usize = 64 << 10;

/// What every connection is served with, made once per listener.
struct Settings {
    header_timeout: Duration,
    /// `timeouts.idle_ms`: an HTTP/1 client that reads nothing, an HTTP/2 connection with no
    /// stream open, an HTTP/2 stream whose response makes no progress.
    idle: Duration,
    max_header_list_size: u32,
    /// `tls.client_auth.forward_client_cert: set`: the verified client certificate goes
    /// upstream in `X-Forwarded-Client-Cert`, made once per connection.
    forward_client_cert: bool,
    /// Notified when the listener starts draining with [`Drain::CloseIdle`] (after
    /// `close_idle` is set): what the own engine's idle connections wait on, a smaller
    /// waiter than the watch's.
    drain: tokio::sync::Notify,
    /// Set when the drain closes idle connections (not on a hand-over).
    close_idle: AtomicBool,
}

impl Settings {
    fn new(config: &RouterConfig) -> Settings {
        let limits = config.limits;
        let header_timeout = Duration::from_millis(limits.header_read_timeout_ms);
        Settings {
            header_timeout,
            idle: config.timeouts.idle(),
            max_header_list_size: limits.max_header_bytes as u32,
            drain: tokio::sync::Notify::new(),
            close_idle: AtomicBool::new(false),
            forward_client_cert: config
                .tls
                .as_ref()
                .and_then(|t| t.client_auth.as_ref())
                .is_some_and(|c| c.forward_client_cert == crate::tls::ForwardClientCert::Set),
        }
    }
}

impl Settings {
    /// Whether the drain closes idle connections (set before `drain` is notified).
    fn close_idle(&self) -> bool {
        self.close_idle.load(Ordering::Acquire)
    }
}

/// One accepted connection, until its protocol is known.
struct Conn {
    proxy: Arc<Proxy>,
    addr: ClientAddr,
    settings: Arc<Settings>,
    draining: watch::Receiver<bool>,
    client: SocketAddr,
}

impl Conn {
    /// Serves the connection's HTTP/2 streams (hyper's server) until it ends, or gracefully
    /// once the listener drains.
    ///
    /// The connection is made and boxed before the returned future, which so holds no dead
    /// copy of `self` or the stream while the connection lives (rustc keeps an `async fn`'s
    /// arguments beside what they are moved into: 1.5 KiB per HTTP/2 connection here).
    fn serve_h2<S>(self, stream: S) -> impl Future<Output = ()> + Send
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Conn {
            proxy,
            addr,
            settings,
            mut draining,
            client,
        } = self;
        let io = TokioIo::new(SendTimeout::new(stream, settings.idle));
        let shared = Arc::new((proxy, addr));
        let service = service_fn(move |req| {
            let shared = shared.clone();
            async move {
                let mut response = shared.0.handle(req.map(Inbound::Hyper), &shared.1).await;
                if let Some(alt_svc) = &shared.0.alt_svc {
                    response
                        .headers_mut()
                        .insert(http::header::ALT_SVC, alt_svc.clone());
                }
                Ok::<_, Infallible>(h2::track(response))
            }
        });
        let streams = h2::Streams::new();
        let mut builder = http2::Builder::new(h2::Exec::new(streams.clone(), settings.idle));
        builder
            .timer(TokioTimer::new())
            .max_header_list_size(settings.max_header_list_size)
            .max_send_buf_size(H2_SEND_BUFFER);
        let mut conn = Box::pin(builder.serve_connection(io, service));
        async move {
            // GOAWAY once no stream has been open for `idle` (checked when the timer
            // fires, then re-armed), or when the listener drains.
            let timer = tokio::time::sleep(settings.idle);
            tokio::pin!(timer);
            let result = loop {
                tokio::select! {
                    r = conn.as_mut() => break r,
                    _ = async { draining.wait_for(|d| *d).await.is_ok() } => {
                        conn.as_mut().graceful_shutdown();
                        break conn.await;
                    }
                    () = timer.as_mut() => match streams.idle_until(settings.idle) {
                        Some(until) => timer.as_mut().reset(until),
                        None => {
                            tracing::debug!(%client, "HTTP/2 connection idle; GOAWAY");
                            conn.as_mut().graceful_shutdown();
                            // hyper sends GOAWAY with a PING and closes once the PING is
                            // answered; a client that never answers is cut after the
                            // grace (docs/config.md `timeouts.idle_ms`).
                            break tokio::time::timeout(h2::goaway_grace(settings.idle), conn)
                                .await
                                .unwrap_or(Ok(()));
                        }
                    },
                }
            };
            if let Err(e) = result {
                tracing::debug!(%client, error = %e, "connection ended with an error");
            }
        }
    }
}

/// Binds a listener with a listen backlog of `backlog` connections (the kernel caps it at
/// `net.core.somaxconn`); `SO_REUSEADDR` is set, as `TcpListener::bind` does, so a restart
/// need not wait out `TIME_WAIT`. The error names the address.
///
/// `SO_REUSEPORT` is set too, so that each worker accepts on a socket of its own in the
/// same group (`accept`), as nginx's `reuseport`; another process of the same user could
/// join the group, as with nginx.
///
/// `TCP_NODELAY` is set on the listener: Linux (and the BSDs) give it to every connection
/// accepted from it, which saves a `setsockopt` per connection (`accept::nodelay`).
pub async fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    bind_now(addr, backlog)
}

/// [`bind`], for a caller outside an async context (needs a tokio runtime all the same).
///
/// Errors: the address is taken, by another process's listener too. With `SO_REUSEPORT`
/// alone a second router (one not stopped, or a test's on a reused port) would join the
/// first one's group and the kernel would split the clients between them unseen; so a
/// plain listener is bound first, which any listener on the address refuses, and closed.
/// (A hand-over's and systemd's sockets are inherited, never bound here.)
pub fn bind_now(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let failed =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}"));
    if addr.port() != 0 {
        drop(std::net::TcpListener::bind(addr).map_err(failed)?);
    }
    bind_reuseport(addr, backlog).map_err(failed)
}

/// A listener on `addr` in its `SO_REUSEPORT` group.
fn bind_reuseport(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.set_reuseport(true)?;
    socket.set_nodelay(true)?;
    socket.bind(addr)?;
    socket.listen(backlog)
}

/// The listening sockets the workers accept on: `first`, and, when it is in a
/// `SO_REUSEPORT` group and has fewer than `workers` members, more bound to its address
/// until every worker has one (`accept`). A socket that cannot be bound is logged and the
/// group stays as it is (each worker then takes `i % workers`).
pub fn group(
    mut first: Vec<std::net::TcpListener>,
    workers: usize,
    backlog: u32,
) -> Vec<std::net::TcpListener> {
    let Some(addr) = first.first().and_then(|s| s.local_addr().ok()) else {
        return first;
    };
    if !first.first().is_some_and(accept::reuseport) {
        return first;
    }
    while first.len() < workers {
        match bind_reuseport(addr, backlog).and_then(|l| l.into_std()) {
            Ok(socket) => first.push(socket),
            Err(e) => {
                tracing::warn!(%addr, error = %e, "fewer listening sockets than workers");
                break;
            }
        }
    }
    first
}
