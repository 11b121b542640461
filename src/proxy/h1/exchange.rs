//! Phase 5 on the own engine: the request sent to an upstream of the region (retried on
//! another when that is safe, under the same rules and budget as `upstream::forward`) and
//! the answer's head read; phase 6, the answer written back and its body relayed, is
//! `respond.rs`'s, and the answers the router makes itself are `answer.rs`'s.
//!
//! Blame is decided by which side of a relay failed: a client that stalls or breaks its
//! upload is the client's error (400/408), an upstream that resets, times out or frames its
//! answer badly is the upstream's (502/504, counted, ejecting). A message whose framing
//! breaks midway is never completed on the other side: its connection is closed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::uri::Authority;
use tokio::io::{AsyncRead, AsyncWrite};

use super::answer::{reason, write_problem};
use super::respond::Responded;
use super::{Outbound, Outcome};
use crate::error::{Error, ErrorKind};
use crate::http1::head::ResponseHead;
use crate::http1::{write, Chunked, Framing};
use crate::problem::Problem;
use crate::proxy::headers::raw::{self};
use crate::proxy::life::Life;
use crate::proxy::request_id::RequestId;
use crate::proxy::Proxy;
use crate::relay::{self as conn, relay, write_all, Buffered, Readiness, RelayError};
use crate::trace::{Stamp, TRACEPARENT_LINE_LEN};
use crate::upstream::attempts::{Detour, ForwardError};
use crate::upstream::attempts::{Exchange, Failed};
use crate::upstream::h1::next_conn;
use crate::upstream::raw::{AnswerHead, RawConn};
use crate::upstream::regions::{Connects, RegionRuntime, Routing, Upstream};
use crate::upstream::stale::StaleResend;
use crate::upstream::UpstreamState;

/// How a forwarded request ended, for metrics, the log and the connection.
pub(super) struct Answered {
    pub status: u16,
    pub upstream: Option<Authority>,
    pub outcome: Outcome,
    /// Whether a failover region or a hinted owner answered (docs/failover.md).
    pub detour: Detour,
}

fn upstream(kind: ErrorKind, detail: impl Into<String>) -> Failed {
    Failed::Error(Error::new(kind, detail))
}

/// A request body the client stopped sending (`e` a [`RelayError::Read`]): 408
/// `request-body-timeout` when it went silent for the idle timeout, `aborted` when its
/// connection failed or closed midway. The client's fault either way, whether the body was
/// streamed or held (read whole first).
pub(super) fn client_body_failed(e: &RelayError) -> Error {
    let kind = match e {
        RelayError::Read {
            timed_out: true, ..
        } => ErrorKind::BodyTimeout,
        _ => ErrorKind::Aborted,
    };
    Error::new(kind, e.to_string())
}

/// Reads until `total` bytes of the request (its head and a body held whole) are pending,
/// each read waiting at most `idle`. Errors: the client stalled or closed first (its
/// error, counted).
pub(super) async fn read_body<S>(
    client: &mut Buffered<S>,
    total: usize,
    idle: Duration,
) -> Result<(), Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let failed = match client.read_to(total, idle).await {
        Ok(true) => return Ok(()),
        Ok(false) => RelayError::Read {
            error: None,
            timed_out: false,
        },
        Err(e) => conn::read_failed(e),
    };
    let error = client_body_failed(&failed);
    crate::metrics::client_error(error.kind);
    Err(error)
}

/// The request body's relay failure, blamed on the side that failed.
fn upload_failed(e: RelayError) -> Failed {
    match e {
        RelayError::Read { .. } => Failed::Error(client_body_failed(&e)),
        RelayError::Framing(_) => Failed::Error(Error::new(ErrorKind::BadFraming, e.to_string())),
        RelayError::Write {
            timed_out: true, ..
        } => upstream(ErrorKind::Timeout, e.to_string()),
        RelayError::Write { .. } => upstream(ErrorKind::Reset, e.to_string()),
    }
}

/// The own engine's wire under the attempt loop (`upstream::attempts`): the head written
/// once (`Outbound`) sent on a pooled socket of the chosen upstream, the answer relayed to
/// the client by `respond.rs`.
struct HeadWire<'a, S> {
    proxy: &'a Proxy,
    client: &'a mut Buffered<S>,
    out: &'a Outbound,
    id: &'a RequestId,
    close: bool,
    /// The answer's head while it is delivered (its field list goes back to the cache).
    head: ResponseHead,
    /// The trace fields the next attempt sends (docs/traces.md); boxed, as a request without
    /// tracing carries one word for them.
    stamp: Option<Box<Stamp>>,
    /// The region the request is for: once failed over, its `X-Iuid-Failover`
    /// (docs/failover.md).
    owner: &'a str,
    /// Whether the attempts go to its failover region now.
    failed_over: bool,
}

/// What an attempt writes besides the request's head: its trace fields and, failed over,
/// `X-Iuid-Failover`.
#[derive(Clone, Copy)]
struct Marks<'a> {
    stamp: Option<&'a Stamp>,
    failed_over: Option<&'a str>,
}

impl<S> Exchange for HeadWire<'_, S>
where
    S: AsyncRead + AsyncWrite + Unpin + Readiness,
{
    type Head = (RawConn, ResponseHead);
    type Done = Responded;

    fn replayable(&self) -> bool {
        self.out.held.is_some()
    }

    fn resendable(&self) -> bool {
        self.out.idempotent
    }

    fn reads(&self) -> bool {
        self.out.reads()
    }

    fn may_fail_over(&self) -> bool {
        !self.out.stays
    }

    fn fail_over(&mut self, _owner: &str) {
        // The loop fails over from the region this wire was made for: `self.owner`.
        self.failed_over = true;
    }

    fn owner_hint((up, head): &(RawConn, ResponseHead)) -> Option<&str> {
        let value = crate::http1::head::all(up.pending(), &head.fields, b"x-iuid-owner").next()?;
        std::str::from_utf8(value.trim_ascii()).ok()
    }

    fn stamp(&mut self, stamp: Stamp) {
        match &mut self.stamp {
            Some(held) => **held = stamp,
            None => self.stamp = Some(Box::new(stamp)),
        }
    }

    fn status((_, head): &(RawConn, ResponseHead)) -> u16 {
        head.status
    }

    fn attempt<'s>(
        &'s mut self,
        upstream: &'s Upstream,
        connects: Connects<'s>,
        _again: bool,
    ) -> impl std::future::Future<Output = Result<(RawConn, ResponseHead), Failed>> + 's {
        let marks = Marks {
            stamp: self.stamp.as_deref(),
            failed_over: self.failed_over.then_some(self.owner),
        };
        self.proxy
            .h1_send(self.client, &upstream.state, self.out, marks, connects)
    }

    fn deliver(
        &mut self,
        upstream: &Upstream,
        (up, head): (RawConn, ResponseHead),
    ) -> impl std::future::Future<Output = Result<(Responded, Option<ErrorKind>), Error>> {
        // Kept here, not in a future around `h1_respond`'s: each layer is one more move of
        // that future on every request.
        conn::give_fields(std::mem::replace(&mut self.head, head).fields);
        let responding = self.proxy.h1_respond(
            self.client,
            &upstream.state,
            up,
            &self.head,
            self.out,
            self.id,
            self.close,
            self.failed_over.then_some(self.owner),
        );
        futures_util::FutureExt::map(responding, |responded| match responded {
            Ok(responded) => {
                let failed = responded.upstream_failed;
                Ok((responded, failed))
            }
            // Nothing of the answer went out: 502, the upstream's fault.
            Err(detail) => Err(Error::new(ErrorKind::Reset, detail)),
        })
    }
}

impl Outbound {
    /// Whether it reads (docs/data-path.md "Reads and writes"): it may fail over
    /// (docs/failover.md). Its method is the head's first word.
    fn reads(&self) -> bool {
        let method = self.bytes.split(|&b| b == b' ').next().unwrap_or_default();
        let access = self
            .said
            .unwrap_or_else(|| crate::extract::Access::of_method(method));
        access == crate::extract::Access::Read
    }
}

impl<S> Drop for HeadWire<'_, S> {
    fn drop(&mut self) {
        conn::give_fields(std::mem::take(&mut self.head.fields));
    }
}

impl Proxy {
    /// Phase 5 and 6: forwards `out` to an upstream of `region` (the attempt loop, through
    /// `Proxy::exchange`) and answers the client, in the request's `life` (its id, its trace).
    pub(super) async fn h1_forward<S>(
        &self,
        client: &mut Buffered<S>,
        (routing, region): (&Routing, &RegionRuntime),
        out: Outbound,
        life: &Life,
        close: bool,
    ) -> Answered
    where
        S: AsyncRead + AsyncWrite + Unpin + Readiness,
    {
        let wire = HeadWire {
            proxy: self,
            client: &mut *client,
            out: &out,
            id: &life.id,
            close,
            head: ResponseHead::default(),
            stamp: None,
            owner: &region.name,
            failed_over: false,
        };
        let failed = match self.exchange(routing, region, life.traced(), wire).await {
            Ok(delivered) => {
                return Answered {
                    status: delivered.done.status,
                    upstream: Some(delivered.upstream),
                    outcome: delivered.done.outcome,
                    detour: delivered.detour,
                }
            }
            Err(failed) => failed,
        };
        let upstream = match &failed {
            ForwardError::Failed { upstream, .. } => Some(upstream.clone()),
            _ => None,
        };
        let problem = match self.judged::<()>(region, Err(failed)) {
            Err(problem) => problem,
            Ok(()) => Problem::Unavailable {
                region: region.name.clone(),
                retry_after: Duration::ZERO,
            },
        };
        let status = problem.status().as_u16();
        life.refused(problem.slug());
        // A request whose body was streamed (or broke) cannot be followed on its connection;
        // a shed one's client comes back after `Retry-After` on a new one (docs/overload.md).
        let close = close || problem.closes_connection() || out.held.is_none() || out.http10;
        let idle = self.config.timeouts.idle();
        let written = write_problem(
            client,
            problem,
            &life.id,
            close,
            idle,
            self.alt_svc.as_ref(),
        )
        .await;
        Answered {
            status,
            upstream,
            detour: Detour::Stayed,
            outcome: if close || !written {
                Outcome::Close
            } else {
                Outcome::KeepAlive
            },
        }
    }

    /// The request's head with this upstream's `Host`, in a buffer from the cache (a small
    /// one when it fits). Held only while it is written: a request waiting on its answer
    /// holds no more than `out`.
    fn h1_wire(&self, state: &UpstreamState, out: &Outbound, marks: Marks<'_>) -> Vec<u8> {
        let host = state.host.as_bytes();
        let traced = marks.stamp.map_or(0, |s| {
            TRACEPARENT_LINE_LEN + s.tracestate.as_ref().map_or(0, |v| 16 + v.len())
        }) + marks.failed_over.map_or(0, |o| 20 + o.len());
        let mut wire = if out.bytes.len() + host.len() + 8 + traced <= conn::SMALL {
            conn::take_small()
        } else {
            conn::take_buffer()
        };
        wire.extend_from_slice(&out.bytes[..out.line_end]);
        if !(self.config.preserve_host && has_host(&out.bytes[out.line_end..out.fields_end])) {
            write::field(&mut wire, b"Host", host);
        }
        // The trace fields of this attempt (the client's were left out of `out`).
        if let Some(stamp) = marks.stamp {
            wire.extend_from_slice(stamp.traceparent.line());
            if let Some(state) = &stamp.tracestate {
                write::field(&mut wire, b"tracestate", state.as_bytes());
            }
        }
        if let Some(owner) = marks.failed_over {
            write::field(&mut wire, b"X-Iuid-Failover", owner.as_bytes());
        }
        wire.extend_from_slice(&out.bytes[out.line_end..]);
        wire
    }

    /// One attempt: the request written (again on a new connection if a pooled one
    /// turns out closed), its body relayed, the answer's head read.
    async fn h1_send<S>(
        &self,
        client: &mut Buffered<S>,
        state: &Arc<UpstreamState>,
        out: &Outbound,
        marks: Marks<'_>,
        connects: Connects<'_>,
    ) -> Result<(RawConn, ResponseHead), Failed>
    where
        S: AsyncRead + AsyncWrite + Unpin + Readiness,
    {
        let idle = self.config.timeouts.idle();
        // A pooled connection the upstream closed just as the request left it is replaced by
        // a new one once (`upstream::stale`).
        let mut pooled = state.raw_pool().checkout(idle);
        let mut stale = StaleResend::new(out.held.is_some(), out.idempotent);
        loop {
            let retried = stale.retried();
            let (mut up, reused) = next_conn(state, &mut pooled, retried, Some(connects), idle)
                .await
                .map_err(Failed::Error)?;
            stale.taken(reused);
            // The body goes with the head in one write: all of it when held, else what of
            // it came with the head (a length-framed one; the rest is relayed after).
            let (body, rest) = match (out.held, out.framing) {
                (Some(held), framing) => (held, framing),
                (None, Framing::Length(n)) => {
                    let early = client
                        .pending()
                        .len()
                        .min(usize::try_from(n).unwrap_or(usize::MAX));
                    (early, Framing::Length(n - early as u64))
                }
                (None, framing) => (0, framing),
            };
            let wire = self.h1_wire(state, out, marks);
            let written = match body {
                0 => write_all(&mut up.io, &wire, idle).await,
                _ => conn::write_two(&mut up.io, &wire, &client.pending()[..body], idle).await,
            };
            conn::give_back(wire);
            if written.is_err() && stale.after_write() {
                continue;
            }
            written.map_err(upload_failed)?;
            if out.held.is_none() {
                client.consume(body);
                relay(client, &mut up.io, rest, Chunked::request(), idle)
                    .await
                    .map_err(upload_failed)?;
            }
            match self.read_response_head(&mut up, client, out.http10).await {
                Err(Failed::Error(e)) if stale.after_read(e.kind, up.buf.is_empty()) => continue,
                Err(e) => return Err(e),
                Ok(head) => return Ok((up, head)),
            }
        }
    }

    /// Reads the final response head within `response_headers_ms`; informational answers
    /// (`103 Early Hints` and the like) go to the client as they come, `100` is dropped.
    async fn read_response_head<S>(
        &self,
        up: &mut RawConn,
        client: &mut Buffered<S>,
        http10: bool,
    ) -> Result<ResponseHead, Failed>
    where
        S: AsyncRead + AsyncWrite + Unpin + Readiness,
    {
        let limits = &self.config.limits;
        let deadline = Instant::now() + self.config.timeouts.response_headers();
        // No field list until the answer starts to come.
        let mut head = ResponseHead::default();
        loop {
            let parsed = if up.pending().is_empty() {
                Ok(false)
            } else {
                AnswerHead::of(limits).parse(up, &mut head)
            };
            match parsed {
                Ok(true) if head.status == 101 => {
                    return Err(Failed::Final(Error::new(
                        ErrorKind::Reset,
                        "the upstream answered 101 Switching Protocols to a request that \
                         asked for no upgrade",
                    )))
                }
                // An HTTP/1.0 client gets no 1xx (RFC 9110 §15.2).
                Ok(true) if head.status == 100 || http10 && head.status < 200 => {
                    up.consume(head.len)
                }
                Ok(true) if head.status < 200 => {
                    let mut info = Vec::with_capacity(head.len + 64);
                    write::status_line(&mut info, head.status, reason(head.status));
                    let via = self.via.http11.as_bytes();
                    // The request id is the final answer's; a 1xx has no `Content-Length`
                    // (RFC 9110 §8.6).
                    raw::write_response_fields(
                        &mut info,
                        up.pending(),
                        &head.fields,
                        via,
                        None,
                        true,
                        None,
                    );
                    info.extend_from_slice(b"\r\n");
                    let _ = write_all(&mut client.io, &info, self.config.timeouts.idle()).await;
                    up.consume(head.len);
                }
                Ok(true) => return Ok(head),
                Ok(false) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    // No buffer is taken until the answer starts to come: a request waiting
                    // on a slow upstream holds none.
                    let read = if up.buf.capacity() == 0 {
                        // Most answers come within `CLIENT_WATCH_AFTER` (one timer, as
                        // before); a request that waits longer also watches its client.
                        let first = left.min(CLIENT_WATCH_AFTER);
                        match up.fill_when_readable(first).await {
                            Err(e) if e.kind() == std::io::ErrorKind::TimedOut && left > first => {
                                let rest = left - first;
                                wait_watching_client(up, client, rest).await?
                            }
                            read => read,
                        }
                    } else {
                        up.fill(left, limits.max_header_bytes).await
                    };
                    match read {
                        Ok(0) => {
                            return Err(upstream(
                                ErrorKind::Reset,
                                "the upstream closed the connection before a response",
                            ))
                        }
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                            return Err(upstream(
                                ErrorKind::Timeout,
                                format!(
                                    "no response headers within {} ms",
                                    self.config.timeouts.response_headers_ms
                                ),
                            ))
                        }
                        Err(e) => {
                            return Err(upstream(
                                ErrorKind::Reset,
                                format!("reading the response: {e}"),
                            ))
                        }
                    }
                }
                Err(e) => return Err(upstream(ErrorKind::Reset, format!("{e} from the upstream"))),
            }
        }
    }
}

/// How long a request waits on its upstream before it also watches its client: a client
/// that goes meanwhile ends the request (its upstream connection closed, as nginx does with
/// `proxy_ignore_client_abort off`), so that a sick region's waiting requests do not outlive
/// their clients and hold its `limits.region_max_in_flight` (docs/overload.md). Later than
/// most answers, so that the common case costs nothing more.
const CLIENT_WATCH_AFTER: Duration = Duration::from_millis(200);

/// Waits at most `within` for the upstream's answer to start, while watching the client:
/// bytes it sends meanwhile (a pipelined request) are kept, its close (or a reset) ends the
/// request as the client's. `Ok`: as `fill_when_readable`'s.
async fn wait_watching_client<S>(
    up: &mut RawConn,
    client: &mut Buffered<S>,
    within: Duration,
) -> Result<std::io::Result<usize>, Failed>
where
    S: AsyncRead + AsyncWrite + Unpin + Readiness,
{
    let upstream = up.fill_when_readable(within);
    tokio::pin!(upstream);
    // A client that sends more than a head's worth meanwhile is not read further.
    let mut watching = true;
    loop {
        let client_ready = async {
            match watching {
                true => std::future::poll_fn(|cx| client.io.poll_readable(cx)).await,
                false => std::future::pending().await,
            }
        };
        tokio::select! {
            read = &mut upstream => return Ok(read),
            ready = client_ready => {
                let gone = match ready {
                    Err(_) => true,
                    Ok(()) => match client.read_now(true).await {
                        Some(Ok(0)) | Some(Err(_)) => true,
                        Some(Ok(_)) => {
                            watching = client.pending().len() < 64 << 10;
                            false
                        }
                        None => false,
                    },
                };
                if gone {
                    // (Counted as the client's by the caller, never against the upstream.)
                    return Err(Failed::Error(Error::new(
                        ErrorKind::Aborted,
                        "the client closed its connection while its request waited on the upstream",
                    )));
                }
            }
        }
    }
}

/// Whether a written field section has a `Host` line.
fn has_host(fields: &[u8]) -> bool {
    fields
        .split(|&b| b == b'\n')
        .any(|line| line.len() > 5 && line[..5].eq_ignore_ascii_case(b"host:"))
}
