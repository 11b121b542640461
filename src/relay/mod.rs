//! HTTP/1.1 bytes in motion for the own engine: a socket and its read buffer ([`Buffered`]),
//! and a body relayed from one connection to another by its framing ([`relay`]). Used alike
//! by the listener's side (client connections) and the upstream pools; the codec it frames
//! by (`crate::http1`) stays pure, free of sockets.
//!
//! Buffers (and heads' field lists) come from a per-thread cache and go back to it whenever
//! a connection has nothing buffered (an idle keep-alive connection holds no buffer at all,
//! as nginx frees its buffers between requests), so a request normally allocates none.

use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::http1::chunked::{ChunkError, Chunked};
use crate::http1::framing::Framing;

mod cache;

pub use cache::{
    give_back, give_buffer, give_fields, give_small, take_buffer, take_fields, take_large,
    take_small, BUFFER, LARGE, SMALL,
};

/// A connection and the bytes read from it but not yet used (`buf[start..]`).
#[derive(Debug)]
pub struct Buffered<S> {
    /// The socket.
    pub io: S,
    /// Read bytes; empty and without capacity while nothing is pending.
    pub buf: Vec<u8>,
    /// Where the unused bytes start.
    pub start: usize,
}

/// Why a relayed body stopped: on which side, so the right party is blamed.
#[derive(Debug)]
pub enum RelayError {
    /// Reading the source failed, timed out (`timed_out`), or it closed early.
    Read {
        /// The I/O error, or none for an early close or a timeout.
        error: Option<io::Error>,
        /// No byte came for the idle timeout.
        timed_out: bool,
    },
    /// The source's chunked framing is invalid.
    Framing(ChunkError),
    /// Writing to the destination failed or timed out (`timed_out`).
    Write {
        /// The I/O error, or none for a timeout.
        error: Option<io::Error>,
        /// The destination took nothing for the idle timeout.
        timed_out: bool,
    },
}

impl std::fmt::Display for RelayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RelayError::Read {
                timed_out: true, ..
            } => f.write_str("no body bytes within the idle timeout"),
            RelayError::Read { error: Some(e), .. } => write!(f, "reading the body: {e}"),
            RelayError::Read { .. } => f.write_str("the connection closed before the body's end"),
            RelayError::Framing(e) => write!(f, "body framing: {e}"),
            RelayError::Write {
                timed_out: true, ..
            } => f.write_str("the receiver took nothing within the idle timeout"),
            RelayError::Write { error: Some(e), .. } => write!(f, "writing the body: {e}"),
            RelayError::Write { .. } => f.write_str("writing the body failed"),
        }
    }
}

impl<S: AsyncRead + Unpin> Buffered<S> {
    /// A connection with nothing read yet.
    pub fn new(io: S) -> Buffered<S> {
        Buffered {
            io,
            buf: Vec::new(),
            start: 0,
        }
    }

    /// A connection with `bytes` read from it already (a buffer from the cache).
    pub fn with_bytes(io: S, bytes: Vec<u8>) -> Buffered<S> {
        Buffered {
            io,
            buf: bytes,
            start: 0,
        }
    }

    /// The bytes read and not yet used.
    pub fn pending(&self) -> &[u8] {
        self.buf.get(self.start..).unwrap_or_default()
    }

    /// Marks `n` pending bytes used; with none left, the buffer goes back to the cache.
    pub fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start >= self.buf.len() {
            self.release();
        }
    }

    /// Gives the buffer back if nothing is pending in it.
    pub fn release(&mut self) {
        if self.start >= self.buf.len() && self.buf.capacity() > 0 {
            give_back(std::mem::take(&mut self.buf));
            self.start = 0;
        }
    }

    /// With nothing pending, holds a [`LARGE`] buffer for the next [`Buffered::fill`]: a
    /// body's reads, past its head's.
    fn large(&mut self) {
        if self.buf.capacity() != LARGE && self.start >= self.buf.len() {
            give_back(std::mem::replace(&mut self.buf, take_large()));
            self.start = 0;
        }
    }

    /// Reads more bytes after the pending ones, waiting at most `within`. `Ok(0)`: the
    /// connection closed. The buffer grows (moving the pending bytes to its front first) up
    /// to `max` bytes pending; beyond, `Ok(0)` is never returned: an error of kind
    /// `OutOfMemory` is.
    pub async fn fill(&mut self, within: Duration, max: usize) -> io::Result<usize> {
        if self.buf.capacity() == 0 {
            self.buf = take_buffer();
            self.start = 0;
        } else if self.buf.capacity() == SMALL {
            // A head read small, and more to come (the rest of the head, or a body): a full
            // buffer, the bytes at the same offsets.
            let mut full = take_buffer();
            full.extend_from_slice(&self.buf);
            give_small(std::mem::replace(&mut self.buf, full));
        } else if self.start > 0 && self.buf.len() == self.buf.capacity() {
            self.buf.copy_within(self.start.., 0);
            self.buf.truncate(self.buf.len() - self.start);
            self.start = 0;
        }
        if self.buf.len() - self.start >= max {
            return Err(io::Error::new(io::ErrorKind::OutOfMemory, "buffer limit"));
        }
        if self.buf.len() == self.buf.capacity() {
            self.buf.reserve(BUFFER);
        }
        let read = tokio::time::timeout(within, self.io.read_buf(&mut self.buf)).await;
        match read {
            Ok(result) => result,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "read timed out")),
        }
    }
}

impl<S: AsyncRead + Unpin> Buffered<S> {
    /// [`more`] as a poll, for a body read when it is polled (`upstream::raw_body::RawBody`): with
    /// nothing pending, reads into a [`LARGE`] buffer; `Ok(0)`: the connection closed.
    pub fn poll_fill(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<usize>> {
        if self.pending().is_empty() {
            self.large();
        } else if self.buf.len() == self.buf.capacity() {
            if self.start > 0 {
                self.buf.copy_within(self.start.., 0);
                self.buf.truncate(self.buf.len() - self.start);
                self.start = 0;
            } else {
                self.buf.reserve(BUFFER);
            }
        }
        let filled = {
            let mut read = tokio::io::ReadBuf::uninit(self.buf.spare_capacity_mut());
            std::task::ready!(std::pin::Pin::new(&mut self.io).poll_read(cx, &mut read))?;
            read.filled().len()
        };
        // SAFETY: `poll_read` initialized the `filled` bytes after `len`.
        unsafe { self.buf.set_len(self.buf.len() + filled) };
        if filled == 0 {
            self.release();
        }
        std::task::Poll::Ready(Ok(filled))
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Buffered<S> {
    /// Reads until `total` bytes are pending (a body to hold after its head), each read
    /// waiting at most `within`, into one buffer that holds them all (moved there first if
    /// need be: [`LARGE`] when it fits). `Ok(false)`: the connection closed first. Errors:
    /// a read failed or timed out (`TimedOut`).
    pub async fn read_to(&mut self, total: usize, within: Duration) -> io::Result<bool> {
        if self.buf.capacity() - self.start < total {
            let mut room = match total <= LARGE {
                true => take_large(),
                false => Vec::with_capacity(total),
            };
            room.extend_from_slice(self.pending());
            give_back(std::mem::replace(&mut self.buf, room));
            self.start = 0;
        }
        while self.pending().len() < total {
            if self.fill(within, total.saturating_add(1)).await? == 0 {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Reads what the connection has now into a buffer from the cache, without waiting:
    /// `None` when it has nothing (the buffer given back at once; the task is woken when
    /// it has). A read through `poll_read`, so that a short read clears tokio's readiness
    /// as `fill`'s does (a later readiness wait then sleeps, and the upstream pool's
    /// stale-socket check stays true). For a connection with nothing pending.
    ///
    /// `small`: into a [`SMALL`] buffer, for a request head (most fit; a request that waits
    /// on its upstream then holds 2 KiB of buffer, not 16); [`Buffered::fill`] moves to a
    /// full buffer when more is read.
    pub async fn read_now(&mut self, small: bool) -> Option<io::Result<usize>> {
        if self.buf.capacity() == 0 {
            self.buf = if small { take_small() } else { take_buffer() };
            self.start = 0;
        }
        let polled = {
            let mut read = std::pin::pin!(self.io.read_buf(&mut self.buf));
            std::future::poll_fn(|cx| std::task::Poll::Ready(read.as_mut().poll(cx))).await
        };
        match polled {
            std::task::Poll::Pending => {
                self.release();
                None
            }
            std::task::Poll::Ready(read) => {
                if !matches!(read, Ok(n) if n > 0) {
                    self.release();
                }
                Some(read)
            }
        }
    }
}

/// A transport that can say when it has bytes to read without a buffer to read them into:
/// a socket's readiness (and, over TLS, what the TLS layer holds already).
pub trait Readiness {
    /// Ready when a read may find bytes (or the end); registers `cx` to be woken otherwise.
    fn poll_readable(&mut self, cx: &mut std::task::Context<'_>)
        -> std::task::Poll<io::Result<()>>;
}

impl Readiness for tokio::net::TcpStream {
    fn poll_readable(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        self.poll_read_ready(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Readiness> Buffered<S> {
    /// [`Buffered::fill`] for a connection with nothing pending, holding no buffer while it
    /// waits: one is taken when the socket is readable, and given back if the read finds
    /// nothing (tokio takes a new socket for readable until a read says otherwise). Errors
    /// as `fill`'s.
    pub async fn fill_when_readable(&mut self, within: Duration) -> io::Result<usize> {
        let read = async {
            loop {
                std::future::poll_fn(|cx| self.io.poll_readable(cx)).await?;
                if let Some(read) = self.read_now(false).await {
                    return read;
                }
            }
        };
        match tokio::time::timeout(within, read).await {
            Ok(result) => result,
            Err(_) => Err(io::Error::new(io::ErrorKind::TimedOut, "read timed out")),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + std::os::fd::AsRawFd> Buffered<S> {
    /// Reads what a connection just accepted has sent already, into a [`SMALL`] buffer,
    /// without waiting. Straight from the socket: tokio knows nothing of a new socket's
    /// readiness until its worker next asks the OS, and waiting for that would cost the
    /// connection a task (or a turn of the event loop) first. `WouldBlock`: nothing yet;
    /// `Ok(0)`: closed. Holds no buffer unless bytes came.
    pub fn read_accepted(&mut self) -> io::Result<usize> {
        if self.buf.capacity() == 0 {
            self.buf = take_small();
            self.start = 0;
        }
        let n = match recv_now(self.io.as_raw_fd(), self.buf.spare_capacity_mut()) {
            Ok(n) => n,
            Err(error) => {
                self.release();
                return Err(error);
            }
        };
        // SAFETY: the kernel initialized the `n` bytes after `len`.
        unsafe { self.buf.set_len(self.buf.len() + n) };
        self.release();
        Ok(n)
    }
}

/// One `recv` on the socket `fd` into `into`, without waiting (`MSG_DONTWAIT`): how many
/// bytes came, each of `into[..n]` then initialized; `Ok(0)`: the peer closed;
/// `WouldBlock`: nothing yet. The caller vouches that `fd` is an open socket.
pub(crate) fn recv_now(
    fd: std::os::fd::RawFd,
    into: &mut [std::mem::MaybeUninit<u8>],
) -> io::Result<usize> {
    // SAFETY: `recv` writes at most `into.len()` bytes into `into`, valid for that many.
    let n = unsafe { libc::recv(fd, into.as_mut_ptr().cast(), into.len(), libc::MSG_DONTWAIT) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// Writes `first` then `second` to `to` as [`write_all`] does, in one vectored write when
/// the socket takes them (a head and the body bytes that go with it: one syscall and one
/// packet, no copy).
pub async fn write_two<W: AsyncWrite + Unpin>(
    to: &mut W,
    first: &[u8],
    second: &[u8],
    within: Duration,
) -> Result<(), RelayError> {
    if second.is_empty() {
        return write_all(to, first, within).await;
    }
    let past = written(
        tokio::time::timeout(within, async {
            let mut done = 0;
            while done < first.len() {
                let slices = [io::IoSlice::new(&first[done..]), io::IoSlice::new(second)];
                match to.write_vectored(&slices).await? {
                    0 => return Err(io::ErrorKind::WriteZero.into()),
                    n => done += n,
                }
            }
            Ok(done - first.len())
        })
        .await,
    )?;
    write_all(to, &second[past..], within).await
}

/// A write's outcome within its time limit, as the relay's error.
fn written<T>(
    outcome: Result<io::Result<T>, tokio::time::error::Elapsed>,
) -> Result<T, RelayError> {
    match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(RelayError::Write {
            error: Some(error),
            timed_out: false,
        }),
        Err(_) => Err(RelayError::Write {
            error: None,
            timed_out: true,
        }),
    }
}

/// Writes all of `bytes` to `to`, each write bounded by `within`.
pub async fn write_all<W: AsyncWrite + Unpin>(
    to: &mut W,
    bytes: &[u8],
    within: Duration,
) -> Result<(), RelayError> {
    // The flush sends what TLS still holds (a no-op on TCP).
    let write = async {
        to.write_all(bytes).await?;
        to.flush().await
    };
    written(tokio::time::timeout(within, write).await)
}

/// A failed read of a body as a [`RelayError::Read`]: `timed_out` for
/// [`io::ErrorKind::TimedOut`] (the idle timeout), the error kept otherwise.
pub fn read_failed(error: io::Error) -> RelayError {
    let timed_out = error.kind() == io::ErrorKind::TimedOut;
    RelayError::Read {
        error: (!timed_out).then_some(error),
        timed_out,
    }
}

/// Reads more of a framed body when none is pending. Errors: the source closed before the
/// body's end, failed, or sent nothing for `idle`.
pub async fn more<R>(from: &mut Buffered<R>, idle: Duration) -> Result<(), RelayError>
where
    R: AsyncRead + Unpin,
{
    if !from.pending().is_empty() {
        return Ok(());
    }
    from.large();
    match from.fill(idle, LARGE).await {
        Ok(0) => Err(RelayError::Read {
            error: None,
            timed_out: false,
        }),
        Ok(_) => Ok(()),
        Err(e) => Err(read_failed(e)),
    }
}

/// [`relay`] for an HTTP/1.0 receiver, which knows no chunked coding: a chunked body goes
/// as its data alone, a close-delimited one as it came; the receiver reads either to the
/// connection's close (its caller closes it after). Errors as `relay`'s.
pub async fn relay_decoded<R, W>(
    from: &mut Buffered<R>,
    to: &mut W,
    framing: Framing,
    idle: Duration,
) -> Result<(), RelayError>
where
    R: AsyncRead + AsyncWrite + Unpin,
    W: AsyncWrite + Unpin,
{
    match framing {
        Framing::Chunked => {
            let mut chunked = Chunked::decoding();
            while !chunked.is_done() {
                more(from, idle).await?;
                let data = chunked.in_data();
                let progress = chunked.scan(from.pending()).map_err(RelayError::Framing)?;
                if data {
                    write_all(to, &from.pending()[..progress.used], idle).await?;
                }
                from.consume(progress.used);
            }
            Ok(())
        }
        Framing::Close => loop {
            if from.pending().is_empty() {
                from.large();
                match from.fill(idle, LARGE).await {
                    Ok(0) => return Ok(()),
                    Ok(_) => {}
                    Err(e) => return Err(read_failed(e)),
                }
            }
            let n = from.pending().len();
            write_all(to, from.pending(), idle).await?;
            from.consume(n);
        },
        framing => relay(from, to, framing, Chunked::new(), idle).await,
    }
}

/// Relays a body framed by `framing` from `from` (its pending bytes first) to `to`, as it
/// came; a close-delimited body is written chunked (`to` is then told the framing by the
/// caller's head). Each read and write waits at most `idle`. `chunked` is the scanner of a
/// chunked body whose first bytes the caller already checked (or a new one).
///
/// Errors: which side failed; a broken framing is the source's.
pub async fn relay<R, W>(
    from: &mut Buffered<R>,
    to: &mut W,
    framing: Framing,
    mut chunked: Chunked,
    idle: Duration,
) -> Result<(), RelayError>
where
    R: AsyncRead + AsyncWrite + Unpin,
    W: AsyncWrite + Unpin,
{
    match framing {
        Framing::Empty => Ok(()),
        Framing::Length(mut left) => {
            while left > 0 {
                more(from, idle).await?;
                let pending = from.pending();
                let take = pending
                    .len()
                    .min(usize::try_from(left).unwrap_or(usize::MAX));
                write_all(to, &pending[..take], idle).await?;
                from.consume(take);
                left -= take as u64;
            }
            Ok(())
        }
        Framing::Chunked => loop {
            if chunked.is_done() {
                return Ok(());
            }
            more(from, idle).await?;
            // A request's trailer section is checked and dropped (`Chunked::request`): only
            // the body's final CRLF goes on, once the whole section has come and is valid.
            let dropped = chunked.in_trailers();
            let progress = chunked.scan(from.pending()).map_err(RelayError::Framing)?;
            match dropped {
                false => write_all(to, &from.pending()[..progress.used], idle).await?,
                true if progress.done => write_all(to, b"\r\n", idle).await?,
                true => {}
            }
            from.consume(progress.used);
        },
        Framing::Close => {
            let mut size = Vec::with_capacity(20);
            loop {
                if from.pending().is_empty() {
                    from.large();
                    match from.fill(idle, LARGE).await {
                        Ok(0) => return write_all(to, b"0\r\n\r\n", idle).await,
                        Ok(_) => {}
                        Err(e) => return Err(read_failed(e)),
                    }
                }
                let pending = from.pending();
                size.clear();
                size.extend_from_slice(format!("{:x}\r\n", pending.len()).as_bytes());
                write_all(to, &size, idle).await?;
                write_all(to, pending, idle).await?;
                write_all(to, b"\r\n", idle).await?;
                let n = pending.len();
                from.consume(n);
            }
        }
    }
}
