//! 0-RTT (RFC 9001 §4.6, RFC 8470): which requests may go on before the handshake completes.
//!
//! A resumed client may send requests in its first flight, encrypted with keys from an
//! earlier session; an attacker who recorded that flight can send it again, and the router
//! could not tell. A replayed flight never completes its handshake (the attacker lacks the
//! session's secret for the client's Finished), so a request is safe to act on once its
//! connection's handshake has completed. Before that, only a safe method (RFC 9110 §9.2.1)
//! goes on, marked `Early-Data: 1` so that the upstream may answer `425 Too Early` (RFC 8470
//! §5.1); any other request waits for the handshake.

use std::sync::atomic::{AtomicBool, Ordering};

use http::Method;
use tokio::sync::Notify;

/// Whether a connection's handshake has completed, for its requests to wait on.
#[derive(Debug)]
pub struct Early {
    complete: AtomicBool,
    notify: Notify,
}

/// What a request read before the handshake completed may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// The handshake is complete: as any request.
    Complete,
    /// A safe method in early data: on at once, with `Early-Data: 1`.
    Early,
    /// Any other method in early data: after the handshake.
    Wait,
}

impl Early {
    /// The state of a connection whose handshake is already `complete` or still running.
    pub fn new(complete: bool) -> Early {
        Early {
            complete: AtomicBool::new(complete),
            notify: Notify::new(),
        }
    }

    /// The handshake completed: wakes the requests waiting for it.
    pub fn complete(&self) {
        self.complete.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// What a request with `method` may do now.
    pub fn admit(&self, method: &Method) -> Admit {
        if self.complete.load(Ordering::Acquire) {
            Admit::Complete
        } else if is_safe(method) {
            Admit::Early
        } else {
            Admit::Wait
        }
    }

    /// Resolves once the handshake has completed (at once if it has).
    pub async fn completed(&self) {
        loop {
            let notified = self.notify.notified();
            if self.complete.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }
}

/// RFC 9110 §9.2.1's safe methods: GET, HEAD, OPTIONS, TRACE.
fn is_safe(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn only_safe_methods_go_before_the_handshake() {
        let early = std::sync::Arc::new(Early::new(false));
        assert_eq!(early.admit(&Method::GET), Admit::Early);
        assert_eq!(early.admit(&Method::HEAD), Admit::Early);
        assert_eq!(early.admit(&Method::POST), Admit::Wait);
        assert_eq!(
            early.admit(&Method::PUT),
            Admit::Wait,
            "idempotent, not safe"
        );
        let waiter = tokio::spawn({
            let early = early.clone();
            async move { early.completed().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        early.complete();
        tokio::time::timeout(std::time::Duration::from_secs(1), waiter)
            .await
            .expect("woken")
            .expect("ran");
        assert_eq!(early.admit(&Method::POST), Admit::Complete);
    }
}
