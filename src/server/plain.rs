//! A plain client connection that joins its worker's event loop only when it has to wait.
//!
//! Registering a socket with epoll (`epoll_ctl` ADD on accept, DEL before `close`) is two
//! system calls and a kernel allocation per connection. A connection whose request came with
//! it and whose answer fits in the socket's send buffer — every short `Connection: close`
//! exchange — never waits on its socket: it is read, answered and closed straight through
//! system calls. So the own engine's plain connections are accepted with `accept4` and read
//! and written as they are; the first read or write that would block registers the socket
//! with tokio ([`PlainClient::registered`]), and from then on it is a tokio `TcpStream`.
//! A kept-alive connection registers once, when it first waits for its next request.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// A plain client connection: its socket as accepted, or registered once it had to wait.
pub(crate) struct PlainClient {
    socket: Socket,
}

enum Socket {
    /// Non-blocking, not known to the event loop.
    Fresh(std::net::TcpStream),
    /// Registered with the worker's event loop.
    Registered(TcpStream),
    /// Registration failed; the socket is closed and every call fails.
    Gone,
}

impl From<TcpStream> for PlainClient {
    fn from(stream: TcpStream) -> PlainClient {
        PlainClient {
            socket: Socket::Registered(stream),
        }
    }
}

impl PlainClient {
    /// The socket registered with the worker's event loop (the calling thread's tokio
    /// runtime), registering it first if it is not yet. Errors: registration failed, and the
    /// socket is closed.
    pub(crate) fn registered(&mut self) -> io::Result<&mut TcpStream> {
        if matches!(self.socket, Socket::Fresh(_)) {
            if let Socket::Fresh(std) = std::mem::replace(&mut self.socket, Socket::Gone) {
                self.socket = Socket::Registered(TcpStream::from_std(std)?);
            }
        }
        match &mut self.socket {
            Socket::Registered(stream) => Ok(stream),
            _ => Err(gone()),
        }
    }

    /// [`PlainClient::registered`], by value.
    pub(crate) fn into_registered(mut self) -> io::Result<TcpStream> {
        self.registered()?;
        match self.socket {
            Socket::Registered(stream) => Ok(stream),
            _ => Err(gone()),
        }
    }

    /// Sets `TCP_NODELAY` (where the listener's did not reach the connection).
    pub(crate) fn set_nodelay(&self) -> io::Result<()> {
        match &self.socket {
            Socket::Fresh(std) => std.set_nodelay(true),
            Socket::Registered(stream) => stream.set_nodelay(true),
            Socket::Gone => Err(gone()),
        }
    }

    /// A fresh socket's `recv` into `buf`'s unfilled part, without waiting.
    fn recv(std: &std::net::TcpStream, buf: &mut ReadBuf<'_>) -> io::Result<()> {
        // SAFETY: `recv_now` only writes bytes into the unfilled part, never de-initializes.
        let n = crate::relay::recv_now(std.as_raw_fd(), unsafe { buf.unfilled_mut() })?;
        // SAFETY: the kernel initialized the `n` bytes it wrote.
        unsafe { buf.assume_init(n) };
        buf.advance(n);
        Ok(())
    }
}

fn gone() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotConnected,
        "the connection could not be registered",
    )
}

impl PlainClient {
    /// One I/O call: `fresh` straight on a socket not yet registered; when that would block,
    /// or the socket is registered already, `registered` on the registered socket (which
    /// then waits for readiness). `arg` is the buffer both take.
    fn poll_io<A: ?Sized, T>(
        &mut self,
        cx: &mut Context<'_>,
        arg: &mut A,
        fresh: impl FnOnce(&std::net::TcpStream, &mut A) -> io::Result<T>,
        registered: impl FnOnce(Pin<&mut TcpStream>, &mut Context<'_>, &mut A) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if let Socket::Fresh(std) = &self.socket {
            match fresh(std, arg) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                done => return Poll::Ready(done),
            }
        }
        registered(Pin::new(self.registered()?), cx, arg)
    }
}

impl AsyncRead for PlainClient {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.get_mut()
            .poll_io(cx, buf, PlainClient::recv, |s, cx, buf| {
                s.poll_read(cx, buf)
            })
    }
}

impl AsyncWrite for PlainClient {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_io(
            cx,
            &mut { buf },
            |std, buf| io::Write::write(&mut &*std, buf),
            |s, cx, buf| s.poll_write(cx, buf),
        )
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.get_mut().poll_io(
            cx,
            &mut { bufs },
            |std, bufs| io::Write::write_vectored(&mut &*std, bufs),
            |s, cx, bufs| s.poll_write_vectored(cx, bufs),
        )
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().socket {
            Socket::Fresh(std) => Poll::Ready(std.shutdown(std::net::Shutdown::Write)),
            Socket::Registered(stream) => Pin::new(stream).poll_shutdown(cx),
            Socket::Gone => Poll::Ready(Err(gone())),
        }
    }
}

impl crate::relay::Readiness for PlainClient {
    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.registered()?.poll_read_ready(cx)
    }
}

impl super::h1::ClientIo for PlainClient {
    const CLOSE_NOTIFY: bool = false;

    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<bool>> {
        self.registered()?.poll_read_ready(cx).map_ok(|()| true)
    }
}

impl AsRawFd for PlainClient {
    /// -1 once the socket is gone (registration failed): every call on it fails.
    fn as_raw_fd(&self) -> RawFd {
        match &self.socket {
            Socket::Fresh(std) => std.as_raw_fd(),
            Socket::Registered(stream) => stream.as_raw_fd(),
            Socket::Gone => -1,
        }
    }
}

/// Waits until `listener` has a connection and accepts it, non-blocking and unregistered.
/// Errors: `accept4`'s (out of file descriptors and the like), or the listener's readiness.
pub(crate) async fn accept(listener: &AsyncFd<std::net::TcpListener>) -> io::Result<Accepted> {
    loop {
        let mut guard = listener.ready(Interest::READABLE).await?;
        match guard.try_io(|l| accept4(l.get_ref())) {
            Ok(accepted) => return accepted,
            // Nothing left to accept: readiness cleared, wait again.
            Err(_would_block) => continue,
        }
    }
}

/// An accepted connection, its client's address, and whether its descriptor lies in the
/// reserve of `RLIMIT_NOFILE` (`crate::nofile::in_reserve`: accepts pause).
pub(crate) type Accepted = (PlainClient, SocketAddr, bool);

/// `accept4` with `SOCK_NONBLOCK | SOCK_CLOEXEC`: the socket ready for non-blocking I/O
/// without an `fcntl`, and its peer's address without a `getpeername`.
fn accept4(listener: &std::net::TcpListener) -> io::Result<Accepted> {
    // SAFETY: all-zero is a valid `sockaddr_storage`.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` bytes of address into `storage`, which it
    // owns; the fd is the live listener's.
    let fd = unsafe {
        libc::accept4(
            listener.as_raw_fd(),
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket this process owns and nothing else holds.
    let std = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    let addr = peer(&storage).ok_or_else(|| io::Error::other("accepted a non-IP connection"))?;
    let client = PlainClient {
        socket: Socket::Fresh(std),
    };
    Ok((client, addr, crate::nofile::in_reserve(fd)))
}

/// The IPv4 or IPv6 address the kernel wrote into `storage`.
fn peer(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(storage.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a `sockaddr_in`, which it is large
            // enough and aligned for.
            let v4 =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(v4.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(v4.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for `sockaddr_in6`.
            let v6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            let ip = Ipv6Addr::from(v6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(v6.sin6_port),
                v6.sin6_flowinfo,
                v6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn listener(addr: &str) -> Option<AsyncFd<std::net::TcpListener>> {
        let listener = std::net::TcpListener::bind(addr).ok()?;
        listener.set_nonblocking(true).ok()?;
        // SAFETY: the std listener owns its fd for the AsyncFd's life.
        unsafe { AsyncFd::register_with_interest(listener, Interest::READABLE) }.ok()
    }

    fn registered(client: &PlainClient) -> bool {
        matches!(client.socket, Socket::Registered(_))
    }

    /// A request that came with the connection is read and answered without registering the
    /// socket; the first read that has to wait registers it, and the wait ends when bytes come.
    #[tokio::test]
    async fn a_connection_registers_only_when_it_has_to_wait() {
        let listener = listener("127.0.0.1:0").unwrap();
        let addr = listener.get_ref().local_addr().unwrap();
        let mut peer = std::net::TcpStream::connect(addr).unwrap();
        peer.write_all(b"first").unwrap();
        let (mut conn, client, _) = accept(&listener).await.unwrap();
        assert_eq!(client, peer.local_addr().unwrap());
        // The bytes are there (loopback delivers on `write`), so no wait.
        let mut buf = [0u8; 16];
        let n = conn.read(&mut buf).await.unwrap();
        assert_eq!(&buf[..n], b"first");
        conn.write_all(b"answer").await.unwrap();
        assert!(!registered(&conn));
        let mut got = [0u8; 6];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"answer");

        let read = tokio::spawn(async move {
            let n = conn.read(&mut buf).await.unwrap();
            (buf[..n].to_vec(), registered(&conn))
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        peer.write_all(b"second").unwrap();
        let (bytes, was_registered) = read.await.unwrap();
        assert_eq!(bytes, b"second");
        assert!(was_registered);
    }

    /// IPv6 peers' addresses come out of `accept4` whole (where the machine has `::1`).
    #[tokio::test]
    async fn ipv6_peers_are_read_from_accept() {
        let Some(listener) = listener("[::1]:0") else {
            return;
        };
        let addr = listener.get_ref().local_addr().unwrap();
        let peer = std::net::TcpStream::connect(addr).unwrap();
        let (_conn, client, _) = accept(&listener).await.unwrap();
        assert_eq!(client, peer.local_addr().unwrap());
    }
}
