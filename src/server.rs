//! The public listener: accepts connections and hands each request to [`Proxy::handle`],
//! until a shutdown signal; then drains.
//!
//! HTTP/1.1 and HTTP/2 (prior knowledge) are both served on one port by `hyper-util`'s auto
//! builder; upstreams are always spoken to in HTTP/1.1.
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
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch};

use crate::proxy::headers::ClientAddr;
use crate::proxy::Proxy;

/// Serves `listener` until `shutdown` completes, then drains for at most `grace`.
pub async fn serve(
    listener: TcpListener,
    proxy: Arc<Proxy>,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) {
    let limits = proxy.config().limits;
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // Slowloris: a client that trickles its headers is cut off.
        .header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms))
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
        // Per connection, so that a request clones a handle no other thread touches.
        let conn = Arc::new((proxy.clone(), ClientAddr::new(client)));
        let service = service_fn(move |req| {
            let conn = conn.clone();
            async move { Ok::<_, Infallible>(conn.0.handle(req, &conn.1).await) }
        });
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let mut draining = draining_rx.clone();
        let open = open_tx.clone();
        tokio::spawn(async move {
            let _open = open;
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
}

/// Binds the listener; the error names the address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))
}
