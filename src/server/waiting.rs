//! Accepted plain connections that have sent nothing yet (the own engine, one accept loop
//! per worker), held by the accept loop rather than by a task each.
//!
//! Most clients send their request as they connect, and the accept loop reads it at once
//! (`Buffered::read_accepted`); the others (pre-connects, pools warming up, slowloris) wait
//! here until their socket turns readable, then get their task with what was read. A
//! waiting connection costs its socket's registration and an entry of about 150 bytes,
//! where a task with its own timer and drain waiter cost 640 (issue 29 asks ≤ 1 KiB for a
//! connection that never sent a request).
//!
//! The header read timeout is kept coarsely, as nginx keeps its timers: connections are
//! put in buckets by deadline, one bucket per sixteenth of the timeout, and a bucket is
//! closed whole when the last deadline in it has passed, so a silent connection is closed
//! between the timeout and a sixteenth of it later. One timer, for the oldest bucket; a
//! bucket's connections are polled only when one of them was woken, so an accept loop
//! with nothing waiting pays one flag test per turn. A drain on `SIGTERM` drops them all
//! (the accept loop ends); a hand-over to a new process serves them to the end.

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use futures_util::task::AtomicWaker;
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// Buckets per header read timeout: how late a silent connection may be closed, as a
/// fraction of the timeout.
const BUCKETS: u32 = 16;

/// The connections of one worker's listener that have sent nothing yet.
pub(super) struct Waiting {
    timeout: Duration,
    /// A bucket's span of deadlines.
    width: Duration,
    buckets: VecDeque<Bucket>,
    /// Armed for the oldest bucket's end.
    timer: Pin<Box<Sleep>>,
    task: Arc<Task>,
}

/// The accept loop's task, and whether any bucket was woken since it last looked.
struct Task {
    waker: AtomicWaker,
    woken: AtomicBool,
}

/// Connections whose deadlines fall within one `width`, closed together at `end`.
struct Bucket {
    end: Instant,
    conns: FuturesUnordered<FirstBytes>,
    flag: Arc<Flag>,
    /// `flag` as a waker, for polling `conns`.
    waker: Waker,
}

/// Set when one of a bucket's connections is woken.
struct Flag {
    woken: AtomicBool,
    task: Arc<Task>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.raise();
        self.task.waker.wake();
    }
}

impl Flag {
    /// Marks the bucket and the accept loop to be polled, without waking the loop (for a
    /// connection pushed from the loop itself).
    fn raise(&self) {
        self.woken.store(true, Ordering::Release);
        self.task.woken.store(true, Ordering::Release);
    }
}

/// A connection waiting for its first bytes: ready with them, read into a small buffer
/// (its task parses them; no second read), `None` when it closed or failed first.
struct FirstBytes {
    stream: Option<TcpStream>,
    client: SocketAddr,
}

/// A connection whose first bytes came: its socket, the client's address, the bytes.
pub(super) type Ready = (TcpStream, SocketAddr, Vec<u8>);

impl Future for FirstBytes {
    type Output = Option<Ready>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let Some(stream) = &self.stream else {
                return Poll::Ready(None);
            };
            match stream.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return Poll::Ready(None),
                Poll::Ready(Ok(())) => {}
            }
            let mut bytes = crate::relay::take_small();
            // A read that finds nothing clears the readiness: the loop then registers.
            match stream.try_read_buf(&mut bytes) {
                Ok(n) if n > 0 => {
                    let client = self.client;
                    return Poll::Ready(self.stream.take().map(|s| (s, client, bytes)));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    crate::relay::give_small(bytes)
                }
                _ => {
                    crate::relay::give_small(bytes);
                    return Poll::Ready(None);
                }
            }
        }
    }
}

impl Waiting {
    /// Nothing waiting; silent connections are closed `timeout` (the header read timeout)
    /// after they were accepted, up to a sixteenth of it later.
    pub(super) fn new(timeout: Duration) -> Waiting {
        Waiting {
            timeout,
            width: (timeout / BUCKETS).max(Duration::from_millis(1)),
            buckets: VecDeque::new(),
            timer: Box::pin(tokio::time::sleep(timeout)),
            task: Arc::new(Task {
                waker: AtomicWaker::new(),
                woken: AtomicBool::new(false),
            }),
        }
    }

    /// Holds a connection just accepted that had nothing to read.
    pub(super) fn push(&mut self, stream: TcpStream, client: SocketAddr) {
        let deadline = Instant::now() + self.timeout;
        if self.buckets.back().is_none_or(|b| b.end < deadline) {
            let end = deadline + self.width;
            if self.buckets.is_empty() {
                self.timer.as_mut().reset(end);
            }
            let flag = Arc::new(Flag {
                woken: AtomicBool::new(false),
                task: self.task.clone(),
            });
            self.buckets.push_back(Bucket {
                end,
                conns: FuturesUnordered::new(),
                waker: Waker::from(flag.clone()),
                flag,
            });
        }
        if let Some(bucket) = self.buckets.back_mut() {
            bucket.conns.push(FirstBytes {
                stream: Some(stream),
                client,
            });
            // Polled at the loop's next turn, which registers its socket's waker.
            bucket.flag.raise();
        }
    }

    /// The next waiting connection whose first bytes came, with them; buckets past their end are
    /// closed on the way. Pending while there is none (the caller's task is woken).
    pub(super) fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Ready> {
        self.task.waker.register(cx.waker());
        while !self.buckets.is_empty() && self.timer.as_mut().poll(cx).is_ready() {
            let now = Instant::now();
            while self.buckets.front().is_some_and(|b| b.end <= now) {
                self.buckets.pop_front();
            }
            if let Some(front) = self.buckets.front() {
                let end = front.end;
                self.timer.as_mut().reset(end);
            }
        }
        if !self.task.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        for bucket in &mut self.buckets {
            if !bucket.flag.woken.swap(false, Ordering::AcqRel) {
                continue;
            }
            let mut bucket_cx = Context::from_waker(&bucket.waker);
            loop {
                match bucket.conns.poll_next_unpin(&mut bucket_cx) {
                    Poll::Ready(Some(Some(ready))) => {
                        // Others may be ready too: looked at again at the next turn.
                        bucket.flag.raise();
                        return Poll::Ready(ready);
                    }
                    // Closed before sending anything: dropped.
                    Poll::Ready(Some(None)) => {}
                    Poll::Ready(None) | Poll::Pending => break,
                }
            }
        }
        Poll::Pending
    }

    /// Closes every waiting connection (the process is short of descriptors: they are the
    /// first to go, having sent nothing).
    pub(super) fn close_all(&mut self) {
        self.buckets.clear();
    }

    /// Whether no connection waits any more.
    pub(super) fn is_empty(&self) -> bool {
        self.buckets.iter().all(|b| b.conns.is_empty())
    }

    /// [`Waiting::poll_ready`] as a future.
    pub(super) async fn ready(&mut self) -> Ready {
        std::future::poll_fn(|cx| self.poll_ready(cx)).await
    }
}
