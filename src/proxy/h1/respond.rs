//! Phase 6 on the own engine: an upstream's answer head rewritten by the header rules
//! (`headers::raw`) and written to the client, its body relayed by its framing, the
//! upstream connection pooled again only when the exchange was framed exactly.

use tokio::io::{AsyncRead, AsyncWrite};

use super::answer::reason;
use super::{Outbound, Outcome};
use crate::error::ErrorKind;
use crate::http1::head::ResponseHead;
use crate::http1::{framing, write, Chunked, Framing};
use crate::proxy::headers::raw::{self, Nominated};
use crate::proxy::request_id::RequestId;
use crate::proxy::Proxy;
use crate::relay::{self as conn, relay, write_all, Buffered, RelayError};
use crate::upstream::raw::RawConn;
use crate::upstream::UpstreamState;

impl Proxy {
    /// Phase 6: the response head rewritten and written, the body relayed; the upstream
    /// connection pooled again when the exchange was framed exactly.
    ///
    /// Errors: the answer cannot be forwarded (its framing is invalid) and nothing of it was
    /// written: the reason, for a 502.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn h1_respond<S>(
        &self,
        client: &mut Buffered<S>,
        state: &UpstreamState,
        mut up: RawConn,
        head: &ResponseHead,
        out: &Outbound,
        id: &RequestId,
        close: bool,
        failed_over: Option<&str>,
    ) -> Result<Responded, String>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let idle = self.config.timeouts.idle();
        let buf = up.pending();
        let (framing, exact) = framing::response_framing(buf, head, out.head_request)
            .map_err(|e| format!("the upstream's response framing: {e}"))?;
        let body = &buf[head.len..];
        // An answer whose chunked framing is broken in what came with its head is 502 while
        // nothing of it has gone to the client (issue 29, defect 5).
        let mut whole = match framing {
            Framing::Empty => Some(0),
            Framing::Length(n) if body.len() as u64 >= n => Some(n as usize),
            // Decoded as it is relayed (below): checked there.
            Framing::Chunked if out.http10 => None,
            Framing::Chunked => match Chunked::new().scan(body) {
                Ok(p) if p.done => Some(p.used),
                Ok(_) => None,
                Err(e) => return Err(format!("the upstream's chunked framing: {e}")),
            },
            _ => None,
        };
        let upstream_close = head.minor == 0 || Nominated::close(buf, &head.fields);
        let mut wire = conn::take_buffer();
        let minor = if out.http10 { 0 } else { 1 };
        write::status_line_for(&mut wire, minor, head.status, reason(head.status));
        let via = self.via.http11.as_bytes();
        // Re-framed chunked (close-delimited), or framed by `Transfer-Encoding` despite a
        // length: the length would lie (RFC 9112 §6.3). A 204 has none at all (RFC 9110
        // §8.6: MUST NOT; hyper's server drops it, and the differential tests found the own
        // engine passing `Content-Length: 0` on).
        let coded = matches!(framing, Framing::Chunked | Framing::Close);
        let te = head
            .fields
            .iter()
            .any(|f| f.name.of(buf).eq_ignore_ascii_case(b"transfer-encoding"));
        raw::write_response_fields(
            &mut wire,
            buf,
            &head.fields,
            via,
            Some(id.as_bytes()),
            te || coded || head.status == 204,
            self.alt_svc.as_ref().map(|v| v.as_bytes()),
        );
        if let Some(owner) = failed_over {
            // The client learns a failover region answered (docs/failover.md).
            write::field(&mut wire, b"X-Iuid-Failover", owner.as_bytes());
        }
        // An HTTP/1.0 client reads a coded body to the connection's close.
        let close = close || (coded && out.http10);
        if coded && !out.http10 {
            write::field(&mut wire, b"Transfer-Encoding", b"chunked");
        }
        // RFC 9110 §6.6.1: a recipient with a clock forwarding a response without `Date`
        // adds one (hyper's server does; the differential tests found the own engine not).
        if !head
            .fields
            .iter()
            .any(|f| f.name.of(buf).eq_ignore_ascii_case(b"date"))
        {
            write::field(&mut wire, b"Date", &crate::clock::http_date());
        }
        if close {
            write::field(&mut wire, b"Connection", b"close");
        } else if out.http10 {
            write::field(&mut wire, b"Connection", b"keep-alive");
        }
        wire.extend_from_slice(b"\r\n");
        if let Some(n) = whole {
            wire.extend_from_slice(&body[..n]);
        }
        let used = head.len + whole.unwrap_or(0);
        let mut responded = Responded {
            status: head.status,
            outcome: if close {
                Outcome::Close
            } else {
                Outcome::KeepAlive
            },
            upstream_failed: None,
        };
        let written = write_all(&mut client.io, &wire, idle).await;
        conn::give_buffer(wire);
        if let Err(e) = written {
            crate::metrics::client_error(send_kind(&e));
            responded.outcome = Outcome::Close;
            return Ok(responded);
        }
        up.consume(used);
        if whole.is_none() {
            let relayed = match out.http10 {
                true => conn::relay_decoded(&mut up, &mut client.io, framing, idle).await,
                false => relay(&mut up, &mut client.io, framing, Chunked::new(), idle).await,
            };
            match relayed {
                Ok(()) => whole = Some(0),
                Err(e @ RelayError::Write { .. }) => {
                    crate::metrics::client_error(send_kind(&e));
                    responded.outcome = Outcome::Close;
                    return Ok(responded);
                }
                Err(e) => {
                    // The client's connection closes: it never sees a complete message.
                    tracing::debug!(upstream = %state.authority, error = %e, "upstream body failed");
                    responded.outcome = Outcome::Close;
                    responded.upstream_failed = Some(match e {
                        RelayError::Read {
                            timed_out: true, ..
                        } => ErrorKind::Timeout,
                        _ => ErrorKind::Reset,
                    });
                    return Ok(responded);
                }
            }
        }
        if exact && !upstream_close && framing != Framing::Close && whole.is_some() {
            state.raw_pool().checkin(up);
        }
        Ok(responded)
    }
}

/// How a response was answered.
pub(super) struct Responded {
    pub status: u16,
    pub outcome: Outcome,
    /// The upstream failed the body after its head had gone (counted against it).
    pub upstream_failed: Option<ErrorKind>,
}

/// The client's error when writing to it failed.
fn send_kind(e: &RelayError) -> ErrorKind {
    match e {
        RelayError::Write {
            timed_out: true, ..
        } => ErrorKind::SendTimeout,
        _ => ErrorKind::Aborted,
    }
}
