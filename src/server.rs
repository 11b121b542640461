//! The public listener: accepts connections and hands each request to [`Proxy::handle`].
//!
//! HTTP/1.1 and HTTP/2 (prior knowledge) are both served on one port by `hyper-util`'s auto
//! builder; upstreams are always spoken to in HTTP/1.1.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;

use crate::proxy::Proxy;

/// Serves `listener` forever; a connection's error ends that connection only.
pub async fn serve(listener: TcpListener, proxy: Arc<Proxy>) {
    let builder = Arc::new(auto::Builder::new(TokioExecutor::new()));
    loop {
        let (stream, client) = match listener.accept().await {
            Ok(conn) => conn,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let proxy = proxy.clone();
        let builder = builder.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let proxy = proxy.clone();
                async move { Ok::<_, Infallible>(proxy.handle(req, client).await) }
            });
            if let Err(e) = builder
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%client, error = %e, "connection ended with an error");
            }
        });
    }
}

/// Binds the listener; the error names the address.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {addr}: {e}")))
}
