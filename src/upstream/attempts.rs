//! The attempt loop: every exchange with a region, whatever carries the request (the own
//! engine's head path, `http` parts from HTTP/2, gRPC and the bridge, fan-out legs, `nodes`
//! splits, legacy probes), is tried here, as Envoy's router filter owns retries for every
//! codec and Pingora runs one retry loop above its upstream protocols.
//!
//! Per attempt: pick an upstream (P2C over the healthy ones not tried yet, `health.rs`),
//! open the attempt's span (the one per-attempt hook: [`attempt_span`]), send on the wire
//! ([`Exchange`]), and judge the outcome by who is to blame: the client's error ends the
//! request (counted as the client's, never against the upstream), the router's own limit
//! ends it as shed, the upstream's is counted, may eject it, and is retried when the
//! request can be sent again ([`Exchange::replayable`]), its kind allows it
//! ([`crate::error::Retry`]: a connect failure always, a reset only when
//! [`Exchange::resendable`], a timeout never) and the region's retry budget has a token.
//!
//! The wire is a trait with static dispatch: each caller gets its own copy of the loop,
//! inlined as its own code was (no box, no copy of the request added on the REST path).

use std::future::Future;

use http::uri::Authority;
use tracing::Instrument;

use super::health::{self, Pick};
use super::regions::{Connects, RegionPermit, RegionRuntime, Routing, Upstream};
use crate::config::{HealthPolicy, Limits, RetryPolicy};
use crate::error::{Blame, Error, ErrorKind, Retry, ShedReason};
use crate::table::{Failover, RegionId};
use crate::trace::{Stamp, Traced};

/// Why an attempt failed.
#[derive(Debug)]
pub enum Failed {
    /// Judged by its kind's blame: the client's ends the request, the router's is shed,
    /// the upstream's is counted and may be retried.
    Error(Error),
    /// The upstream's, counted and ejecting, but never retried: an answer nobody can use
    /// (a `101` to a request that asked for no upgrade, RFC 9110 §15.2.2), or one that
    /// broke before any of it reached the client.
    Final(Error),
}

impl From<Error> for Failed {
    fn from(error: Error) -> Failed {
        Failed::Error(error)
    }
}

/// Why no upstream answered.
#[derive(Debug)]
pub enum ForwardError {
    /// The router's own limit for the region was reached (→ 503 `region-overloaded`;
    /// docs/overload.md): nothing was sent. Counted as shed by whoever refused it.
    Overloaded(ShedReason),
    /// A `region` rate limit refused the exchange (→ 429, docs/rate-limits.md): nothing
    /// was sent. Boxed: rare, and every exchange's result holds the error.
    Limited(Box<crate::ratelimit::Limited>),
    /// Every upstream of the region is ejected (→ 503 with `Retry-After`).
    Unavailable {
        /// When the first ejection ends, in ms.
        retry_after_ms: u64,
    },
    /// A region answered `421 Misdirected Request` that cannot be followed: a second one, an
    /// unknown region or none named, or the request's body not held (→ 502 `misdirected`,
    /// the upstream's; docs/failover.md). Nothing was sent again.
    Misdirected {
        /// The region that answered it.
        region: String,
        /// Its upstream.
        upstream: Authority,
    },
    /// The last attempt failed: its error says who is to blame and the status.
    Failed {
        /// What went wrong.
        error: Error,
        /// The upstream of the last attempt.
        upstream: Authority,
    },
}

/// Settings of the attempt loop ([`attempts`]).
#[derive(Debug, Clone, Copy)]
pub struct Policies<'a> {
    /// Retries and their budget.
    pub retry: &'a RetryPolicy,
    /// Outlier ejection.
    pub health: &'a HealthPolicy,
    /// The region limits (docs/overload.md): connections being made, the adaptive limit.
    pub limits: &'a Limits,
}

/// The wire under the loop: how one request is sent to one upstream and its answer
/// delivered. `proxy/h1/exchange.rs` (bytes on the own engine's sockets) and
/// `upstream/forward.rs` (`http` parts) implement it.
pub trait Exchange {
    /// An attempt's outcome: the answer's head, its body not yet relayed.
    type Head;
    /// What the exchange ends with once the head is delivered.
    type Done;

    /// Whether the request can be sent again (its body, if any, is held).
    fn replayable(&self) -> bool;

    /// Whether it may be sent again after the upstream may have acted on it (a reset):
    /// `extract::Access::resendable`.
    fn resendable(&self) -> bool;

    /// Whether the request reads (docs/data-path.md "Reads and writes"): a read may go to
    /// its region's failover region (docs/failover.md).
    fn reads(&self) -> bool;

    /// Whether it may go to a failover region at all: not a legacy probe or a mirror copy
    /// (each asks one region on purpose), nor a read a trusted peer failed over already
    /// (one hop).
    fn may_fail_over(&self) -> bool;

    /// Marks the attempts after this call as failed over from `owner`: `X-Iuid-Failover:
    /// <owner>` upstream, and on the answer delivered to the client.
    fn fail_over(&mut self, owner: &str);

    /// A `421` answer's `X-Iuid-Owner` (the region that owns the id, docs/failover.md).
    fn owner_hint(head: &Self::Head) -> Option<&str>;

    /// Sends `stamp`'s trace fields (`traceparent`, and `tracestate` or none) with the
    /// attempts after this call, in place of the client's (docs/traces.md). Called before
    /// each attempt of a sampled request (one that is not carries its fields already).
    fn stamp(&mut self, stamp: Stamp);

    /// The status code of an answer's head (its attempt's `CLIENT` span records it).
    fn status(head: &Self::Head) -> u16;

    /// Sends the request to `upstream` and reads the answer's head. `again`: a retry may
    /// follow, so the request must be kept.
    fn attempt<'s>(
        &'s mut self,
        upstream: &'s Upstream,
        connects: Connects<'s>,
        again: bool,
    ) -> impl Future<Output = Result<Self::Head, Failed>> + 's;

    /// Delivers an answer's head (and, on the own engine, relays its body): what the
    /// exchange ends with, and the upstream's failure while its body was relayed, if it
    /// failed then (counted and ejecting, the answer already on its way). `Err`: it broke
    /// before any of it reached the client, which is answered 502.
    fn deliver(
        &mut self,
        upstream: &Upstream,
        head: Self::Head,
    ) -> impl Future<Output = Result<(Self::Done, Option<ErrorKind>), Error>>;
}

/// What a delivered exchange keeps: its outcome, the upstream that gave it, the guard that
/// counts it in flight there (P2C balances on it), and its place in the region's limit.
#[derive(Debug)]
pub struct Delivered<D> {
    /// The wire's outcome.
    pub done: D,
    /// The upstream that answered.
    pub upstream: Authority,
    /// Keep it while the answer's body streams.
    pub in_flight: health::InFlight,
    /// The request's place in `limits.region_max_in_flight`: kept as long.
    pub region_permit: RegionPermit,
    /// Whether it was answered by a failover region or a hinted owner.
    pub detour: Detour,
}

/// The per-attempt hook: the span an attempt runs in, a child of the current span (the
/// request's), one per attempt, so a retry shows as one more; it names the region and the
/// upstream. Debug level: free unless enabled. A client span or per-attempt fields go here.
pub fn attempt_span(region: &RegionRuntime, upstream: &Upstream, attempt: u32) -> tracing::Span {
    let span = tracing::debug_span!(
        "attempt",
        region = region.name.as_str(),
        upstream = upstream.authority.as_str(),
        attempt,
    );
    // The request's span names the upstream too (what is logged between attempts carries
    // it); only looked up when spans are on, as it costs a lookup per request otherwise.
    if !span.is_disabled() {
        tracing::Span::current().record("upstream", upstream.authority.as_str());
    }
    span
}

/// What an exchange did besides asking the owner's upstreams (docs/failover.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Detour {
    /// Asked the region it was sent to, only.
    #[default]
    Stayed,
    /// Sent to the region's failover region, marked `X-Iuid-Failover`.
    FailedOver(RegionId),
    /// Sent again to the owner a `421` answer's `X-Iuid-Owner` named.
    Hinted(RegionId),
}

/// Runs the exchange `x` with an upstream of `region` (of `routing`) under `policies`, with
/// retries per the module rules; `trace`: the request's trace, whose `CLIENT` span each attempt opens
/// ([`Traced::attempt`]) and whose `traceparent` it sends. `admitted`: the request's place in the region's limit, or why the
/// caller's admission (`proxy::phases::admit_region`) refused it; kept in the answer.
/// (Taken here rather than refused by the caller around this future: a future around it
/// is one more copy of it on every request.)
///
/// Two detours (docs/failover.md), both off the path of a region without a failover that
/// answers no `421`: a request that may move ([`Exchange::reads`], `failover.serves`) goes
/// to the region's failover region by an even draw against its health share, or when an
/// attempt on a dying upstream fails (the retry budget applies); an answer `421` with
/// `X-Iuid-Owner` sends the request once more, to the owner it names, when it is held.
///
/// A function returning its future, not an `async fn`: an `async fn` keeps its arguments
/// beside the locals they are moved into, and every request's future would carry the wire
/// twice.
#[allow(clippy::manual_async_fn)] // See above: an `async fn` would keep the wire twice.
pub fn attempts<'a, X: Exchange + 'a>(
    routing: &'a Routing,
    region: &'a RegionRuntime,
    admitted: Result<RegionPermit, ShedReason>,
    policies: Policies<'a>,
    trace: Option<&'a Traced>,
    mut x: X,
) -> impl Future<Output = Result<Delivered<X::Done>, ForwardError>> + 'a {
    async move {
        let mut permit = admitted.map_err(ForwardError::Overloaded)?;
        region.state.budget.deposit(policies.retry);
        // Where attempts go now: the region, or after a detour another one.
        let mut at = region;
        let mut detour = Detour::Stayed;
        // Whether it may go to the region's failover region (then `region.failover` is set):
        // a flag, not the failover itself, so the loop's future carries one byte for it.
        let movable = region
            .failover
            .is_some_and(|f| f.moves(x.reads()) && x.may_fail_over());
        if let (true, Some(f)) = (movable, region.failover) {
            if !keeps(region, &f, crate::clock::now_ms()) {
                at = fail_over(routing, region, f, &mut x);
                permit = admit(at, policies)?;
                detour = Detour::FailedOver(f.region);
            }
        }
        let max_retries = policies.retry.max_retries;
        let mut tried = 0u64;
        let mut last: Option<(Error, Authority)> = None;
        let mut attempt = 0u32;
        let mut following_hint = false;
        'attempts: loop {
            if attempt > max_retries + u32::from(matches!(detour, Detour::Hinted(_))) {
                break;
            }
            // Sending a request once more to the owner a `421` named is not a retry: the
            // region said it did nothing, so it spends no retry budget.
            let hinted = std::mem::take(&mut following_hint);
            if attempt > 0
                && !hinted
                && (!x.replayable() || !region.state.budget.withdraw(policies.retry))
            {
                break;
            }
            let i = loop {
                match health::pick(&at.upstreams, &at.state.cursor, tried) {
                    Pick::Upstream(i) => break i,
                    // The region has none left to try: its reads go to the failover region.
                    _ if movable && detour == Detour::Stayed => match region.failover {
                        Some(f) => {
                            at = fail_over(routing, region, f, &mut x);
                            permit = admit(at, policies)?;
                            detour = Detour::FailedOver(f.region);
                            tried = 0;
                        }
                        None => break 'attempts,
                    },
                    Pick::AllEjected { retry_after_ms } if last.is_none() => {
                        return Err(ForwardError::Unavailable { retry_after_ms })
                    }
                    Pick::AllEjected { .. } | Pick::Exhausted => break 'attempts,
                }
            };
            tried |= 1 << (i % 64);
            let upstream = &at.upstreams[i];
            let state = &upstream.state;
            let metrics = &at.state.metrics;
            // A retry goes to another upstream (or region), so a region of one with
            // nowhere else to go never needs the request again; nor does the last attempt,
            // unless a `421` may still send it to its owner.
            let again = x.replayable()
                && (detour != Detour::Stayed
                    || (attempt < max_retries && (at.upstreams.len() > 1 || movable))
                    || routing.len() > 1);
            let span = attempt_span(at, upstream, attempt);
            let mut client_span = trace.and_then(|t| {
                let (traced, stamp) = t.attempt(&at.name, upstream.authority.as_str(), attempt)?;
                x.stamp(stamp);
                Some(traced)
            });
            let in_flight = state.health.start();
            let sent = std::time::Instant::now();
            attempt += 1;
            // Instrumented only when the span is on, and the future awaited where it is
            // made: a wrapper, or a named future awaited later, is one more copy of it on
            // every request.
            let attempted = match span.is_disabled() {
                true => x.attempt(upstream, connects(at, policies), again).await,
                false => {
                    x.attempt(upstream, connects(at, policies), again)
                        .instrument(span)
                        .await
                }
            };
            let failed = match attempted {
                Ok(head) => {
                    if let Some(traced) = client_span.take() {
                        traced.answered(X::status(&head));
                    }
                    let took = sent.elapsed();
                    metrics.upstream_duration(took.as_secs_f64());
                    at.state.sample(policies.limits, took);
                    if X::status(&head) == 421 {
                        // RFC 9110 §15.5.20: not acted on; the region names the owner.
                        state.health.success();
                        let hinted = X::owner_hint(&head).and_then(|name| routing.by_name(name));
                        drop(head);
                        let followed = !matches!(detour, Detour::Hinted(_)) && x.replayable();
                        let (owner, to) = follow(routing, (at, upstream), hinted, followed)?;
                        at = to;
                        permit = admit(at, policies)?;
                        detour = Detour::Hinted(owner);
                        tried = 0;
                        following_hint = true;
                        continue;
                    }
                    match x.deliver(upstream, head).await {
                        Ok((done, failed_after)) => {
                            match failed_after {
                                Some(kind) => {
                                    metrics.upstream_error(kind);
                                    health::record_failure(&at.upstreams, i, policies.health);
                                }
                                None => state.health.success(),
                            }
                            return Ok(Delivered {
                                done,
                                upstream: upstream.authority.clone(),
                                in_flight,
                                region_permit: permit,
                                detour,
                            });
                        }
                        Err(error) => Failed::Final(error),
                    }
                }
                Err(failed) => failed,
            };
            let (error, retry) = match failed {
                Failed::Final(error) => (error, false),
                Failed::Error(error) => (error, true),
            };
            if let Some(traced) = client_span.take() {
                traced.failed(&error);
            }
            match error.blame() {
                // The router's own limit: nothing was sent; not the upstream's, not retried.
                Blame::Router => {
                    let reason = match error.kind {
                        ErrorKind::Shed(reason) => reason,
                        _ => ShedReason::MaxInFlight,
                    };
                    metrics.shed(reason);
                    return Err(ForwardError::Overloaded(reason));
                }
                Blame::Client => {
                    crate::metrics::client_error(error.kind);
                    tracing::debug!(upstream = %upstream.authority, %error, "the client failed its request");
                    return Err(ForwardError::Failed {
                        error,
                        upstream: upstream.authority.clone(),
                    });
                }
                Blame::Upstream => {}
            }
            if error.kind == ErrorKind::Timeout {
                at.state.sample(policies.limits, sent.elapsed());
            }
            metrics.upstream_error(error.kind);
            if let Some(ms) = health::record_failure(&at.upstreams, i, policies.health) {
                tracing::warn!(upstream = %upstream.authority, ejected_ms = ms, "upstream ejected");
            }
            let retryable = retry
                && match error.kind.retry() {
                    Retry::Always => true,
                    Retry::IfIdempotent => x.resendable(),
                    Retry::Never => false,
                };
            tracing::debug!(upstream = %upstream.authority, %error, attempt, "upstream attempt failed");
            last = Some((error, upstream.authority.clone()));
            if !retryable || !again {
                break;
            }
            // A read that failed on a dying upstream is tried next on the failover region.
            if let (true, Some(f), Detour::Stayed) = (movable, region.failover, detour) {
                if x.replayable() && attempt <= max_retries {
                    at = fail_over(routing, region, f, &mut x);
                    permit = admit(at, policies)?;
                    detour = Detour::FailedOver(f.region);
                    tried = 0;
                }
            }
        }
        match last {
            // A write its region's failover does not take, refused before anything was sent:
            // the region is dark to it, said as such (docs/failover.md), not as a bad gateway.
            Some((error, _))
                if region.failover.is_some() && !movable && error.kind == ErrorKind::Connect =>
            {
                let now = crate::clock::now_ms();
                let soonest = at.upstreams.iter().map(|u| u.state.health.ejected_until());
                let retry_after_ms = soonest.filter(|&t| t > now).min().map_or(1000, |t| t - now);
                Err(ForwardError::Unavailable { retry_after_ms })
            }
            Some((error, upstream)) => Err(ForwardError::Failed { error, upstream }),
            // Every upstream was unusable before any attempt.
            None => Err(ForwardError::Unavailable { retry_after_ms: 0 }),
        }
    }
}

/// Whether a request that may fail over stays with `region`: an even draw against the
/// share it keeps at its health share (Envoy's priority load, docs/failover.md).
fn keeps(region: &RegionRuntime, failover: &Failover, now: u64) -> bool {
    let kept = failover.kept(region.health_share(now));
    if kept >= 1.0 {
        return true;
    }
    let draw = (health::random() >> 11) as f64 / (1u64 << 53) as f64;
    draw < kept
}

/// The owner a `421` named (`hinted`) and its runtime, when it is `followed` (the first
/// hint, the request held); else why not: `Misdirected`. Counted. Out of the loop's way:
/// no request the regions answer as usual runs it.
#[cold]
#[inline(never)]
fn follow<'a>(
    routing: &'a Routing,
    (at, upstream): (&RegionRuntime, &Upstream),
    hinted: Option<RegionId>,
    followed: bool,
) -> Result<(RegionId, &'a RegionRuntime), ForwardError> {
    let Some(owner) = hinted.filter(|_| followed) else {
        return Err(ForwardError::Misdirected {
            region: at.name.clone(),
            upstream: upstream.authority.clone(),
        });
    };
    let to = routing.region(owner);
    crate::metrics::failover::owner_hint(&at.name, &to.name);
    Ok((owner, to))
}

/// Where connections to `at`'s upstreams ask for room.
fn connects<'a>(at: &'a RegionRuntime, policies: Policies<'_>) -> Connects<'a> {
    Connects {
        region: &at.state,
        max: policies.limits.region_max_pending_connects,
    }
}

/// A place in `at`'s limit for a request a detour sends there.
#[cold]
fn admit(at: &RegionRuntime, policies: Policies<'_>) -> Result<RegionPermit, ForwardError> {
    at.state.admit(policies.limits).ok_or_else(|| {
        at.state.metrics.shed(ShedReason::MaxInFlight);
        ForwardError::Overloaded(ShedReason::MaxInFlight)
    })
}

/// Marks `x` as failed over from `region` (its `X-Iuid-Failover`) and counts it; the
/// failover region's runtime.
#[cold]
fn fail_over<'a, X: Exchange>(
    routing: &'a Routing,
    region: &RegionRuntime,
    failover: Failover,
    x: &mut X,
) -> &'a RegionRuntime {
    let to = routing.region(failover.region);
    x.fail_over(&region.name);
    crate::metrics::failover::failover(&region.name, &to.name, x.reads());
    to
}
