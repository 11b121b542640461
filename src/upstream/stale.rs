//! Sending a request again after its pooled connection turned out closed: an upstream may
//! close an idle connection at any time (RFC 9112 §9.3.1), and a request written just then
//! fails through no fault of either side. It is sent once more, on a new connection, when
//! it can be (its body is held) and when that is safe: after its write failed, or after the
//! connection closed with nothing of the answer come, if the request may be sent twice
//! (RFC 9110 §9.2.2, `extract::Access::resendable`: the upstream may have acted on it).
//!
//! One rule for both HTTP/1.1 exchanges on the own engine's sockets: the head path's
//! (`proxy/h1/exchange.rs` `h1_send`) and the shared phases' (`h1.rs` `exchange`). Unlike
//! a retry (`attempts.rs`), it goes to the same upstream and costs no retry budget: the
//! upstream did not fail, its idle connection did.

use crate::error::ErrorKind;

/// Where an exchange stands with the one resend it may make.
#[derive(Debug, Clone, Copy)]
pub struct StaleResend {
    held: bool,
    resendable: bool,
    /// The resend was made: the next connection is a new one, and no other follows.
    retried: bool,
    /// The connection in use came from the pool, and the resend is still to make.
    again: bool,
}

impl StaleResend {
    /// For a request whose body is `held` (none, or all of it kept) and which may be sent
    /// twice when `resendable`.
    pub fn new(held: bool, resendable: bool) -> StaleResend {
        StaleResend {
            held,
            resendable,
            retried: false,
            again: false,
        }
    }

    /// Whether the next connection must be a new one (the pooled one failed).
    pub fn retried(&self) -> bool {
        self.retried
    }

    /// A connection was taken for the request; `reused`: it came from the pool.
    pub fn taken(&mut self, reused: bool) {
        self.again = reused && self.held && !self.retried;
        self.retried |= self.again;
    }

    /// Whether the request may still be resent (so its head must be kept).
    pub fn may_resend(&self) -> bool {
        self.again
    }

    /// Whether a request whose write failed is sent again.
    pub fn after_write(&self) -> bool {
        self.again
    }

    /// Whether a request whose answer failed with `kind`, `nothing_came` of it, is sent
    /// again.
    pub fn after_read(&self, kind: ErrorKind, nothing_came: bool) -> bool {
        self.again && kind == ErrorKind::Reset && nothing_came && self.resendable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_on_a_pooled_connection_and_after_a_read_only_when_resendable() {
        let mut post = StaleResend::new(true, false);
        post.taken(true);
        assert!(post.after_write());
        assert!(!post.after_read(ErrorKind::Reset, true));
        post.taken(false);
        assert!(post.retried() && !post.after_write());

        let mut get = StaleResend::new(true, true);
        get.taken(true);
        assert!(get.after_read(ErrorKind::Reset, true));
        assert!(!get.after_read(ErrorKind::Reset, false));
        assert!(!get.after_read(ErrorKind::Timeout, true));
        get.taken(true);
        assert!(
            !get.after_write(),
            "a second pooled connection gets no resend"
        );

        let mut streamed = StaleResend::new(false, true);
        streamed.taken(true);
        assert!(!streamed.after_write());
    }
}
