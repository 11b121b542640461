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
use super::{Outbound, Outcome, RequestId};
use crate::error::{Blame, Error, ErrorKind, Retry};
use crate::http1::head::ResponseHead;
use crate::http1::{write, Chunked, Framing};
use crate::problem::Problem;
use crate::proxy::headers::raw::{self};
use crate::proxy::Proxy;
use crate::relay::{self as conn, relay, write_all, Buffered, Readiness, RelayError};
use crate::upstream::h1::next_conn;
use crate::upstream::health::{self, Pick};
use crate::upstream::raw::{AnswerHead, RawConn};
use crate::upstream::regions::{Connects, RegionRuntime};
use crate::upstream::UpstreamState;

/// How a forwarded request ended, for metrics, the log and the connection.
pub(super) struct Answered {
    pub status: u16,
    pub upstream: Option<Authority>,
    pub outcome: Outcome,
}

/// Why an attempt failed.
enum Failed {
    /// The client's fault (its body): the request ends here.
    Client(Error),
    /// The upstream's: counted, may eject, may be retried.
    Upstream(Error),
    /// A `101` nobody asked for (RFC 9110 §15.2.2): 502, the upstream's fault, not retried.
    Switched,
}

fn upstream(kind: ErrorKind, detail: impl Into<String>) -> Failed {
    Failed::Upstream(Error::new(kind, detail))
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
        RelayError::Read { .. } => Failed::Client(client_body_failed(&e)),
        RelayError::Framing(_) => Failed::Client(Error::new(ErrorKind::BadFraming, e.to_string())),
        RelayError::Write {
            timed_out: true, ..
        } => upstream(ErrorKind::Timeout, e.to_string()),
        RelayError::Write { .. } => upstream(ErrorKind::Reset, e.to_string()),
    }
}

impl Proxy {
    /// Phase 5 and 6: forwards `out` to an upstream of `region` and answers the client.
    pub(super) async fn h1_forward<S>(
        &self,
        client: &mut Buffered<S>,
        region: &RegionRuntime,
        out: Outbound,
        id: &RequestId,
        close: bool,
    ) -> Answered
    where
        S: AsyncRead + AsyncWrite + Unpin + Readiness,
    {
        let retry = &self.config.retries;
        let metrics = &region.state.metrics;
        let idle = self.config.timeouts.idle();
        let mut tried = 0u64;
        let mut last: Option<Error> = None;
        let mut last_upstream = None;
        // The request's place in the region's limit, kept until its answer is relayed; a
        // region at its limit is answered at once (no attempt, no retry).
        let (_permit, mut answer) = match self.admit_region(region) {
            Ok(permit) => (Some(permit), None),
            Err(reason) => (None, Some(self.overloaded(region, reason))),
        };
        let connects = Connects {
            region: &region.state,
            max: self.config.limits.region_max_pending_connects,
        };
        if answer.is_none() {
            region.state.budget.deposit(retry);
        }
        for attempt in 0..=retry.max_retries {
            if answer.is_some()
                || attempt > 0 && (out.held.is_none() || !region.state.budget.withdraw(retry))
            {
                break;
            }
            let i = match health::pick(&region.upstreams, &region.state.cursor, tried) {
                Pick::Upstream(i) => i,
                Pick::AllEjected { retry_after_ms } if last.is_none() => {
                    answer = Some(Problem::Unavailable {
                        region: region.name.clone(),
                        retry_after: Duration::from_millis(retry_after_ms),
                    });
                    break;
                }
                Pick::AllEjected { .. } | Pick::Exhausted => break,
            };
            tried |= 1 << (i % 64);
            let chosen = &region.upstreams[i];
            let state = &chosen.state;
            last_upstream = Some(chosen.authority.clone());
            tracing::Span::current().record("upstream", chosen.authority.as_str());
            let in_flight = state.health.start();
            let sent = Instant::now();
            let failed = match self.h1_attempt(client, state, &out, connects).await {
                Ok((up, head)) => {
                    let took = sent.elapsed();
                    metrics.upstream_duration(took.as_secs_f64());
                    region.state.sample(&self.config.limits, took);
                    let responded = self
                        .h1_respond(client, state, up, &head, &out, id, close)
                        .await;
                    conn::give_fields(head.fields);
                    drop(in_flight);
                    match responded {
                        Ok(responded) => {
                            match responded.upstream_failed {
                                Some(kind) => {
                                    metrics.upstream_error(kind);
                                    let health = &self.config.health;
                                    health::record_failure(&region.upstreams, i, health);
                                }
                                None => state.health.success(),
                            }
                            return Answered {
                                status: responded.status,
                                upstream: last_upstream,
                                outcome: responded.outcome,
                            };
                        }
                        // Nothing of the answer went out: 502, the upstream's fault.
                        Err(detail) => {
                            metrics.upstream_error(ErrorKind::Reset);
                            health::record_failure(&region.upstreams, i, &self.config.health);
                            tracing::warn!(region = %region.name, upstream = %chosen.authority, %detail, "upstream failed");
                            answer = Some(Problem::BadGateway {
                                region: region.name.clone(),
                                detail,
                            });
                            break;
                        }
                    }
                }
                Err(failed) => failed,
            };
            let error = match failed {
                Failed::Client(error) => {
                    crate::metrics::client_error(error.kind);
                    tracing::debug!(upstream = %chosen.authority, %error, "the client failed its request");
                    answer = Some(Problem::Client(error));
                    break;
                }
                Failed::Switched => {
                    metrics.upstream_error(ErrorKind::Reset);
                    answer = Some(Problem::BadGateway {
                        region: region.name.clone(),
                        detail: "the upstream answered 101 Switching Protocols to a request \
                                 that asked for no upgrade"
                            .to_owned(),
                    });
                    break;
                }
                // The router's own limit: nothing was sent; not the upstream's, not retried.
                Failed::Upstream(Error {
                    kind: ErrorKind::Shed(reason),
                    ..
                }) => {
                    metrics.shed(reason);
                    answer = Some(self.overloaded(region, reason));
                    break;
                }
                Failed::Upstream(error) => error,
            };
            if error.kind == ErrorKind::Timeout {
                region.state.sample(&self.config.limits, sent.elapsed());
            }
            metrics.upstream_error(error.kind);
            if let Some(ms) = health::record_failure(&region.upstreams, i, &self.config.health) {
                tracing::warn!(upstream = %chosen.authority, ejected_ms = ms, "upstream ejected");
            }
            let retryable = match error.kind.retry() {
                Retry::Always => true,
                Retry::IfIdempotent => out.idempotent,
                Retry::Never => false,
            };
            let more_to_come =
                out.held.is_some() && attempt < retry.max_retries && region.upstreams.len() > 1;
            tracing::debug!(upstream = %chosen.authority, %error, attempt, "upstream attempt failed");
            last = Some(error);
            if !retryable || !more_to_come {
                break;
            }
        }
        let problem = answer.unwrap_or_else(|| match last {
            None => Problem::Unavailable {
                region: region.name.clone(),
                retry_after: Duration::ZERO,
            },
            Some(error) if error.blame() == Blame::Client => Problem::Client(error),
            Some(error) if error.kind == ErrorKind::Timeout => Problem::GatewayTimeout {
                region: region.name.clone(),
                detail: error.detail,
            },
            Some(error) => {
                tracing::warn!(region = %region.name, detail = %error.detail, "upstream failed");
                Problem::BadGateway {
                    region: region.name.clone(),
                    detail: error.detail,
                }
            }
        });
        let status = problem.status().as_u16();
        // A request whose body was streamed (or broke) cannot be followed on its connection;
        // a shed one's client comes back after `Retry-After` on a new one (docs/overload.md).
        let close = close || problem.closes_connection() || out.held.is_none() || out.http10;
        let written = write_problem(client, problem, id, close, idle).await;
        Answered {
            status,
            upstream: last_upstream,
            outcome: if close || !written {
                Outcome::Close
            } else {
                Outcome::KeepAlive
            },
        }
    }

    /// One attempt: a pooled or new connection, the request written (its body relayed if it
    /// streams), the response head read (1xx answers other than `100` passed to the client).
    async fn h1_attempt<S>(
        &self,
        client: &mut Buffered<S>,
        state: &Arc<UpstreamState>,
        out: &Outbound,
        connects: Connects<'_>,
    ) -> Result<(RawConn, ResponseHead), Failed>
    where
        S: AsyncRead + AsyncWrite + Unpin + Readiness,
    {
        self.h1_send(client, state, out, connects).await
    }

    /// The request's head with this upstream's `Host`, in a buffer from the cache (a small
    /// one when it fits). Held only while it is written: a request waiting on its answer
    /// holds no more than `out`.
    fn h1_wire(&self, state: &UpstreamState, out: &Outbound) -> Vec<u8> {
        let host = state.host.as_bytes();
        let mut wire = if out.bytes.len() + host.len() + 8 <= conn::SMALL {
            conn::take_small()
        } else {
            conn::take_buffer()
        };
        wire.extend_from_slice(&out.bytes[..out.line_end]);
        if !(self.config.preserve_host && has_host(&out.bytes[out.line_end..out.fields_end])) {
            write::field(&mut wire, b"Host", host);
        }
        wire.extend_from_slice(&out.bytes[out.line_end..]);
        wire
    }

    /// [`Proxy::h1_attempt`]: the request written (again on a new connection if a pooled one
    /// turns out closed), its body relayed, the answer's head read.
    async fn h1_send<S>(
        &self,
        client: &mut Buffered<S>,
        state: &Arc<UpstreamState>,
        out: &Outbound,
        connects: Connects<'_>,
    ) -> Result<(RawConn, ResponseHead), Failed>
    where
        S: AsyncRead + AsyncWrite + Unpin + Readiness,
    {
        let idle = self.config.timeouts.idle();
        // A pooled connection the upstream closed just as the request left it is replaced by
        // a new one once, when nothing of the answer came and sending again is safe.
        let mut pooled = state.raw_pool().checkout(idle);
        let mut retried = false;
        loop {
            let (mut up, reused) = next_conn(state, &mut pooled, retried, Some(connects), idle)
                .await
                .map_err(Failed::Upstream)?;
            let again = reused && out.held.is_some() && !retried;
            retried |= again;
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
            let wire = self.h1_wire(state, out);
            let written = match body {
                0 => write_all(&mut up.io, &wire, idle).await,
                _ => conn::write_two(&mut up.io, &wire, &client.pending()[..body], idle).await,
            };
            conn::give_back(wire);
            if written.is_err() && again {
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
                Err(Failed::Upstream(e))
                    if again
                        && e.kind == ErrorKind::Reset
                        && up.buf.is_empty()
                        && out.idempotent =>
                {
                    continue;
                }
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
                Ok(true) if head.status == 101 => return Err(Failed::Switched),
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
                    return Err(Failed::Client(Error::new(
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
