//! Bodies with an idle timeout: a body that sends nothing for `idle` ends with an error, so a
//! stalled client or upstream cannot hold a connection (and a task) forever.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

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

#[derive(Debug)]
struct Idle(Duration);

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
