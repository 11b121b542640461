//! The admin API's listener, until the hand-over: after it, this process accepts no more
//! admin connections (the new process does, on the same socket), and the ones it has
//! are closed after their next response (`Connection: close`), not under a client that
//! may be sending: a probe on a kept-alive connection never sees a reset. The process
//! waits for them ([`AdminListener::closed`]) before it exits.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::{header, HeaderValue};
use axum::response::Response;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};

/// A listener for `axum::serve` that stops accepting once `handed_over` turns true, and
/// then closes its descriptor (the socket stays open in the new process).
pub struct AdminListener {
    listener: Option<TcpListener>,
    handed_over: watch::Receiver<bool>,
    open: Arc<Open>,
}

/// The admin connections open, and a wake-up when the last closes.
#[derive(Default)]
pub struct Open {
    count: AtomicUsize,
    closed: Notify,
}

impl Open {
    /// Waits until no admin connection is open, `within` at most.
    pub async fn closed(&self, within: Duration) {
        let wait = async {
            loop {
                let notified = self.closed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.count.load(Ordering::Acquire) == 0 {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(within, wait).await;
    }
}

/// An accepted admin connection, counted open until dropped.
pub struct AdminConn {
    stream: TcpStream,
    open: Arc<Open>,
}

impl Drop for AdminConn {
    fn drop(&mut self) {
        if self.open.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.open.closed.notify_waiters();
        }
    }
}

impl AsyncRead for AdminConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for AdminConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl AdminListener {
    /// `listener`, until `handed_over`.
    pub fn new(listener: TcpListener, handed_over: watch::Receiver<bool>) -> AdminListener {
        AdminListener {
            listener: Some(listener),
            handed_over,
            open: Arc::default(),
        }
    }

    /// Its connections open, to wait for them after the hand-over.
    pub fn open(&self) -> Arc<Open> {
        self.open.clone()
    }
}

impl axum::serve::Listener for AdminListener {
    type Io = AdminConn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (AdminConn, SocketAddr) {
        loop {
            let Some(listener) = &self.listener else {
                return std::future::pending().await;
            };
            let handed_over = &mut self.handed_over;
            let stop = async move {
                // The sender gone without a hand-over (the process shuts down on a signal):
                // the admin API keeps serving through the drain, `/readyz` saying 503.
                if handed_over.wait_for(|h| *h).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            let accepted = tokio::select! {
                accepted = listener.accept() => Some(accepted),
                () = stop => None,
            };
            match accepted {
                Some(Ok((stream, addr))) => {
                    self.open.count.fetch_add(1, Ordering::AcqRel);
                    let open = self.open.clone();
                    return (AdminConn { stream, open }, addr);
                }
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "admin API: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                None => self.listener = None,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        match &self.listener {
            Some(listener) => listener.local_addr(),
            None => Err(std::io::ErrorKind::NotConnected.into()),
        }
    }
}

/// `router` with `Connection: close` on every response once the sockets were handed over.
pub fn close_after_handover(
    router: axum::Router,
    handed_over: watch::Receiver<bool>,
) -> axum::Router {
    router.layer(axum::middleware::map_response(
        move |mut response: Response| {
            let close = *handed_over.borrow();
            async move {
                if close {
                    response
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                }
                response
            }
        },
    ))
}
