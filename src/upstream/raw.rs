//! One worker's idle HTTP/1.1 connections to one upstream, for the own engine (`proxy::h1`):
//! plain or TLS sockets ([`UpstreamIo`]), no connection task. A request checks one out,
//! drives it from its own task (write the head and body, read the answer) and checks it
//! back in when the exchange was framed exactly; anything else closes it.
//!
//! A connection the upstream closed while it sat idle is found without a syscall: the event
//! loop has marked its socket readable (an idle HTTP/1.1 connection has nothing to say but
//! its close), so a checkout skips it, as nginx's keepalive cache does with its read event.
//! Over TLS, decrypted bytes rustls holds count as readable too.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::io::UpstreamIo;
use crate::http1::head::{parse_response, HeadError, ResponseHead};
use crate::relay::Buffered;

/// The bounds on an upstream's answer head, the same for both HTTP/1.1 exchanges (the head
/// path's and the shared phases'): `limits.max_headers` field lines and
/// `limits.max_header_bytes` bytes, as a request head has (docs/config.md); beyond, the
/// answer is refused as the upstream's (502).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerHead {
    /// Most field lines (at most `http1::head::MAX_FIELDS`).
    pub max_fields: usize,
    /// Most bytes of the head; also the most an answer's read buffer grows to for it.
    pub max_bytes: usize,
}

impl AnswerHead {
    /// The bounds `limits` sets.
    pub fn of(limits: &crate::config::Limits) -> AnswerHead {
        AnswerHead {
            max_fields: limits.max_headers,
            max_bytes: limits.max_header_bytes,
        }
    }

    /// Parses the answer head at the start of `up`'s pending bytes into `head` (its field
    /// list taken from the per-thread cache the first time): `true` when it is whole.
    ///
    /// Errors: not an HTTP/1.1 answer head, or over the bounds.
    pub fn parse(&self, up: &RawConn, head: &mut ResponseHead) -> Result<bool, HeadError> {
        if head.fields.capacity() == 0 {
            head.fields = crate::relay::take_fields();
        }
        parse_response(up.pending(), head, self.max_fields, self.max_bytes)
    }
}

impl Default for AnswerHead {
    fn default() -> AnswerHead {
        AnswerHead::of(&crate::config::Limits::default())
    }
}

/// Idle connections kept per pool; more are closed.
const MAX_IDLE: usize = 256;

/// A pooled upstream connection.
pub type RawConn = Buffered<UpstreamIo>;

/// One worker's idle connections to one upstream (the lock is only ever taken by that
/// worker's thread: never contended).
#[derive(Debug, Default)]
pub struct RawPool {
    idle: Mutex<Vec<(RawConn, Instant)>>,
    /// Told of every connection checked in, for requests waiting on a connect.
    freed: tokio::sync::Notify,
}

impl RawPool {
    /// The most recently used idle connection still open and idle for less than `max_idle`.
    pub fn checkout(&self, max_idle: Duration) -> Option<RawConn> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        while let Some((mut conn, since)) = idle.pop() {
            if since.elapsed() < max_idle && !conn.io.has_unread() {
                return Some(conn);
            }
        }
        None
    }

    /// Keeps a connection whose last exchange ended cleanly, with nothing pending.
    pub fn checkin(&self, mut conn: RawConn) {
        if !conn.pending().is_empty() {
            return;
        }
        conn.release();
        {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            if idle.len() >= MAX_IDLE {
                return;
            }
            idle.push((conn, Instant::now()));
        }
        self.freed.notify_one();
    }

    /// The next connection checked in (for a request that would otherwise wait on a new
    /// connect); never completes while none is.
    pub async fn freed(&self, max_idle: Duration) -> RawConn {
        loop {
            self.freed.notified().await;
            if let Some(conn) = self.checkout(max_idle) {
                return conn;
            }
        }
    }

    /// Idle connections held.
    pub fn len(&self) -> usize {
        self.idle.lock().map_or(0, |i| i.len())
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
