//! Body wrappers of the data path.
//!
//! - [`IdleTimeout`]: a body that sends nothing for `idle` ends with an error, so a stalled
//!   client or upstream cannot hold a connection (and a task) forever.
//! - [`Watched`]: a client body on its way upstream reports, through a [`BodyWatch`], when it
//!   has ended, whether it failed (and how), and whether it is waiting on the client. hyper's
//!   client reports a failed request body as one more send error; the watch is how the router
//!   knows the client, not the upstream, is to blame, and when the response-header timer may
//!   start (docs/data-path.md: counted from the end of the request body).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::sync::Notify;
use tokio::time::{Instant, Sleep};

use crate::error::{Error, ErrorKind};

/// The error type of the bodies the router passes on.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `inner`, failing if no frame arrives for `idle`.
///
/// The timer is made only when the body first has to wait, and re-armed only when it waits
/// again after progress: a small body that is already buffered (most responses) costs no
/// timer at all, and a long stream costs one timer reset per wait, not one per frame.
#[derive(Debug)]
pub struct IdleTimeout<B> {
    inner: B,
    idle: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    /// A frame arrived since the timer was last armed.
    progressed: bool,
}

impl<B> IdleTimeout<B> {
    /// Wraps `inner`; the clock starts when it first waits.
    pub fn new(inner: B, idle: Duration) -> Self {
        IdleTimeout {
            inner,
            idle,
            sleep: None,
            progressed: false,
        }
    }
}

/// The error of an [`IdleTimeout`] body that waited too long.
#[derive(Debug)]
pub struct Idle(pub Duration);

impl std::fmt::Display for Idle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "body idle for {} ms", self.0.as_millis())
    }
}

impl std::error::Error for Idle {}

impl<B> Body for IdleTimeout<B>
where
    B: Body + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.progressed = true;
                Poll::Ready(frame.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => {
                let idle = this.idle;
                let sleep = match &mut this.sleep {
                    Some(sleep) => {
                        if this.progressed {
                            sleep.as_mut().reset(Instant::now() + idle);
                        }
                        sleep
                    }
                    None => this.sleep.insert(Box::pin(tokio::time::sleep(idle))),
                };
                this.progressed = false;
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(Idle(this.idle))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// `inner`, keeping `guard` until the body is dropped: when it has been sent whole, or when
/// the client went away. Response bodies carry the guards that count their request in flight,
/// so a long download stays counted (in the gauge, and by P2C on its upstream) until it ends,
/// not only until its headers.
#[derive(Debug)]
pub struct Guarded<B, G> {
    inner: B,
    _guard: G,
}

impl<B, G> Guarded<B, G> {
    /// Wraps `inner`; `guard` is dropped with it.
    pub fn new(inner: B, guard: G) -> Self {
        Guarded {
            inner,
            _guard: guard,
        }
    }
}

impl<B: Body + Unpin, G: Unpin> Body for Guarded<B, G> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Classifies an error read from a client's body: our idle timer (408), hyper's decoder
/// refusing the framing (`InvalidInput`/`InvalidData`, 400), or the client gone (an early
/// EOF, a reset, an HTTP/2 stream reset).
pub fn client_error(e: &(dyn std::error::Error + 'static)) -> Error {
    let mut cause: &(dyn std::error::Error + 'static) = e;
    let mut kind = ErrorKind::Aborted;
    loop {
        if cause.is::<Idle>() {
            kind = ErrorKind::BodyTimeout;
            break;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as Io;
            match io.kind() {
                Io::InvalidInput | Io::InvalidData => kind = ErrorKind::BadFraming,
                // The own engine's reader gave up on a silent client (`bridge::pump`, as
                // `IdleTimeout` would at the same deadline): 408, not an abort.
                Io::TimedOut => kind = ErrorKind::BodyTimeout,
                _ => {}
            }
            break;
        }
        match cause.source() {
            Some(next) => cause = next,
            None => break,
        }
    }
    Error::new(kind, cause.to_string())
}

/// What a [`Watched`] body reports to the request that sends it.
#[derive(Debug, Default)]
pub struct BodyWatch {
    /// The body ended: sent whole, failed, or dropped by the upstream connection.
    ended: AtomicBool,
    /// Set before `ended` when the body failed.
    failure: OnceLock<Error>,
    /// Frames handed to the upstream connection so far.
    frames: AtomicU64,
    /// The last poll found no frame ready: the body waits on the client, not the upstream.
    waiting_on_client: AtomicBool,
    notify: Notify,
}

impl BodyWatch {
    /// Completes once the body has ended (at once if it already has).
    pub async fn ended(&self) {
        if self.ended.load(Ordering::Acquire) {
            return;
        }
        // `notify_one` leaves a permit when no one waits yet, so an end between the check
        // above and this wait is not lost.
        self.notify.notified().await;
    }

    /// The client's error, if its body failed.
    pub fn failure(&self) -> Option<&Error> {
        self.failure.get()
    }

    /// Frames handed to the upstream connection so far (progress, for the upstream side's
    /// idle check).
    pub fn frames(&self) -> u64 {
        self.frames.load(Ordering::Relaxed)
    }

    /// True when the body is waiting for the client to send more (its own idle timer runs);
    /// false when a frame was handed over and the upstream connection has not asked again.
    pub fn waiting_on_client(&self) -> bool {
        self.waiting_on_client.load(Ordering::Relaxed)
    }

    fn end(&self) {
        if !self.ended.swap(true, Ordering::AcqRel) {
            self.notify.notify_one();
        }
    }
}

/// A client body on its way upstream, reporting to a [`BodyWatch`].
#[derive(Debug)]
pub struct Watched<B> {
    inner: B,
    watch: Arc<BodyWatch>,
}

impl<B> Watched<B> {
    /// Wraps `inner`; the returned watch is the sender's view of it.
    pub fn new(inner: B) -> (Self, Arc<BodyWatch>) {
        let watch = Arc::new(BodyWatch::default());
        (
            Watched {
                inner,
                watch: watch.clone(),
            },
            watch,
        )
    }
}

impl<B> Body for Watched<B>
where
    B: Body<Error = BoxError> + Unpin,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let watch = &this.watch;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                watch.waiting_on_client.store(true, Ordering::Relaxed);
                Poll::Pending
            }
            Poll::Ready(Some(Ok(frame))) => {
                watch.waiting_on_client.store(false, Ordering::Relaxed);
                watch.frames.fetch_add(1, Ordering::Relaxed);
                // hyper stops polling once `is_end_stream` says so, without asking for `None`.
                if this.inner.is_end_stream() {
                    watch.end();
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                let _ = watch.failure.set(client_error(&*e));
                watch.end();
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                watch.end();
                Poll::Ready(None)
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for Watched<B> {
    fn drop(&mut self) {
        // The upstream connection gave the body up (it answered early, or failed).
        self.watch.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_body_errors_are_classified_by_their_io_kind() {
        let framing = std::io::Error::new(std::io::ErrorKind::InvalidInput, "bad chunk size");
        assert_eq!(client_error(&framing).kind, ErrorKind::BadFraming);
        let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "early eof");
        assert_eq!(client_error(&eof).kind, ErrorKind::Aborted);
        let idle = Idle(Duration::from_millis(5));
        assert_eq!(client_error(&idle).kind, ErrorKind::BodyTimeout);
    }
}

/// A body with what the router already read of it put back in front: a `grpc:` route reads a
/// client's first message to find the id, then streams it and the rest on; a chunked upstream
/// answer has its first frame read before its head is relayed (`proxy::bad_answer`).
#[derive(Debug)]
pub struct Prefixed {
    prefix: Option<Ahead>,
    rest: Inbound,
}

/// A body as it arrives from a peer: hyper's (an HTTP/2 client's request, an upstream's
/// answer) or the own HTTP/1.x engine's (a client's request body, fed by its connection:
/// [`OwnBody`]).
#[derive(Debug)]
pub enum Inbound {
    /// Read by hyper.
    Hyper(hyper::body::Incoming),
    /// Read by the own engine.
    Own(OwnBody),
    /// An HTTP/1.1 upstream's answer, read by the own engine (`upstream::h1`). Boxed: every
    /// request's future holds `Inbound`s, most of them client bodies (40 bytes).
    Raw(Box<super::raw_body::RawBody>),
}

impl From<hyper::body::Incoming> for Inbound {
    fn from(body: hyper::body::Incoming) -> Inbound {
        Inbound::Hyper(body)
    }
}

impl From<OwnBody> for Inbound {
    fn from(body: OwnBody) -> Inbound {
        Inbound::Own(body)
    }
}

impl Body for Inbound {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        match self.get_mut() {
            Inbound::Hyper(body) => Pin::new(body)
                .poll_frame(cx)
                .map(|f| f.map(|r| r.map_err(Into::into))),
            Inbound::Own(body) => Pin::new(body).poll_frame(cx),
            Inbound::Raw(body) => Pin::new(body).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Inbound::Hyper(body) => body.is_end_stream(),
            Inbound::Own(body) => body.is_end_stream(),
            Inbound::Raw(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Inbound::Hyper(body) => body.size_hint(),
            Inbound::Own(body) => body.size_hint(),
            Inbound::Raw(body) => body.size_hint(),
        }
    }
}

/// What the own engine's connection feeds an [`OwnBody`]: the body's data as it is read
/// and decoded, then its end, or why it failed (an `io::Error` whose kind
/// [`client_error`] classifies).
#[derive(Debug)]
pub enum Feed {
    /// The next bytes of the body (decoded: no chunk framing).
    Data(bytes::Bytes),
    /// The body ended by its framing.
    End,
    /// The body's framing broke, the client went away or fell silent.
    Failed(std::io::Error),
}

/// An HTTP/1.x client's request body, read by the own engine's connection and handed over a
/// channel (`proxy::h1::bridge`). It ends only when its framing says so (`Feed::End`, or
/// the declared length reached): a channel closed before is an error, so a body cut
/// midway is never completed upstream.
#[derive(Debug)]
pub struct OwnBody {
    rx: tokio::sync::mpsc::Receiver<Feed>,
    /// Bytes still to come of a `Content-Length` body.
    left: Option<u64>,
    done: bool,
    /// Notified at the first poll: the request's `Expect: 100-continue` is answered then.
    polled: Option<Arc<Notify>>,
}

impl OwnBody {
    /// A body of `length` bytes (`None`: chunked), fed through the returned sender.
    /// `polled` is notified when the body is first asked for.
    pub fn channel(
        length: Option<u64>,
        polled: Option<Arc<Notify>>,
    ) -> (tokio::sync::mpsc::Sender<Feed>, OwnBody) {
        let (tx, rx) = tokio::sync::mpsc::channel(2);
        let body = OwnBody {
            rx,
            done: length == Some(0),
            left: length,
            polled,
        };
        (tx, body)
    }
}

impl Body for OwnBody {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        if let Some(polled) = this.polled.take() {
            polled.notify_one();
        }
        if this.done {
            return Poll::Ready(None);
        }
        let early = || {
            let e = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "client body cut short");
            Poll::Ready(Some(Err(Box::new(e) as BoxError)))
        };
        match this.rx.poll_recv(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Feed::Data(data))) => {
                if let Some(left) = &mut this.left {
                    let Some(rest) = left.checked_sub(data.len() as u64) else {
                        return early();
                    };
                    *left = rest;
                    this.done = rest == 0;
                }
                Poll::Ready(Some(Ok(Frame::data(data))))
            }
            Poll::Ready(Some(Feed::End)) if this.left.is_none_or(|l| l == 0) => {
                this.done = true;
                Poll::Ready(None)
            }
            Poll::Ready(Some(Feed::Failed(e))) => {
                this.done = true;
                Poll::Ready(Some(Err(Box::new(e))))
            }
            Poll::Ready(Some(Feed::End) | None) => {
                this.done = true;
                early()
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done
    }

    fn size_hint(&self) -> SizeHint {
        match self.left {
            Some(left) => SizeHint::with_exact(left),
            None => SizeHint::default(),
        }
    }
}

/// A frame read ahead of the rest. Trailers are boxed: they come first only in a body of
/// nothing else, and every body carries the slot.
#[derive(Debug)]
enum Ahead {
    Data(bytes::Bytes),
    Trailers(Box<http::HeaderMap>),
}

impl Prefixed {
    /// The body as it arrives, nothing read yet.
    pub fn new(rest: impl Into<Inbound>) -> Prefixed {
        Prefixed {
            prefix: None,
            rest: rest.into(),
        }
    }

    /// `prefix` (already read), then what is left of `rest`.
    pub fn with_prefix(prefix: bytes::Bytes, rest: impl Into<Inbound>) -> Prefixed {
        Prefixed {
            prefix: Some(prefix).filter(|p| !p.is_empty()).map(Ahead::Data),
            rest: rest.into(),
        }
    }

    /// `first` (a frame already read, if any), then what is left of `rest`.
    pub fn with_first(first: Option<Frame<bytes::Bytes>>, rest: impl Into<Inbound>) -> Prefixed {
        let rest = rest.into();
        match first.map(Frame::into_data) {
            None => Prefixed::new(rest),
            Some(Ok(data)) => Prefixed::with_prefix(data, rest),
            Some(Err(frame)) => Prefixed {
                prefix: frame
                    .into_trailers()
                    .ok()
                    .map(|t| Ahead::Trailers(Box::new(t))),
                rest,
            },
        }
    }
}

impl Body for Prefixed {
    type Data = bytes::Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        match this.prefix.take() {
            None => Pin::new(&mut this.rest).poll_frame(cx),
            Some(Ahead::Data(data)) => Poll::Ready(Some(Ok(Frame::data(data)))),
            Some(Ahead::Trailers(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(*trailers)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let mut hint = self.rest.size_hint();
        let extra = match &self.prefix {
            Some(Ahead::Data(data)) => data.len() as u64,
            _ => 0,
        };
        hint.set_lower(hint.lower() + extra);
        if let Some(upper) = hint.upper() {
            hint.set_upper(upper + extra);
        }
        hint
    }
}
