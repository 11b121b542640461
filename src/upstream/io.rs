//! An upstream connection's transport: plain TCP, or TLS over it (rustls, `https://`
//! upstreams, docs/mesh.md). Both engines' upstream connections use it: hyper's client
//! connections (`pool.rs`) and the own engine's pooled sockets (`raw.rs`), so that a region
//! reached over TLS is a per-worker pool of kept-alive TLS sockets as a plain one is.
//!
//! Besides bytes, the own engine asks a transport two things a plain socket answers from
//! its readiness: whether bytes wait to be read (an idle pooled connection that is readable
//! was closed by its upstream, or sent what nobody asked for), and when to read without
//! holding a buffer ([`crate::relay::Readiness`]). Over TLS, rustls may hold decrypted bytes
//! that the socket no longer shows, so both look there first.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// An upstream connection's transport: plain TCP or TLS over it.
pub enum UpstreamIo {
    /// `http://`.
    Plain(TcpStream),
    /// `https://`: boxed, a TLS stream is ~1 KiB beside its buffers.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl std::fmt::Debug for UpstreamIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpstreamIo::Plain(s) => f.debug_tuple("Plain").field(s).finish(),
            UpstreamIo::Tls(s) => f.debug_tuple("Tls").field(s.get_ref().0).finish(),
        }
    }
}

impl UpstreamIo {
    /// The TCP socket under the transport.
    pub fn tcp(&self) -> &TcpStream {
        match self {
            UpstreamIo::Plain(s) => s,
            UpstreamIo::Tls(s) => s.get_ref().0,
        }
    }

    /// Whether something waits to be read on a connection that expects nothing: the event
    /// loop saw its socket readable (the upstream closed it, or sent bytes), or rustls holds
    /// decrypted bytes. A plain socket is judged without a system call, from tokio's
    /// readiness. A readable TLS socket is read, without waiting: TLS 1.3 servers (OpenSSL's
    /// among them) send their session tickets after the handshake, often after the first
    /// answer, and those records leave the socket readable with nothing for the
    /// application; rustls takes them (the tickets go to the session cache), and only
    /// application bytes or the connection's end count. Taking them for a close made every
    /// pooled TLS connection single-use (thousands of handshakes a second under load).
    pub fn has_unread(&mut self) -> bool {
        let mut cx = Context::from_waker(Waker::noop());
        let readable = matches!(self.tcp().poll_read_ready(&mut cx), Poll::Ready(_));
        let s = match self {
            UpstreamIo::Plain(_) => return readable,
            UpstreamIo::Tls(s) => s,
        };
        if tls_plaintext(s) > 0 {
            return true;
        }
        if !readable {
            return false;
        }
        let mut byte = [0u8; 1];
        let mut buf = ReadBuf::new(&mut byte);
        // Pending: what came was TLS's own (tickets, a key update), all taken.
        !Pin::new(s.as_mut())
            .poll_read(&mut cx, &mut buf)
            .is_pending()
    }
}

/// Decrypted bytes rustls holds, after processing what it has read from the socket.
fn tls_plaintext(s: &mut tokio_rustls::client::TlsStream<TcpStream>) -> usize {
    match s.get_mut().1.process_new_packets() {
        Ok(state) => state.plaintext_bytes_to_read(),
        // A broken record: the next read says so.
        Err(_) => 1,
    }
}

impl crate::relay::Readiness for UpstreamIo {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let UpstreamIo::Tls(s) = self {
            if tls_plaintext(s) > 0 {
                return Poll::Ready(Ok(()));
            }
        }
        self.tcp().poll_read_ready(cx)
    }
}

impl AsyncRead for UpstreamIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(s) => Pin::new(s).poll_read(cx, buf),
            UpstreamIo::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for UpstreamIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Plain(s) => Pin::new(s).poll_write(cx, buf),
            UpstreamIo::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(s) => Pin::new(s).poll_flush(cx),
            UpstreamIo::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            UpstreamIo::Plain(s) => Pin::new(s).poll_shutdown(cx),
            UpstreamIo::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            UpstreamIo::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            UpstreamIo::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            UpstreamIo::Plain(s) => s.is_write_vectored(),
            UpstreamIo::Tls(s) => s.is_write_vectored(),
        }
    }
}
