//! A client connection that fails its writes once the client has read nothing for `idle`
//! (nginx's `send_timeout`): a client that stops reading a large response must not pin the
//! client connection, the upstream connection and an in-flight slot forever.
//!
//! The timer lives at the I/O layer because nothing above it runs while the client is not
//! reading: hyper stops polling the response body once the socket is full, so a body's own
//! idle timer never starts. hyper does wait on the socket's write readiness, so a timer
//! registered with the same waker wakes the write, which then fails; hyper closes the client
//! connection and drops the response body, which closes the upstream connection and ends the
//! request's in-flight count. The failure is the client's (`iuid_router_client_errors_total`
//! `kind="send_timeout"`) and never counts against an upstream.
//!
//! Only HTTP/1 is covered here: an HTTP/2 client that stops reading stalls its streams by flow
//! control (no window updates), with the socket itself still writable; `server::h2` resets
//! such a stream.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

use crate::error::ErrorKind;

/// `inner`, whose writes fail with `TimedOut` after `idle` without progress.
///
/// The timer is made on the first write that has to wait (most connections never wait) and
/// re-armed only when a wait follows progress.
#[derive(Debug)]
pub struct SendTimeout<S> {
    inner: S,
    idle: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    /// A write is waiting and nothing was written since the timer was armed.
    waiting: bool,
}

impl<S> SendTimeout<S> {
    /// Wraps `inner`.
    pub fn new(inner: S, idle: Duration) -> Self {
        SendTimeout {
            inner,
            idle,
            sleep: None,
            waiting: false,
        }
    }

    /// A write had to wait: Ready with the error once the client has read nothing for `idle`.
    fn stalled(&mut self, cx: &mut Context<'_>) -> Poll<io::Error> {
        let deadline = Instant::now() + self.idle;
        let sleep = match &mut self.sleep {
            Some(sleep) => {
                if !self.waiting {
                    sleep.as_mut().reset(deadline);
                }
                sleep
            }
            None => self
                .sleep
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        self.waiting = true;
        match sleep.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(()) => {
                crate::metrics::client_error(ErrorKind::SendTimeout);
                tracing::debug!(
                    idle_ms = self.idle.as_millis() as u64,
                    "the client read nothing; connection closed"
                );
                Poll::Ready(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("the client read nothing for {} ms", self.idle.as_millis()),
                ))
            }
        }
    }

    /// Passes a write's result on, watching for a wait.
    fn watch<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Pending => self.stalled(cx).map(Err),
            ready => {
                self.waiting = false;
                ready
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for SendTimeout<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SendTimeout<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.watch(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_flush(cx);
        this.watch(cx, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
