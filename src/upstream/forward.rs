//! Forwarding one request to a region, with retries on another upstream when that is safe.
//!
//! A retry needs the request again, so only requests whose body the router holds (no body, a
//! small body kept up to `retries.buffer_bytes`, or a GraphQL body) are retried; streamed
//! bodies get one attempt. What is retried:
//! - a connect failure (nothing was sent): any method;
//! - a reset before response headers: idempotent methods only (RFC 9110 §9.2.2), since the
//!   upstream may have acted on the request;
//! - never a response-header timeout: the upstream is slow, and asking another one only
//!   doubles the wait and the load.
//!
//! Each retry also needs the region's retry budget. Only upstream-blamed errors
//! ([`crate::error::Blame::Upstream`]) count towards ejection and in
//! `iuid_router_upstream_errors_total`; a client's own errors (its body) end the request at
//! once, counted in `iuid_router_client_errors_total`.

use std::sync::Arc;

use super::body::{BodyWatch, Inbound};
use super::health::{self, Pick};
use super::regions::{Connects, RegionPermit, RegionRuntime};
use super::{UpstreamBody, UpstreamState};
use crate::config::{HealthPolicy, Limits, RetryPolicy};
use crate::error::{Blame, Error, ErrorKind, Retry, ShedReason};
use crate::extract::Access;
use bytes::Bytes;
use http::request::Parts;
use http::uri::Authority;
use http::{Request, Response};
use http_body_util::{Either, Full};

/// The body to send: held (replayable) or streamed (one attempt).
#[derive(Debug)]
pub enum Outgoing {
    /// Bytes the router holds; sent again on a retry.
    Held(Bytes),
    /// The client's body, streamed through, and its watch (how the sender learns when it
    /// ended and whether the client failed it).
    Streamed(UpstreamBody, Arc<BodyWatch>),
}

/// An upstream's answer: its response head (the body still streaming), which upstream gave
/// it, and the guard that counts the request in flight there until the body is done.
#[derive(Debug)]
pub struct Answered {
    /// The upstream's response.
    pub response: Response<Inbound>,
    /// The upstream that gave it.
    pub upstream: Authority,
    /// Keep it with the response body (P2C balances on this count).
    pub in_flight: health::InFlight,
    /// The request's place in its region's `limits.region_max_in_flight`: kept with the
    /// response body too.
    pub region_permit: RegionPermit,
}

/// Why no upstream answered.
#[derive(Debug)]
pub enum ForwardError {
    /// The router's own limit for the region was reached (→ 503 `region-overloaded`;
    /// docs/overload.md): nothing was sent. Counted as shed by whoever refused it.
    Overloaded(ShedReason),
    /// Every upstream of the region is ejected (→ 503 with `Retry-After`).
    Unavailable {
        /// When the first ejection ends, in ms.
        retry_after_ms: u64,
    },
    /// The last attempt failed: its error says who is to blame and the status.
    Failed {
        /// What went wrong.
        error: Error,
        /// The upstream of the last attempt.
        upstream: Authority,
    },
}

/// Settings of [`forward`].
#[derive(Debug, Clone, Copy)]
pub struct Policies<'a> {
    /// Retries and their budget.
    pub retry: &'a RetryPolicy,
    /// Outlier ejection.
    pub health: &'a HealthPolicy,
    /// The region limits (docs/overload.md): connections being made, the adaptive limit.
    pub limits: &'a Limits,
}

/// A copy of a request head (`Parts` is not `Clone`: its extensions may not be).
pub fn copy_head(parts: &Parts) -> Parts {
    let mut req = Request::new(());
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = parts.uri.clone();
    *req.version_mut() = parts.version;
    *req.headers_mut() = parts.headers.clone();
    req.into_parts().0
}

/// Sends `parts` + `body` to an upstream of `region`, retrying per the module rules. `aim`
/// points the request at the chosen upstream (URI, `Host`). `permit`: the request's place
/// in the region's limit, taken by the caller (`proxy::phases`), kept in the answer.
/// `said`: whether the body says the request reads or writes (a GraphQL request's
/// operations), which decides over its method whether it is sent again after a reset
/// ([`Access::resendable`]).
///
/// The returned future keeps the head and body once: they are split before it (an `async fn`
/// keeps its arguments beside what they are moved into, bytes every waiting request holds).
pub fn forward<'a, Aim: Fn(&mut Parts, &UpstreamState) + Send + Sync + 'a>(
    region: &'a RegionRuntime,
    permit: RegionPermit,
    mut parts: Parts,
    body: Outgoing,
    policies: Policies<'a>,
    said: Option<Access>,
    aim: Aim,
) -> impl std::future::Future<Output = Result<Answered, ForwardError>> + Send + 'a {
    region.state.budget.deposit(policies.retry);
    let retry_ok = Access::resendable(parts.method.as_str().as_bytes(), said);
    let (held, mut streamed, watch) = match body {
        Outgoing::Held(bytes) => (Some(bytes), None, None),
        Outgoing::Streamed(b, watch) => (None, Some(b), Some(watch)),
    };
    async move {
        let metrics = &region.state.metrics;
        let mut tried = 0u64;
        let mut last: Option<(Error, Authority)> = None;
        for attempt in 0..=policies.retry.max_retries {
            if attempt > 0 && (held.is_none() || !region.state.budget.withdraw(policies.retry)) {
                break;
            }
            let i = match health::pick(&region.upstreams, &region.state.cursor, tried) {
                Pick::Upstream(i) => i,
                Pick::AllEjected { retry_after_ms } if last.is_none() => {
                    return Err(ForwardError::Unavailable { retry_after_ms })
                }
                Pick::AllEjected { .. } | Pick::Exhausted => break,
            };
            tried |= 1 << (i % 64);
            let upstream = &region.upstreams[i];
            let body = match (&held, streamed.take()) {
                (Some(bytes), _) => Either::Right(Full::new(bytes.clone())),
                (None, Some(b)) => b,
                (None, None) => break,
            };
            // A retry goes to another upstream, so a region of one never needs the head again.
            let more_to_come = held.is_some()
                && attempt < policies.retry.max_retries
                && region.upstreams.len() > 1;
            let mut head = if more_to_come {
                copy_head(&parts)
            } else {
                std::mem::replace(&mut parts, copy_head_empty())
            };
            aim(&mut head, &upstream.state);
            let state = &upstream.state;
            let in_flight = state.health.start();
            let sent = std::time::Instant::now();
            let connects = Connects {
                region: &region.state,
                max: policies.limits.region_max_pending_connects,
            };
            match state
                .send::<Aim>(
                    Request::from_parts(head, body),
                    watch.as_deref(),
                    Some(connects),
                )
                .await
            {
                Ok(resp) => {
                    state.health.success();
                    let took = sent.elapsed();
                    metrics.upstream_duration(took.as_secs_f64());
                    region.state.sample(policies.limits, took);
                    return Ok(Answered {
                        response: resp,
                        upstream: upstream.authority.clone(),
                        in_flight,
                        region_permit: permit,
                    });
                }
                // The router's own limit: nothing was sent; not the upstream's, not retried.
                Err(Error {
                    kind: ErrorKind::Shed(reason),
                    ..
                }) => {
                    metrics.shed(reason);
                    return Err(ForwardError::Overloaded(reason));
                }
                Err(error) if error.blame() == Blame::Client => {
                    crate::metrics::client_error(error.kind);
                    tracing::debug!(upstream = %upstream.authority, %error, "the client failed its request");
                    return Err(ForwardError::Failed {
                        error,
                        upstream: upstream.authority.clone(),
                    });
                }
                Err(error) => {
                    if error.kind == ErrorKind::Timeout {
                        region.state.sample(policies.limits, sent.elapsed());
                    }
                    metrics.upstream_error(error.kind);
                    if let Some(ms) = health::record_failure(&region.upstreams, i, policies.health)
                    {
                        tracing::warn!(upstream = %upstream.authority, ejected_ms = ms, "upstream ejected");
                    }
                    let retryable = match error.kind.retry() {
                        Retry::Always => true,
                        Retry::IfIdempotent => retry_ok,
                        Retry::Never => false,
                    };
                    tracing::debug!(upstream = %upstream.authority, %error, attempt, "upstream attempt failed");
                    last = Some((error, upstream.authority.clone()));
                    if !retryable || !more_to_come {
                        break;
                    }
                }
            }
        }
        match last {
            Some((error, upstream)) => Err(ForwardError::Failed { error, upstream }),
            // Every upstream was unusable before any attempt.
            None => Err(ForwardError::Unavailable { retry_after_ms: 0 }),
        }
    }
}

/// A placeholder head for a moved-out request (never sent).
fn copy_head_empty() -> Parts {
    Request::new(()).into_parts().0
}
