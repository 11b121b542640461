//! Which protocol a client speaks, read from its first bytes within the header read timeout
//! (nginx `client_header_timeout`, HAProxy `timeout http-request`): a client that connects,
//! or completes a TLS handshake, and then stays silent is closed.
//!
//! hyper's HTTP/2 server waits for the preface with no timeout of its own, so after a TLS
//! handshake that chose `h2` the wait for the first bytes is bounded here ([`read`]); the own
//! HTTP/1.x engine bounds its own reads, and tells HTTP/2's preface from its first read
//! ([`decide`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The HTTP/2 connection preface (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The protocol a connection is served with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 (RFC 9112).
    Http1,
    /// HTTP/2 (RFC 9113).
    Http2,
}

impl Protocol {
    /// The protocol TLS ALPN negotiated (RFC 7301), if any: it is then the one served, whatever
    /// the client sends (RFC 7301 §3.2, RFC 9113 §3.2).
    pub fn from_alpn(alpn: Option<&[u8]>) -> Option<Protocol> {
        match alpn {
            Some(b"h2") => Some(Protocol::Http2),
            Some(b"http/1.1") => Some(Protocol::Http1),
            _ => None,
        }
    }
}

/// What the first bytes `seen` say, or None if they are a strict prefix of the HTTP/2
/// preface (more are needed to tell).
pub(super) fn decide(seen: &[u8]) -> Option<Protocol> {
    if seen.len() >= H2_PREFACE.len() && seen[..H2_PREFACE.len()] == *H2_PREFACE {
        Some(Protocol::Http2)
    } else if seen.len() >= H2_PREFACE.len() || seen != &H2_PREFACE[..seen.len()] {
        Some(Protocol::Http1)
    } else {
        None
    }
}

/// Waits, at most `within`, until the client has sent enough to tell HTTP/1 from HTTP/2: one
/// byte that is not a prefix of the HTTP/2 preface, or the whole preface. None if the client
/// sent nothing more in time, or closed. The bytes are read (at most the preface's length)
/// and handed back in front of the stream by the returned [`Rewind`].
pub async fn read<S: AsyncRead + Unpin>(
    mut stream: S,
    within: Duration,
) -> Option<(Protocol, Rewind<S>)> {
    let deadline = tokio::time::Instant::now() + within;
    let mut buf = [0u8; H2_PREFACE.len()];
    let mut len = 0;
    loop {
        let n = match tokio::time::timeout_at(deadline, stream.read(&mut buf[len..])).await {
            Ok(Ok(n)) => n,
            Ok(Err(_)) | Err(_) => return None,
        };
        if n == 0 {
            return None;
        }
        len += n;
        if let Some(protocol) = decide(&buf[..len]) {
            let rewind = Rewind {
                inner: stream,
                buf: buf[..len].to_vec(),
                pos: 0,
            };
            return Some((protocol, rewind));
        }
    }
}

/// `inner` with the bytes [`read`] (or the own HTTP/1.1 engine) took from it read again
/// first. Writes pass through.
#[derive(Debug)]
pub struct Rewind<S> {
    inner: S,
    buf: Vec<u8>,
    pos: usize,
}

impl<S> Rewind<S> {
    /// `inner` with `buf[pos..]` read first.
    pub fn with_bytes(inner: S, buf: Vec<u8>, pos: usize) -> Rewind<S> {
        Rewind { inner, buf, pos }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Rewind<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.pos < this.buf.len() {
            let n = (this.buf.len() - this.pos).min(out.remaining());
            out.put_slice(&this.buf[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.buf.len() {
                this.buf = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, out)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Rewind<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_tell_the_protocol() {
        assert_eq!(decide(b"G"), Some(Protocol::Http1));
        assert_eq!(decide(b"PO"), Some(Protocol::Http1));
        assert_eq!(decide(b"PRI * "), None);
        assert_eq!(decide(H2_PREFACE), Some(Protocol::Http2));
        let mut near = H2_PREFACE.to_vec();
        near[23] = b'x';
        assert_eq!(decide(&near), Some(Protocol::Http1));
    }

    #[tokio::test]
    async fn what_was_read_is_read_again() {
        let (mut client, server) = tokio::io::duplex(64);
        tokio::io::AsyncWriteExt::write_all(&mut client, b"GET / HTTP/1.1\r\n")
            .await
            .expect("write");
        drop(client);
        let (protocol, mut rewind) = read(server, Duration::from_secs(1)).await.expect("read");
        assert_eq!(protocol, Protocol::Http1);
        let mut all = Vec::new();
        rewind.read_to_end(&mut all).await.expect("read");
        assert_eq!(all, b"GET / HTTP/1.1\r\n");
    }
}
