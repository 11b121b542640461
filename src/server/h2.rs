//! The timers of an HTTP/2 client connection, both `timeouts.idle_ms` (docs/config.md):
//!
//! - **Connection idle** (nginx `keepalive_timeout`, Envoy `idle_timeout`): with no stream
//!   open for `idle_ms` the connection is closed with GOAWAY. hyper's HTTP/2 server has
//!   keep-alive pings but no idle timeout. One timer per connection, re-armed when it fires,
//!   not per request. hyper's graceful close waits for the client to answer the PING it
//!   sends with its first GOAWAY; a client that never does is cut after [`goaway_grace`]
//!   (it was `idle_ms` more: twice the idle timeout in all).
//! - **Stream progress** (nginx `send_timeout`, Envoy `stream_idle_timeout`): a response whose
//!   body the client takes nothing of for `idle_ms` is reset (RST_STREAM), which drops its
//!   body and with it the upstream connection and in-flight counts. hyper stops polling a
//!   response body while the stream's flow-control window is closed, so the body's own idle
//!   timer ([`crate::upstream::body::IdleTimeout`]) never runs then; the timer is instead in
//!   the task hyper spawns for each stream, through [`Exec`], and made only for a response
//!   still being sent when its task has to wait. A body that waits on the upstream is left to
//!   its own timer, so the upstream, not the client, is blamed for it.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::time::Instant;

use crate::error::ErrorKind;

/// Longest wait for a client to answer the GOAWAY's PING: one second, or `idle` when
/// shorter (a round trip across regions is well under a second).
pub fn goaway_grace(idle: Duration) -> Duration {
    idle.min(Duration::from_secs(1))
}

tokio::task_local! {
    /// The stream whose task is running, for the service to hand to its response body.
    static STREAM: Arc<Stream>;
}

/// One connection's streams, for its idle timer.
#[derive(Debug)]
pub struct Streams {
    open: AtomicUsize,
    /// When the last stream ended, in ms since `epoch`.
    last_end_ms: AtomicU64,
    epoch: Instant,
}

impl Streams {
    /// No stream yet; the connection counts as idle from now.
    pub fn new() -> Arc<Streams> {
        Arc::new(Streams {
            open: AtomicUsize::new(0),
            last_end_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        })
    }

    /// When the connection will have been idle for `idle`, or None if it already has.
    pub fn idle_until(&self, idle: Duration) -> Option<Instant> {
        let now = Instant::now();
        if self.open.load(Ordering::Acquire) > 0 {
            return Some(now + idle);
        }
        let last = self.epoch + Duration::from_millis(self.last_end_ms.load(Ordering::Relaxed));
        let until = last + idle;
        (until > now).then_some(until)
    }
}

/// Counts a stream open until dropped.
struct Open(Arc<Streams>);

impl Drop for Open {
    fn drop(&mut self) {
        let streams = &self.0;
        let ms = streams.epoch.elapsed().as_millis() as u64;
        streams.last_end_ms.store(ms, Ordering::Relaxed);
        // Released after the time, so a timer that sees no stream open sees when it ended.
        streams.open.fetch_sub(1, Ordering::Release);
    }
}

/// One stream's response as its progress timer sees it.
#[derive(Debug, Default)]
struct Stream {
    /// The service answered: the response body is being sent.
    responding: AtomicBool,
    /// Frames the body has handed to hyper.
    frames: AtomicU64,
    /// The body's last poll found nothing: it waits on the upstream, not the client.
    waiting_on_upstream: AtomicBool,
}

/// The executor of an HTTP/2 connection's stream tasks: each runs with a progress timer and
/// is counted open in the connection's [`Streams`].
#[derive(Clone)]
pub struct Exec {
    streams: Arc<Streams>,
    idle: Duration,
}

impl Exec {
    /// Stream tasks counted in `streams`, reset after `idle` without progress.
    pub fn new(streams: Arc<Streams>, idle: Duration) -> Exec {
        Exec { streams, idle }
    }
}

impl<F> hyper::rt::Executor<F> for Exec
where
    F: Future<Output = ()> + Send + 'static,
{
    /// Runs the stream's task at once, in the connection's task that accepted it, until it
    /// first waits; only a stream that waits (on its upstream, on the client's window) gets
    /// a task of its own. A stream answered at once (a shed 503, a problem) has its answer
    /// queued before the connection's next write, not after every task already queued on
    /// the worker: in a burst of 6,000 streams, the first 503 went out after 175 ms, once
    /// the worker had run each stream's task. The first poll wakes nothing (a no-op waker):
    /// the spawned task's own first poll registers its waker with whatever it waits on.
    fn execute(&self, task: F) {
        self.streams.open.fetch_add(1, Ordering::AcqRel);
        let open = Open(self.streams.clone());
        let stream = Arc::new(Stream::default());
        let idle = self.idle;
        let mut task = Box::pin(StreamTask {
            task: STREAM.scope(stream.clone(), task),
            timer: tokio::time::sleep(idle),
            stream,
            idle,
            armed: false,
            seen: 0,
            _open: open,
        });
        let mut cx = Context::from_waker(std::task::Waker::noop());
        // Outside the connection's cooperative budget: a stream's task has a budget of its
        // own, and 100 streams accepted in one poll spent the connection's, whose socket
        // then yielded behind every stream task queued (the first 503s after 340 ms).
        let first = tokio::task::unconstrained(task.as_mut());
        if std::pin::pin!(first).poll(&mut cx).is_pending() {
            tokio::spawn(task);
        }
    }
}

pin_project_lite::pin_project! {
    /// A stream's task: `task` until it ends, or until its response made no progress for
    /// `idle` while not waiting on the upstream; then it is dropped, which resets the stream
    /// (RST_STREAM CANCEL) and drops the body. One struct rather than an `async` block
    /// around an `async fn`: rustc laid the stream's future out twice in those, once as the
    /// argument and once pinned (27.9 KiB per stream, 9.3 now; `-Zprint-type-sizes`).
    struct StreamTask<F> {
        #[pin]
        task: tokio::task::futures::TaskLocalFuture<Arc<Stream>, F>,
        // Made with the task, registered with the timer only when first polled.
        #[pin]
        timer: tokio::time::Sleep,
        stream: Arc<Stream>,
        idle: Duration,
        armed: bool,
        seen: u64,
        _open: Open,
    }
}

impl<F: Future<Output = ()>> Future for StreamTask<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        if this.task.as_mut().poll(cx).is_ready() {
            return Poll::Ready(());
        }
        if !this.stream.responding.load(Ordering::Relaxed) {
            // Still waiting for the answer: bounded by the upstream timeouts.
            return Poll::Pending;
        }
        let frames = this.stream.frames.load(Ordering::Relaxed);
        if !*this.armed || frames != *this.seen {
            *this.seen = frames;
            *this.armed = true;
            this.timer.as_mut().reset(Instant::now() + *this.idle);
        }
        loop {
            if this.timer.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if !this.stream.waiting_on_upstream.load(Ordering::Relaxed) {
                crate::metrics::client_error(ErrorKind::SendTimeout);
                tracing::debug!(
                    idle_ms = this.idle.as_millis() as u64,
                    "the client took nothing of a response; stream reset"
                );
                return Poll::Ready(());
            }
            // The body's own idle timer runs; look again later.
            this.timer.as_mut().reset(Instant::now() + *this.idle);
        }
    }
}

/// `response`'s body reporting its progress to the stream's timer (when served by [`Exec`]).
pub fn track<B>(response: hyper::Response<B>) -> hyper::Response<Progress<B>> {
    let stream = STREAM
        .try_with(|stream| {
            stream.responding.store(true, Ordering::Relaxed);
            stream.clone()
        })
        .ok();
    response.map(|inner| Progress { inner, stream })
}

/// A response body that reports each frame it hands over, and whether it waits on the
/// upstream, to its stream's progress timer.
#[derive(Debug)]
pub struct Progress<B> {
    inner: B,
    stream: Option<Arc<Stream>>,
}

impl<B: Body + Unpin> Body for Progress<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Some(stream) = &this.stream {
            let pending = polled.is_pending();
            stream.waiting_on_upstream.store(pending, Ordering::Relaxed);
            if !pending {
                stream.frames.fetch_add(1, Ordering::Relaxed);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream answered at once (a shed 503) is answered inside `execute`, in the
    /// connection's task: no task of its own, no wait behind the worker's queue.
    #[tokio::test(flavor = "current_thread")]
    async fn a_stream_answered_at_once_runs_inside_execute() {
        let streams = Streams::new();
        let exec = Exec::new(streams.clone(), Duration::from_secs(5));
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        hyper::rt::Executor::execute(&exec, async move {
            flag.store(true, Ordering::Relaxed);
        });
        assert!(
            ran.load(Ordering::Relaxed),
            "the stream ran before execute returned"
        );
        assert_eq!(
            streams.open.load(Ordering::Acquire),
            0,
            "and counted closed"
        );
    }

    /// The first poll is outside the connection's cooperative budget: a connection that has
    /// spent its budget (on 100 streams accepted in one poll) still answers the next stream
    /// at once, rather than every resource returning `Pending` to it.
    #[tokio::test(flavor = "current_thread")]
    async fn a_stream_answered_at_once_does_not_spend_the_connections_budget() {
        let streams = Streams::new();
        let exec = Exec::new(streams.clone(), Duration::from_secs(5));
        let mut spent = false;
        for _ in 0..10_000 {
            if futures_util::poll!(std::pin::pin!(tokio::task::consume_budget())).is_pending() {
                spent = true;
                break;
            }
        }
        assert!(spent, "the connection's budget is spent");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tx.send(()).expect("sent");
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        hyper::rt::Executor::execute(&exec, async move {
            // Ready, but a budgeted resource: `Pending` under a spent budget.
            rx.await.expect("the value");
            flag.store(true, Ordering::Relaxed);
        });
        assert!(
            ran.load(Ordering::Relaxed),
            "the stream ran before execute returned"
        );
    }

    /// A stream that waits gets a task of its own, whose waker is the one its first poll
    /// outside `execute` registers: it is woken and ends when what it waits on comes.
    #[tokio::test(flavor = "current_thread")]
    async fn a_stream_that_waits_is_woken_in_a_task_of_its_own() {
        let streams = Streams::new();
        let exec = Exec::new(streams.clone(), Duration::from_secs(5));
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        hyper::rt::Executor::execute(&exec, async move {
            let _ = rx.await;
            let _ = done_tx.send(());
        });
        assert_eq!(
            streams.open.load(Ordering::Acquire),
            1,
            "waiting, counted open"
        );
        // Let the spawned task poll (and register its waker) before the value comes.
        tokio::task::yield_now().await;
        tx.send(()).expect("the stream still waits");
        tokio::time::timeout(Duration::from_secs(5), done_rx)
            .await
            .expect("woken")
            .expect("ended");
        assert_eq!(streams.open.load(Ordering::Acquire), 0);
    }
}
