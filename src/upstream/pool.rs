//! One worker's pooled connections to one upstream, on `hyper::client::conn`: HTTP/1.1
//! connections one exchange at a time, or one shared HTTP/2 connection.
//!
//! Upstream connection management is what this product exists for, so the pool is ours
//! rather than `hyper-util`'s legacy client (whose pool hashes a key, takes a shared lock and
//! boxes futures per request). A pool belongs to one worker thread (`crate::workers`): only
//! that thread's event loop drives its connections, so the lock below is never contended.
//!
//! An HTTP/1.1 connection carries one exchange at a time. After a response's head arrives its
//! sender goes back into the pool at once; hyper marks it ready again when the response body
//! has been read to the end (a body dropped part way closes the connection). A checkout takes
//! the most recently used ready sender (its connection is the warmest), dropping on the way
//! those whose connection closed or that sat idle longer than the idle timeout.
//!
//! An HTTP/2 connection multiplexes: a worker keeps one per upstream, handed out (cloned) to
//! every request while it is open; the `h2` crate queues streams beyond the upstream's
//! `SETTINGS_MAX_CONCURRENT_STREAMS`, and once a GOAWAY closes it the next request opens a
//! new one (a request it refused is sent again there, see `UpstreamState::exchange`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::client::conn::{http1, http2};

use super::UpstreamBody;

/// Senders kept per pool, busy or idle; connections beyond it are used once and closed.
const MAX_POOLED: usize = 512;

/// Requests waiting for a busy connection to be freed, woken one per freed connection.
///
/// Every busy sender is polled with one waker, this queue's: hyper keeps a single waker per
/// connection, so a waker per waiting request would leave all but the last unwoken.
#[derive(Default)]
struct Waiters {
    queue: Mutex<std::collections::VecDeque<std::task::Waker>>,
    /// `queue.len()`, read without the lock on every checkin.
    len: std::sync::atomic::AtomicUsize,
}

impl Waiters {
    fn set_len(&self, queue: &std::collections::VecDeque<std::task::Waker>) {
        self.len
            .store(queue.len(), std::sync::atomic::Ordering::Relaxed);
    }
}

impl std::task::Wake for Waiters {
    fn wake(self: std::sync::Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &std::sync::Arc<Self>) {
        let next = {
            let mut queue = self.queue.lock().unwrap_or_else(|p| p.into_inner());
            let next = queue.pop_front();
            self.set_len(&queue);
            next
        };
        if let Some(waker) = next {
            waker.wake();
        }
    }
}

/// A connection's sending half.
pub(super) enum Sender {
    /// HTTP/1.1: one exchange at a time.
    H1(http1::SendRequest<UpstreamBody>),
    /// HTTP/2: shared by every request of the worker.
    H2(http2::SendRequest<UpstreamBody>),
}

impl Sender {
    fn is_closed(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_closed(),
            Sender::H2(s) => s.is_closed(),
        }
    }

    fn is_ready(&self) -> bool {
        match self {
            Sender::H1(s) => s.is_ready(),
            Sender::H2(s) => s.is_ready(),
        }
    }

    /// Takes it out of the pool (HTTP/1.1), or a clone of it (HTTP/2, which stays).
    fn share(&self) -> Option<Sender> {
        match self {
            Sender::H1(_) => None,
            Sender::H2(s) => Some(Sender::H2(s.clone())),
        }
    }
}

struct Entry {
    sender: Sender,
    /// When it was last handed out.
    used: Instant,
}

/// One worker's connections to one upstream.
pub(super) struct Pool {
    entries: Mutex<Vec<Entry>>,
    idle: Duration,
    waiters: std::sync::Arc<Waiters>,
    /// Held while an HTTP/2 connection is being made, so that a burst of requests shares one
    /// connection instead of each opening its own.
    pub(super) h2_connecting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.entries.lock().map_or(0, |e| e.len());
        f.debug_struct("Pool").field("connections", &n).finish()
    }
}

impl Pool {
    /// An empty pool whose connections close after `idle` without use.
    pub(super) fn new(idle: Duration) -> Pool {
        Pool {
            entries: Mutex::new(Vec::new()),
            idle,
            waiters: std::sync::Arc::default(),
            h2_connecting: tokio::sync::Mutex::new(()),
        }
    }

    /// A ready sender, if the pool has one.
    pub(super) fn checkout(&self) -> Option<Sender> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let idle = self.idle;
        // A busy connection (its response body still streaming) is kept however long it takes.
        entries.retain(|e| {
            let expired = e.sender.is_ready() && now.duration_since(e.used) >= idle;
            !e.sender.is_closed() && !expired
        });
        let i = entries.iter().rposition(|e| e.sender.is_ready())?;
        if let Some(shared) = entries[i].sender.share() {
            entries[i].used = now;
            return Some(shared);
        }
        Some(entries.swap_remove(i).sender)
    }

    /// Waits until one of the pool's busy connections is ready again (its response body was
    /// read) and takes it. Raced against a new connect when a checkout misses, as
    /// `hyper-util`'s pool does: under a burst, a connection freed meanwhile serves the
    /// request sooner than a connect that may stall (a SYN dropped waits a second).
    pub(super) fn freed(&self) -> Freed<'_> {
        Freed {
            pool: self,
            registered: None,
        }
    }

    /// Returns a sender whose request has its response head: hyper makes it ready again once
    /// the body is read.
    pub(super) fn checkin(&self, mut sender: Sender) {
        // Requests are waiting for a connection (a burst): register the shared waker with this
        // one too, so that it wakes one of them when its response has been read. Nobody else
        // would poll it before then.
        if let Sender::H1(h1) = &mut sender {
            if self.waiters.len.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                let shared = std::task::Waker::from(self.waiters.clone());
                let mut cx = std::task::Context::from_waker(&shared);
                if h1.poll_ready(&mut cx).is_ready() {
                    shared.wake_by_ref();
                }
            }
        }
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        // One open HTTP/2 connection is enough: it multiplexes.
        let shared_open = matches!(sender, Sender::H2(_))
            && entries
                .iter()
                .any(|e| matches!(e.sender, Sender::H2(_)) && !e.sender.is_closed());
        if entries.len() < MAX_POOLED && !shared_open {
            entries.push(Entry {
                sender,
                used: Instant::now(),
            });
        }
    }

    /// Connections held now (busy or idle).
    pub(super) fn len(&self) -> usize {
        self.entries.lock().map_or(0, |e| e.len())
    }
}

/// The future of [`Pool::freed`].
pub(super) struct Freed<'a> {
    pool: &'a Pool,
    /// The waker queued in the pool's waiters, removed when this future is dropped.
    registered: Option<std::task::Waker>,
}

impl std::future::Future for Freed<'_> {
    type Output = Sender;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        use std::task::{Context, Poll, Waker};
        let pool = self.pool;
        let shared = Waker::from(pool.waiters.clone());
        let mut shared_cx = Context::from_waker(&shared);
        {
            let mut entries = pool.entries.lock().unwrap_or_else(|p| p.into_inner());
            let mut i = entries.len();
            while i > 0 {
                i -= 1;
                let ready = match &mut entries[i].sender {
                    Sender::H1(s) => s.poll_ready(&mut shared_cx),
                    Sender::H2(s) => s.poll_ready(&mut shared_cx),
                };
                match ready {
                    Poll::Ready(Ok(())) => {
                        let sender = match entries[i].sender.share() {
                            Some(shared) => shared,
                            None => entries.swap_remove(i).sender,
                        };
                        drop(entries);
                        self.unregister();
                        return Poll::Ready(sender);
                    }
                    Poll::Ready(Err(_)) => {
                        entries.swap_remove(i);
                    }
                    Poll::Pending => {}
                }
            }
        }
        let mut queue = pool.waiters.queue.lock().unwrap_or_else(|p| p.into_inner());
        if !queue.iter().any(|w| w.will_wake(cx.waker())) {
            queue.push_back(cx.waker().clone());
        }
        pool.waiters.set_len(&queue);
        drop(queue);
        self.registered = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl Freed<'_> {
    fn unregister(&mut self) {
        if let Some(waker) = self.registered.take() {
            let mut queue = self
                .pool
                .waiters
                .queue
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            queue.retain(|w| !w.will_wake(&waker));
            self.pool.waiters.set_len(&queue);
        }
    }
}

impl Drop for Freed<'_> {
    /// A request that got its connection another way leaves the queue, so that a freed
    /// connection's wake goes to one still waiting.
    fn drop(&mut self) {
        self.unregister();
    }
}
