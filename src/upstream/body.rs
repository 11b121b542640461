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
#[derive(Debug)]
pub struct IdleTimeout<B> {
    inner: B,
    idle: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl<B> IdleTimeout<B> {
    /// Wraps `inner`; the clock starts now.
    pub fn new(inner: B, idle: Duration) -> Self {
        IdleTimeout {
            inner,
            idle,
            sleep: Box::pin(tokio::time::sleep(idle)),
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
                let idle = this.idle;
                this.sleep.as_mut().reset(Instant::now() + idle);
                Poll::Ready(frame.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => match this.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(Idle(this.idle))))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
