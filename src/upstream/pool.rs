//! One worker's pooled HTTP/1.1 connections to one upstream, on `hyper::client::conn`.
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

use std::sync::Mutex;
use std::time::{Duration, Instant};

use hyper::client::conn::http1::SendRequest;

use super::UpstreamBody;

/// Senders kept per pool, busy or idle; connections beyond it are used once and closed.
const MAX_POOLED: usize = 512;

struct Entry {
    sender: SendRequest<UpstreamBody>,
    /// When it was last handed out.
    used: Instant,
}

/// One worker's connections to one upstream.
pub(super) struct Pool {
    entries: Mutex<Vec<Entry>>,
    idle: Duration,
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
        }
    }

    /// A ready sender, if the pool has one.
    pub(super) fn checkout(&self) -> Option<SendRequest<UpstreamBody>> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let idle = self.idle;
        // A busy connection (its response body still streaming) is kept however long it takes.
        entries.retain(|e| {
            !e.sender.is_closed() && !(e.sender.is_ready() && now.duration_since(e.used) >= idle)
        });
        let i = entries.iter().rposition(|e| e.sender.is_ready())?;
        Some(entries.swap_remove(i).sender)
    }

    /// Returns a sender whose request has its response head: hyper makes it ready again once
    /// the body is read.
    pub(super) fn checkin(&self, sender: SendRequest<UpstreamBody>) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() < MAX_POOLED {
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
