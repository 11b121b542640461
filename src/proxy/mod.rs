//! The request's life: check for loops → extract the id → resolve the region → pick an
//! upstream → forward → respond. [`Proxy::handle`] reads top to bottom in that order, one named
//! function per phase, in the manner of Pingora's `ProxyHttp` phases.
//!
//! The live routing table is read through `arc-swap`: no lock on the hot path, and a reload
//! never changes the table under a request that already resolved its region.

mod graphql;
pub mod headers;
pub mod problem;
pub mod request_id;

use std::net::SocketAddr;
use std::sync::Arc;

use std::time::Instant;

use ::metrics::SharedString;
use bytes::Bytes;
use http::header::HOST;
use http::request::Parts;
use http::uri::{Authority, Uri};
use http::{HeaderValue, Request, Response};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use tracing::Instrument;

use crate::config::{RouterConfig, Unrouted};
use crate::extract::Extraction;
use crate::metrics;
use crate::table::{Decision, LiveTable, RegionId, RoutingTable};
use crate::upstream::{ForwardError, UpstreamBody, UpstreamClient};
use headers::{Forwarding, ViaValues};
use problem::Problem;

/// The body of every response the router sends: the upstream's, streamed, or one of its own.
pub type ProxyBody = Either<Incoming, Full<Bytes>>;

/// Where a request goes: the upstream picked, and the table and region it came from (the
/// table is kept so the region's name outlives a reload without copying it).
struct Target {
    authority: Authority,
    table: Arc<RoutingTable>,
    region: RegionId,
}

impl Target {
    fn region(&self) -> &crate::table::Region {
        self.table.region(self.region)
    }
}

/// What is known of a request as it goes through the phases, for metrics and the access log.
struct Trail {
    route: &'static str,
    region: Option<Arc<str>>,
    upstream: Option<Authority>,
}

/// Shared state of the data path: config, live table, upstream client.
#[derive(Debug)]
pub struct Proxy {
    config: Arc<RouterConfig>,
    table: Arc<LiveTable>,
    client: UpstreamClient,
    via: ViaValues,
}

impl Proxy {
    /// A proxy over a live table (shared with whoever reloads it).
    pub fn new(config: Arc<RouterConfig>, table: Arc<LiveTable>) -> Proxy {
        let client = UpstreamClient::new(&config.timeouts);
        let via = ViaValues::new(&config.region);
        Proxy {
            config,
            table,
            client,
            via,
        }
    }

    /// Handles one request end to end; never fails: refusals are problem+json responses.
    /// Around the phases: the request id (`x-request-id`, taken or made, passed upstream and
    /// returned), one tracing span, metrics, and the optional access log line.
    pub async fn handle(
        &self,
        mut req: Request<Incoming>,
        client: SocketAddr,
    ) -> Response<ProxyBody> {
        let _in_flight = metrics::InFlight::start();
        let started = Instant::now();
        let request_id = request_id::take_or_make(req.headers_mut());
        let span = tracing::info_span!(
            "request",
            request_id = request_id::as_str(&request_id),
            method = %req.method(),
            id = tracing::field::Empty,
            region = tracing::field::Empty,
            upstream = tracing::field::Empty,
        );
        let mut trail = Trail {
            route: "none",
            region: None,
            upstream: None,
        };
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let mut resp = self.phases(req, client, &mut trail).instrument(span).await;
        resp.headers_mut()
            .insert(request_id::HEADER.clone(), request_id.clone());

        let status = resp.status().as_u16();
        let region = trail
            .region
            .as_ref()
            .map_or(SharedString::const_str("none"), metrics::label);
        metrics::request(trail.route, region, status);
        if self.config.access_log {
            tracing::info!(
                target: "iuid_router::access",
                request_id = request_id::as_str(&request_id),
                %method,
                path,
                status,
                route = trail.route,
                region = trail.region.as_deref().unwrap_or("-"),
                upstream = %trail.upstream.as_ref().map_or("-", |a| a.as_str()),
                duration_ms = started.elapsed().as_secs_f64() * 1e3,
            );
        }
        resp
    }

    /// The phases in order; each refusal returns early as problem+json.
    async fn phases(
        &self,
        req: Request<Incoming>,
        client: SocketAddr,
        trail: &mut Trail,
    ) -> Response<ProxyBody> {
        let (mut parts, body) = req.into_parts();
        let (target, body) = match self.route(&parts, body, trail).await {
            Ok(routed) => routed,
            Err(problem) => return problem.into_response().map(Either::Right),
        };
        self.rewrite_request(&mut parts, client, &target.authority);
        let label = metrics::label(&target.region().label);
        let sent = Instant::now();
        let forwarded = self.forward(parts, body).await;
        match forwarded {
            Ok(resp) => {
                metrics::upstream_duration(label, sent.elapsed().as_secs_f64());
                self.respond(resp)
            }
            Err(ForwardError::TimedOut) => {
                metrics::upstream_error(label, "timeout");
                Problem::GatewayTimeout {
                    region: target.region().name.clone(),
                    after_ms: self.config.timeouts.response_headers_ms,
                }
                .into_response()
                .map(Either::Right)
            }
            Err(ForwardError::Failed { kind, detail }) => {
                metrics::upstream_error(label, kind);
                let region = target.region().name.clone();
                tracing::warn!(%region, upstream = %target.authority, %detail, "upstream failed");
                Problem::BadGateway { region, detail }
                    .into_response()
                    .map(Either::Right)
            }
        }
    }

    /// Phases 1–4: loop check, id extraction, region resolution, upstream choice. The body
    /// comes back as it must go upstream (read whole only for GraphQL).
    async fn route(
        &self,
        parts: &Parts,
        body: Incoming,
        trail: &mut Trail,
    ) -> Result<(Target, UpstreamBody), Problem> {
        let limits = &self.config.limits;
        headers::check_loop(&parts.headers, &self.config.region, limits.max_hops)
            .map_err(Problem::Loop)?;
        let (found, body) = self.extract(parts, body).await?;
        trail.route = found.route_kind();
        if let Extraction::Id(id, _) = &found {
            tracing::Span::current().record("id", tracing::field::display(id));
        }
        let table = self.table.current();
        let decision = self.resolve(&table, found)?;
        metrics::decision(decision.rule.kind());
        let region = table.region(decision.region);
        let authority = region.next_upstream().authority.clone();
        let span = tracing::Span::current();
        span.record("region", &*region.label);
        span.record("upstream", authority.as_str());
        trail.region = Some(region.label.clone());
        trail.upstream = Some(authority.clone());
        let target = Target {
            authority,
            table,
            region: decision.region,
        };
        Ok((target, body))
    }

    /// Phase 2: the id(s) in the request, from its head, or from its body for GraphQL.
    async fn extract(
        &self,
        parts: &Parts,
        body: Incoming,
    ) -> Result<(Extraction<'_>, UpstreamBody), Problem> {
        match self.config.routes.extract(parts) {
            Extraction::Graphql(route) => {
                let limit = self.config.limits.graphql_body_bytes;
                let (ids, body) = graphql::read_ids(route, parts, body, limit).await?;
                Ok((Extraction::Ids(ids), body))
            }
            found => Ok((found, Either::Left(body))),
        }
    }

    /// Phase 3: the region that owns the id(s), or the `unrouted` policy when there is none.
    fn resolve(&self, table: &RoutingTable, found: Extraction) -> Result<Decision, Problem> {
        match found {
            Extraction::Id(id, _) => table.resolve(&id).map_err(Problem::Unowned),
            Extraction::Ids(ids) if !ids.is_empty() => resolve_all(table, &ids),
            Extraction::Malformed(e, kind) => Err(Problem::MalformedId(e, kind)),
            Extraction::NoId | Extraction::Ids(_) | Extraction::Graphql(_) => {
                match self.config.unrouted {
                    Unrouted::DefaultRegion => Ok(Decision {
                        region: table.default_region,
                        rule: crate::table::Rule::Unrouted,
                    }),
                    Unrouted::Reject => Err(Problem::NoId),
                }
            }
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
        headers::rewrite_request(
            &mut parts.headers,
            &Forwarding {
                client,
                original_host: original_host.as_ref(),
                upstream,
                via: self.via.for_version(parts.version),
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
        body: UpstreamBody,
    ) -> Result<Response<Incoming>, ForwardError> {
        self.client.send(Request::from_parts(parts, body)).await
    }

    /// Phase 6: the upstream's response with SPEC §6's header rules; the body streams back.
    fn respond(&self, mut resp: Response<Incoming>) -> Response<ProxyBody> {
        headers::rewrite_response(resp.headers_mut(), &self.via.http11);
        resp.map(Either::Left)
    }
}

/// The one region that owns every id of a GraphQL request; ids in several regions cannot be
/// served by one upstream (SPEC §6: 400 naming the regions).
fn resolve_all(table: &RoutingTable, ids: &[iuid::Id]) -> Result<Decision, Problem> {
    let mut decisions = Vec::with_capacity(ids.len());
    for id in ids {
        decisions.push(table.resolve(id).map_err(Problem::Unowned)?);
    }
    let first = decisions[0];
    if decisions.iter().all(|d| d.region == first.region) {
        return Ok(first);
    }
    let placed = ids
        .iter()
        .zip(&decisions)
        .map(|(id, d)| (id.to_string(), table.region(d.region).name.clone()))
        .collect();
    Err(Problem::RegionConflict { ids: placed })
}
