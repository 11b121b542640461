//! The public listener: accepts connections and hands each request to [`Proxy::handle`],
//! until a shutdown signal; then drains.
//!
//! HTTP/1.1 and HTTP/2 (prior knowledge) are both served on one port by `hyper-util`'s auto
//! builder; upstreams are always spoken to in HTTP/1.1. With `tls:` (SPEC §12) each
//! connection first completes a TLS handshake (`crate::tls`), bounded by
//! `limits.header_read_timeout_ms`; ALPN offers `h2` and `http/1.1`, and the auto builder
//! serves whichever the client then speaks.
//!
//! Connections are accepted here, on the caller's runtime, and each is served on one of the
//! [`Workers`] for its whole life (see `workers` for why).
//!
//! Shutdown order (SPEC §8, for load balancers): the caller flips `/readyz` to 503 before the
//! `shutdown` future completes; then the listener is closed, so new connections are refused;
//! every open connection is told to finish: HTTP/1 connections close after the response in
//! progress (idle keep-alive ones at once), HTTP/2 ones send GOAWAY; requests in flight get
//! up to the grace period to complete.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::metrics;
use crate::proxy::headers::ClientAddr;
use crate::proxy::Proxy;
use crate::send_timeout::SendTimeout;
use crate::workers::Workers;

/// Serves `listener` on `proxy.config().workers` worker threads until `shutdown` completes,
/// then drains for at most `grace`. With `tls`, connections are HTTPS.
///
/// Errors: the worker threads could not be started.
pub async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) -> std::io::Result<()> {
    let workers = Workers::start(proxy.config().workers)?;
    let limits = proxy.config().limits;
    let header_timeout = Duration::from_millis(limits.header_read_timeout_ms);
    let send_timeout = proxy.config().timeouts.idle();
    let forward_client_cert = proxy
        .config()
        .tls
        .as_ref()
        .and_then(|t| t.client_auth.as_ref())
        .is_some_and(|c| c.forward_client_cert == crate::tls::ForwardClientCert::Set);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // Slowloris: a client that trickles its headers is cut off.
        .header_read_timeout(header_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .max_headers(limits.max_headers);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(limits.max_header_bytes as u32);
    // Each connection task holds a sender; when all are dropped, the drain is complete.
    let (draining_tx, draining_rx) = watch::channel(false);
    let (open_tx, mut open_rx) = mpsc::channel::<()>(1);
    tokio::pin!(shutdown);
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
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        // The socket moves to the worker's event loop: deregistered here, registered there.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(e) => {
                tracing::debug!(%client, error = %e, "cannot hand the connection over");
                continue;
            }
        };
        let proxy = proxy.clone();
        let builder = builder.clone();
        let draining = draining_rx.clone();
        let open = open_tx.clone();
        let tls = tls.clone();
        workers.spawn(async move {
            let _open = open;
            let stream = match TcpStream::from_std(stream) {
                Ok(stream) => stream,
                Err(e) => {
                    tracing::debug!(%client, error = %e, "cannot register the connection");
                    return;
                }
            };
            // Per connection, so that a request clones a handle no other thread touches.
            let service = |addr: ClientAddr| {
                let conn = Arc::new((proxy, addr));
                service_fn(move |req| {
                    let conn = conn.clone();
                    async move { Ok::<_, Infallible>(conn.0.handle(req, &conn.1).await) }
                })
            };
            let Some(acceptor) = tls else {
                if !protocol_announced(&stream, header_timeout).await {
                    tracing::debug!(%client, "nothing sent within the header read timeout; closed");
                    return;
                }
                let io = TokioIo::new(SendTimeout::new(stream, send_timeout));
                let service = service(ClientAddr::new(client));
                return serve_connection(&builder, io, service, draining, client).await;
            };
            let stream = match tokio::time::timeout(header_timeout, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    metrics::tls_handshake_failure("error");
                    tracing::debug!(%client, error = %e, "TLS handshake failed");
                    return;
                }
                Err(_) => {
                    metrics::tls_handshake_failure("timeout");
                    tracing::debug!(%client, "TLS handshake not done within the header read timeout; closed");
                    return;
                }
            };
            let mut addr = ClientAddr::with_tls(client);
            if forward_client_cert {
                let (_, session) = stream.get_ref();
                addr.client_cert = session
                    .peer_certificates()
                    .and_then(|chain| chain.first())
                    .and_then(|leaf| crate::tls::peer::forwarded_client_cert(leaf));
            }
            let io = TokioIo::new(SendTimeout::new(stream, send_timeout));
            serve_connection(&builder, io, service(addr), draining, client).await
        });
    }
    drop(listener);
    tracing::info!("listener closed; draining");
    let _ = draining_tx.send(true);
    drop(open_tx);
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

/// Serves one connection's requests with `service` until it ends, or gracefully once
/// `draining` turns true.
async fn serve_connection<I, S>(
    builder: &auto::Builder<TokioExecutor>,
    io: I,
    service: S,
    mut draining: watch::Receiver<bool>,
    client: SocketAddr,
) where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    S: hyper::service::Service<
            hyper::Request<hyper::body::Incoming>,
            Response = hyper::Response<crate::proxy::ProxyBody>,
            Error = Infallible,
        > + Send
        + 'static,
    S::Future: Send + 'static,
{
    let conn = builder.serve_connection_with_upgrades(io, service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        // `wait_for`'s guard is not `Send`; only whether it fired matters.
        _ = async { draining.wait_for(|d| *d).await.is_ok() } => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%client, error = %e, "connection ended with an error");
    }
}

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Waits, at most `within`, until the client has sent enough to tell HTTP/1 from HTTP/2:
/// one byte that is not a prefix of the HTTP/2 preface, or the whole preface. False if the
/// client sent nothing more in time, or closed.
///
/// `hyper-util`'s auto builder reads the first bytes to choose the protocol with no timeout
/// of its own, and hyper's `header_read_timeout` is HTTP/1's only: without this a client that
/// connects and stays silent (or stops inside the preface) would hold a connection forever.
/// It only peeks, so nothing is consumed; it costs one `recv(MSG_PEEK)` per connection.
async fn protocol_announced(stream: &TcpStream, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; H2_PREFACE.len()];
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.peek(&mut buf)).await {
            Ok(Ok(n)) => n,
            Ok(Err(_)) | Err(_) => return false,
        };
        if n == 0 {
            return false;
        }
        if n == H2_PREFACE.len() || buf[..n] != H2_PREFACE[..n] {
            return true;
        }
        // Part of the preface: `peek` would answer at once with the same bytes, so wait a
        // little before looking again (only a stalled HTTP/2 client gets here).
        tokio::time::sleep(Duration::from_millis(5)).await;
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
    }
}

/// Binds a listener with a listen backlog of `backlog` connections (the kernel caps it at
/// `net.core.somaxconn`); `SO_REUSEADDR` is set, as `TcpListener::bind` does, so a restart
/// need not wait out `TIME_WAIT`. The error names the address.
pub async fn bind(addr: SocketAddr, backlog: u32) -> std::io::Result<TcpListener> {
    let bound = (|| {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        socket.bind(addr)?;
        socket.listen(backlog)
    })();
    bound.map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))
}
