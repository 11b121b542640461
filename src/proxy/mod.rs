//! The request's life: check for loops → extract the id → resolve the region → pick an
//! upstream → forward → respond. [`Proxy::handle`] reads top to bottom in that order, one named
//! function per phase, in the manner of Pingora's `ProxyHttp` phases.
//!
//! The live routing table is read through `arc-swap`: no lock on the hot path, and a reload
//! never changes the table under a request that already resolved its region.

pub mod headers;
pub mod problem;

use std::net::SocketAddr;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::HOST;
use http::request::Parts;
use http::uri::{Authority, Uri};
use http::{HeaderValue, Request, Response};
use http_body_util::{Either, Full};
use hyper::body::Incoming;

use crate::config::{RouterConfig, Unrouted};
use crate::extract::Extraction;
use crate::table::{Decision, RoutingTable};
use crate::upstream::{ForwardError, UpstreamClient};
use headers::Forwarding;
use problem::Problem;

/// The body of every response the router sends: the upstream's, streamed, or one of its own.
pub type ProxyBody = Either<Incoming, Full<Bytes>>;

/// Where a request goes: the upstream picked and the region it belongs to.
struct Target {
    authority: Authority,
    region: Box<str>,
}

/// Shared state of the data path: config, live table, upstream client.
#[derive(Debug)]
pub struct Proxy {
    config: Arc<RouterConfig>,
    table: Arc<ArcSwap<RoutingTable>>,
    client: UpstreamClient,
    via: HeaderValue,
}

impl Proxy {
    /// A proxy over a live table (shared with whoever reloads it).
    pub fn new(config: Arc<RouterConfig>, table: Arc<ArcSwap<RoutingTable>>) -> Proxy {
        let client = UpstreamClient::new(&config.timeouts);
        // The config validated the region as a token, so this cannot fail in practice.
        let via = headers::via_value(http::Version::HTTP_11, &config.region)
            .unwrap_or(HeaderValue::from_static("1.1 iuid-router"));
        Proxy {
            config,
            table,
            client,
            via,
        }
    }

    /// Handles one request end to end; never fails: refusals are problem+json responses.
    pub async fn handle(&self, req: Request<Incoming>, client: SocketAddr) -> Response<ProxyBody> {
        let (mut parts, body) = req.into_parts();
        let target = match self.route(&parts) {
            Ok(target) => target,
            Err(problem) => return problem.into_response().map(Either::Right),
        };
        self.rewrite_request(&mut parts, client, &target.authority);
        match self.forward(parts, body).await {
            Ok(resp) => self.respond(resp),
            Err(ForwardError::TimedOut) => Problem::GatewayTimeout {
                region: target.region.into(),
                after_ms: self.config.timeouts.response_headers_ms,
            }
            .into_response()
            .map(Either::Right),
            Err(ForwardError::Failed(detail)) => {
                tracing::warn!(region = &*target.region, upstream = %target.authority, %detail, "upstream failed");
                Problem::BadGateway {
                    region: target.region.into(),
                    detail,
                }
                .into_response()
                .map(Either::Right)
            }
        }
    }

    /// Phases 1–4: loop check, id extraction, region resolution, upstream choice. Synchronous:
    /// the table guard never lives across an `.await`.
    fn route(&self, parts: &Parts) -> Result<Target, Problem> {
        headers::check_loop(
            &parts.headers,
            &self.config.region,
            self.config.limits.max_hops,
        )
        .map_err(Problem::Loop)?;
        let table = self.table.load();
        let decision = self.resolve(&table, self.config.routes.extract(parts))?;
        let region = table.region(decision.region);
        let upstream = region.next_upstream();
        Ok(Target {
            authority: upstream.authority.clone(),
            region: region.name.as_str().into(),
        })
    }

    /// Phase 3: the region that owns the id, or the `unrouted` policy when there is none.
    fn resolve(&self, table: &RoutingTable, found: Extraction) -> Result<Decision, Problem> {
        match found {
            Extraction::Id(id, _) => table.resolve(&id).map_err(Problem::Unowned),
            Extraction::Malformed(e, kind) => Err(Problem::MalformedId(e, kind)),
            Extraction::NoId => match self.config.unrouted {
                Unrouted::DefaultRegion => Ok(Decision {
                    region: table.default_region,
                    rule: crate::table::Rule::DefaultRegion,
                }),
                Unrouted::Reject => Err(Problem::NoId),
            },
        }
    }

    /// Phase 5a: SPEC §6 header rules, and the absolute URI for the upstream with the
    /// client's path and query unchanged, byte for byte.
    fn rewrite_request(&self, parts: &mut Parts, client: SocketAddr, upstream: &Authority) {
        let authority_host = parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
        let original_host = parts.headers.get(HOST).cloned().or(authority_host);
        let via = headers::via_value(parts.version, &self.config.region);
        headers::rewrite_request(
            &mut parts.headers,
            &Forwarding {
                client,
                original_host: original_host.as_ref(),
                upstream,
                via: via.as_ref().unwrap_or(&self.via),
                preserve_host: self.config.preserve_host,
            },
        );
        let mut uri = Uri::builder().scheme("http").authority(upstream.clone());
        if let Some(pq) = parts.uri.path_and_query() {
            uri = uri.path_and_query(pq.clone());
        } else {
            uri = uri.path_and_query("/");
        }
        if let Ok(uri) = uri.build() {
            parts.uri = uri;
        }
    }

    /// Phase 5b: sends upstream; the request body streams through.
    async fn forward(
        &self,
        parts: Parts,
        body: Incoming,
    ) -> Result<Response<Incoming>, ForwardError> {
        self.client.send(Request::from_parts(parts, body)).await
    }

    /// Phase 6: the upstream's response with SPEC §6's header rules; the body streams back.
    fn respond(&self, mut resp: Response<Incoming>) -> Response<ProxyBody> {
        headers::rewrite_response(resp.headers_mut(), &self.via);
        resp.map(Either::Left)
    }
}
