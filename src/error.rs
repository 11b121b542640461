//! The data path's one error type: what failed, who is to blame, and whether a retry is safe,
//! in the manner of Pingora's `Error { esource: Upstream | Downstream | Internal, retry }`.
//!
//! Health accounting, retries, status codes and metrics all read an [`Error`] instead of each
//! guessing from hyper's error text. The rule they share (docs/data-path.md): only upstream failures
//! count towards ejection and are retried; a client's own errors (a malformed body, an upload
//! it abandoned, a body it stalled, a response it stopped reading) never eject an upstream and
//! are never retried.

use std::fmt;

use http::StatusCode;

/// Who caused a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blame {
    /// The client (downstream): its body, its connection, its pace.
    Client,
    /// The upstream: connect, reset, timeout, bad response.
    Upstream,
    /// Neither: the router's own limit refused the exchange (docs/overload.md). Never
    /// counted against an upstream, never retried.
    Router,
}

/// Why the router shed a request (docs/overload.md): the `reason` label of
/// `iuid_router_shed_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShedReason {
    /// The region has its `limits.region_max_in_flight` (or its adaptive limit) in flight.
    MaxInFlight,
    /// The region has `limits.region_max_pending_connects` connections being made.
    PendingConnects,
    /// The process is above `overload.max_memory_mb`.
    Memory,
    /// No file descriptor was left for the upstream connection (`RLIMIT_NOFILE`).
    Nofile,
}

impl ShedReason {
    /// Every reason, in discriminant order (metric handles are indexed by it).
    pub const ALL: [ShedReason; 4] = [
        ShedReason::MaxInFlight,
        ShedReason::PendingConnects,
        ShedReason::Memory,
        ShedReason::Nofile,
    ];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ShedReason::MaxInFlight => "max_in_flight",
            ShedReason::PendingConnects => "pending_connects",
            ShedReason::Memory => "memory",
            ShedReason::Nofile => "nofile",
        }
    }

    /// The setting (or the resource) whose bound was reached, for problem details.
    pub fn setting(self) -> &'static str {
        match self {
            ShedReason::MaxInFlight => "limits.region_max_in_flight",
            ShedReason::PendingConnects => "limits.region_max_pending_connects",
            ShedReason::Memory => "overload.max_memory_mb",
            ShedReason::Nofile => "the open files limit (RLIMIT_NOFILE)",
        }
    }
}

/// Whether a failed attempt may be sent again to another upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Nothing reached the upstream: any method may be sent again.
    Always,
    /// The upstream may have acted on it: only idempotent methods (RFC 9110 §9.2.2).
    IfIdempotent,
    /// Never: the client is at fault, or the upstream is slow (asking another one only
    /// doubles the wait and the load).
    Never,
}

/// What failed. The `as_str` names are the `kind` label of
/// `iuid_router_upstream_errors_total` or `iuid_router_client_errors_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No connection to the upstream: refused, unreachable, connect timeout. Nothing was sent.
    Connect,
    /// The upstream connection failed after the request was (maybe) sent, before the response
    /// headers.
    Reset,
    /// No response headers within `timeouts.response_headers_ms` of the request body's end, or
    /// the upstream read none of the request body for `timeouts.idle_ms`.
    Timeout,
    /// The client's body framing is invalid (a bad chunk size or chunk end): 400.
    BadFraming,
    /// The client went away before its body was complete (reset, or closed early).
    Aborted,
    /// The client sent none of its body for `timeouts.idle_ms`: 408.
    BodyTimeout,
    /// The client read none of the response for `timeouts.idle_ms` (nginx's `send_timeout`):
    /// both connections are closed.
    SendTimeout,
    /// The router's own limit refused the exchange before anything was sent: 503, shed.
    Shed(ShedReason),
}

impl ErrorKind {
    /// Every kind the client is to blame for, in label order.
    pub const CLIENT: [ErrorKind; 4] = [
        ErrorKind::BadFraming,
        ErrorKind::Aborted,
        ErrorKind::BodyTimeout,
        ErrorKind::SendTimeout,
    ];
    /// Every kind the upstream is to blame for, in label order.
    pub const UPSTREAM: [ErrorKind; 3] = [ErrorKind::Connect, ErrorKind::Timeout, ErrorKind::Reset];

    /// Who caused it.
    pub fn blame(self) -> Blame {
        match self {
            ErrorKind::Connect | ErrorKind::Reset | ErrorKind::Timeout => Blame::Upstream,
            ErrorKind::BadFraming
            | ErrorKind::Aborted
            | ErrorKind::BodyTimeout
            | ErrorKind::SendTimeout => Blame::Client,
            ErrorKind::Shed(_) => Blame::Router,
        }
    }

    /// Whether another upstream may be tried.
    pub fn retry(self) -> Retry {
        match self {
            ErrorKind::Connect => Retry::Always,
            ErrorKind::Reset => Retry::IfIdempotent,
            _ => Retry::Never,
        }
    }

    /// The status the client gets (docs/data-path.md). An aborted client gets 400 too, though it is no
    /// longer there to read it: the status shows in the access log and metrics.
    pub fn status(self) -> StatusCode {
        match self {
            ErrorKind::Connect | ErrorKind::Reset => StatusCode::BAD_GATEWAY,
            ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
            ErrorKind::BadFraming | ErrorKind::Aborted => StatusCode::BAD_REQUEST,
            ErrorKind::BodyTimeout => StatusCode::REQUEST_TIMEOUT,
            // The response has begun; only the connection can be closed.
            ErrorKind::SendTimeout => StatusCode::REQUEST_TIMEOUT,
            ErrorKind::Shed(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Reset => "reset",
            ErrorKind::Timeout => "timeout",
            ErrorKind::BadFraming => "bad_framing",
            ErrorKind::Aborted => "aborted",
            ErrorKind::BodyTimeout => "body_timeout",
            ErrorKind::SendTimeout => "send_timeout",
            ErrorKind::Shed(_) => "shed",
        }
    }
}

/// A failure on the data path: its kind and a one-line reason for logs and problem details.
#[derive(Debug)]
pub struct Error {
    /// What failed (and so who is to blame, and whether to retry).
    pub kind: ErrorKind,
    /// The innermost cause, e.g. "Connection refused (os error 111)".
    pub detail: String,
}

impl Error {
    /// An error of `kind` with `detail`.
    pub fn new(kind: ErrorKind, detail: impl Into<String>) -> Error {
        Error {
            kind,
            detail: detail.into(),
        }
    }

    /// Who caused it.
    pub fn blame(&self) -> Blame {
        self.kind.blame()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.detail)
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_upstream_kinds_are_retried_or_blamed_on_the_upstream() {
        for kind in ErrorKind::CLIENT {
            assert_eq!(kind.blame(), Blame::Client);
            assert_eq!(kind.retry(), Retry::Never);
            assert!(kind.status().is_client_error());
        }
        for kind in ErrorKind::UPSTREAM {
            assert_eq!(kind.blame(), Blame::Upstream);
            assert!(kind.status().is_server_error());
        }
        let shed = ErrorKind::Shed(ShedReason::PendingConnects);
        assert_eq!(shed.blame(), Blame::Router);
        assert_eq!(shed.retry(), Retry::Never);
    }
}
