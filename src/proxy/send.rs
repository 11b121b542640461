//! Phase 5 for requests in `http` form (HTTP/2, gRPC, the bridge's, fan-out legs, splits,
//! legacy probes): an upstream of the region through `upstream::forward` (pick, retries,
//! ejection), after the region's admission (`phases::admit_region`), and its failure as the
//! problem to answer. The own engine's head path sends with `h1/exchange.rs`.

use std::future::Future;
use std::time::Duration;

use http::request::Parts;

use super::{headers, Proxy, Target};
use crate::error::{Blame, ErrorKind, ShedReason};
use crate::problem::Problem;
use crate::upstream::forward::{self, Answered, ForwardError, Outgoing, Policies};
use crate::upstream::regions::RegionRuntime;
use crate::upstream::UpstreamState;

impl Proxy {
    /// Sends a request to an upstream of `region`, with retries and ejection
    /// (`upstream::forward`), for the paths that ask several regions; the span records the
    /// upstream.
    ///
    /// Not an `async fn`: it returns `forward`'s own future, so the request head is not moved
    /// through one more state machine on every request.
    pub(super) fn send<'a>(
        &'a self,
        region: &'a RegionRuntime,
        parts: Parts,
        body: Outgoing,
        span: &'a tracing::Span,
    ) -> impl std::future::Future<Output = Result<Answered, ForwardError>> + 'a {
        let policies = Policies {
            retry: &self.config.retries,
            health: &self.config.health,
            limits: &self.config.limits,
        };
        let preserve_host = self.config.preserve_host;
        let aim = move |head: &mut Parts, upstream: &UpstreamState| {
            headers::aim(head, &upstream.authority, &upstream.host, preserve_host);
            span.record("upstream", upstream.authority.as_str());
        };
        match self.admit_region(region) {
            Ok(permit) => futures_util::future::Either::Left(forward::forward(
                region, permit, parts, body, policies, None, aim,
            )),
            Err(reason) => futures_util::future::Either::Right(std::future::ready(Err(
                ForwardError::Overloaded(reason),
            ))),
        }
    }

    /// Phase 5: an upstream of the region (`upstream::forward`); its failure as the problem
    /// to answer.
    ///
    /// A combinator, not an `async fn`: the forwarding future is kept once, in place (an
    /// `async fn` would keep its arguments beside it while the request waits).
    pub(super) fn forward<'a>(
        &'a self,
        target: &'a Target,
        parts: Parts,
        body: Outgoing,
        span: &'a tracing::Span,
    ) -> impl Future<Output = Result<Answered, Problem>> + Send + 'a {
        use futures_util::future::{ready, Either as Fut, FutureExt};
        let region = target.region();
        let policies = Policies {
            retry: &self.config.retries,
            health: &self.config.health,
            limits: &self.config.limits,
        };
        let preserve_host = self.config.preserve_host;
        // The same aim as `send`'s, but its own closure: a `forward` instance with this one
        // caller is inlined here, as it was before the several-region paths shared `send`'s
        // (measured: sharing it cost the REST path about 500 instructions per request in
        // moves of the request head between the two futures).
        let aim = move |head: &mut Parts, upstream: &UpstreamState| {
            headers::aim(head, &upstream.authority, &upstream.host, preserve_host);
            span.record("upstream", upstream.authority.as_str());
        };
        let permit = match self.admit_region(region) {
            Ok(permit) => permit,
            Err(reason) => return Fut::Left(ready(Err(self.overloaded(region, reason)))),
        };
        Fut::Right(
            forward::forward(region, permit, parts, body, policies, target.said, aim)
                .map(move |forwarded| self.judged(region, forwarded)),
        )
    }

    /// [`Proxy::forward`]'s outcome as the answer or the problem to send.
    fn judged(
        &self,
        region: &RegionRuntime,
        forwarded: Result<Answered, ForwardError>,
    ) -> Result<Answered, Problem> {
        match forwarded {
            Ok(answered) => Ok(answered),
            Err(ForwardError::Overloaded(reason)) => Err(self.overloaded(region, reason)),
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
