//! Phase 5 for requests in `http` form (HTTP/2, gRPC, the bridge's, fan-out legs, splits,
//! legacy probes): an upstream of the region through `upstream::forward` (pick, retries,
//! ejection), after the region's admission (`phases::admit_region`), and its failure as the
//! problem to answer. The own engine's head path sends with `h1/exchange.rs`.

use std::future::Future;
use std::time::Duration;

use http::request::Parts;

use super::{headers, Proxy, Target};
use crate::error::{Blame, ErrorKind, ShedReason};
use crate::extract::Access;
use crate::problem::Problem;
use crate::trace::Traced;
use crate::upstream::attempts::{attempts, Delivered, Exchange, ForwardError, Policies};
use crate::upstream::forward::{Answered, HttpExchange, Outgoing};
use crate::upstream::regions::{RegionRuntime, Routing};
use crate::upstream::UpstreamState;

impl Proxy {
    /// Every exchange with a region, whatever its wire: the region's admission
    /// (`phases::admit_region`, docs/overload.md), then the attempt loop
    /// (`upstream::attempts`), each attempt a `CLIENT` span of `trace`. The one way to an
    /// upstream.
    pub(super) fn exchange<'a, X: Exchange + 'a>(
        &'a self,
        routing: &'a Routing,
        region: &'a RegionRuntime,
        trace: Option<&'a Traced>,
        x: X,
    ) -> impl Future<Output = Result<Delivered<X::Done>, ForwardError>> + 'a {
        let policies = Policies {
            retry: &self.config.retries,
            health: &self.config.health,
            limits: &self.config.limits,
        };
        // The loop's own future, not one around it: each layer is one more copy of it on
        // every request.
        attempts(
            routing,
            region,
            self.admit_region(region),
            policies,
            trace,
            x,
        )
    }

    /// Sends a request to an upstream of `region`, for the paths that ask several regions
    /// (fan-out legs, `nodes` splits, legacy probes), after the region's rate limits (each
    /// spends the region's budget as a request to it would: docs/rate-limits.md); each
    /// attempt's span is a child of the current one, and of the request's `trace`.
    ///
    /// `way`: whether it reads, over its method (a `nodes` split's `POST` does), and whether
    /// it asks `region` alone, never its failover region (a legacy probe, a mirror copy:
    /// docs/failover.md); a fan-out leg or a split may fail over.
    pub(super) fn send<'a>(
        &'a self,
        (routing, region): (&'a Routing, &'a RegionRuntime),
        parts: Parts,
        body: Outgoing,
        trace: Option<&'a Traced>,
        (said, stays): (Option<Access>, bool),
    ) -> impl Future<Output = Result<Answered, ForwardError>> + 'a {
        let limited = self.limits.as_ref().map(|limits| {
            limits.check_region(|| super::phases::RequestView::path(&parts), &region.name)
        });
        let preserve_host = self.config.preserve_host;
        let aim = move |head: &mut Parts, upstream: &UpstreamState| {
            headers::aim(head, &upstream.authority, &upstream.host, preserve_host);
        };
        let x = HttpExchange::new(parts, body, said, aim);
        let x = if stays { x.staying() } else { x };
        async move {
            if let Some(verdict) = limited {
                verdict.decided().await.map_err(ForwardError::Limited)?;
            }
            self.exchange(routing, region, trace, x)
                .await
                .map(Answered::from)
        }
    }

    /// Phase 5: an upstream of the region; its failure as the problem to answer.
    ///
    /// A combinator, not an `async fn`: the forwarding future is kept once, in place (an
    /// `async fn` would keep its arguments beside it while the request waits).
    pub(super) fn forward<'a>(
        &'a self,
        target: &'a Target,
        parts: Parts,
        body: Outgoing,
        trace: Option<&'a Traced>,
    ) -> impl Future<Output = Result<Answered, Problem>> + Send + 'a {
        let region = target.region();
        let preserve_host = self.config.preserve_host;
        // The same aim as `send`'s, but its own closure: an instance with this one caller is
        // inlined here, as it was before the several-region paths shared `send`'s
        // (measured: sharing it cost about 500 instructions per request in moves of the
        // request head between the two futures).
        let aim = move |head: &mut Parts, upstream: &UpstreamState| {
            headers::aim(head, &upstream.authority, &upstream.host, preserve_host);
        };
        let x = HttpExchange::new(parts, body, target.said, aim);
        futures_util::FutureExt::map(
            self.exchange(&target.routing, region, trace, x),
            move |forwarded| self.judged(region, forwarded.map(Answered::from)),
        )
    }

    /// An exchange's outcome as the answer or the problem to send: the one mapping from
    /// failure to problem, for every wire.
    pub(super) fn judged<T>(
        &self,
        region: &RegionRuntime,
        forwarded: Result<T, ForwardError>,
    ) -> Result<T, Problem> {
        match forwarded {
            Ok(answered) => Ok(answered),
            Err(ForwardError::Overloaded(reason)) => Err(self.overloaded(region, reason)),
            Err(ForwardError::Limited(limited)) => Err(Problem::RateLimited(limited)),
            Err(ForwardError::Misdirected { region, upstream }) => {
                tracing::warn!(%region, %upstream, "421 not followed");
                Err(Problem::Misdirected { region })
            }
            Err(ForwardError::Unavailable { retry_after_ms }) => Err(Problem::Unavailable {
                region: region.name.clone(),
                retry_after: Duration::from_millis(retry_after_ms),
            }),
            Err(ForwardError::Failed { error, upstream }) => match error.blame() {
                // Already counted as the client's by `forward`, never against the upstream.
                Blame::Client => Err(Problem::Client(error)),
                // `forward` answers the router's own refusals as `Overloaded`.
                Blame::Router => Err(self.overloaded(region, ShedReason::MaxInFlight)),
                Blame::Upstream if error.kind == ErrorKind::Timeout => {
                    Err(Problem::GatewayTimeout {
                        region: region.name.clone(),
                        detail: error.detail,
                    })
                }
                Blame::Upstream => {
                    tracing::warn!(region = %region.name, %upstream, detail = %error.detail, "upstream failed");
                    Err(Problem::BadGateway {
                        region: region.name.clone(),
                        detail: error.detail,
                    })
                }
            },
        }
    }
}
