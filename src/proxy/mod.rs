//! The request's life: check for loops → extract the id → resolve the region → pick an
//! upstream → forward → respond. [`Proxy::handle`] reads top to bottom in that order, one named
//! function per phase, in the manner of Pingora's `ProxyHttp` phases.
//!
//! The live routing table is read through `arc-swap`: no lock on the hot path, and a reload
//! never changes the table under a request that already resolved its region.

mod graphql;
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
use crate::table::{Decision, RegionId, RoutingTable};
use crate::upstream::{ForwardError, UpstreamBody, UpstreamClient};
use headers::Forwarding;
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
    fn region_name(&self) -> String {
        self.table.region(self.region).name.clone()
    }
}

/// This router's `Via` entries, one per protocol version a client may speak, made once.
#[derive(Debug)]
struct ViaValues {
    http10: HeaderValue,
    http11: HeaderValue,
    http2: HeaderValue,
}

impl ViaValues {
    fn new(region: &str) -> ViaValues {
        let make = |v| {
            headers::via_value(v, region).unwrap_or(HeaderValue::from_static("1.1 iuid-router"))
        };
        ViaValues {
            http10: make(http::Version::HTTP_10),
            http11: make(http::Version::HTTP_11),
            http2: make(http::Version::HTTP_2),
        }
    }

    fn for_version(&self, version: http::Version) -> &HeaderValue {
        match version {
            http::Version::HTTP_10 | http::Version::HTTP_09 => &self.http10,
            http::Version::HTTP_2 | http::Version::HTTP_3 => &self.http2,
            _ => &self.http11,
        }
    }
}

/// Shared state of the data path: config, live table, upstream client.
#[derive(Debug)]
pub struct Proxy {
    config: Arc<RouterConfig>,
    table: Arc<ArcSwap<RoutingTable>>,
    client: UpstreamClient,
    via: ViaValues,
}

impl Proxy {
    /// A proxy over a live table (shared with whoever reloads it).
    pub fn new(config: Arc<RouterConfig>, table: Arc<ArcSwap<RoutingTable>>) -> Proxy {
        let client = UpstreamClient::new(&config.timeouts);
        // The config validated the region as a token, so the fallback is never used.
        let via = ViaValues::new(&config.region);
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
        let (target, body) = match self.route(&parts, body).await {
            Ok(routed) => routed,
            Err(problem) => return problem.into_response().map(Either::Right),
        };
        self.rewrite_request(&mut parts, client, &target.authority);
        match self.forward(parts, body).await {
            Ok(resp) => self.respond(resp),
            Err(ForwardError::TimedOut) => Problem::GatewayTimeout {
                region: target.region_name(),
                after_ms: self.config.timeouts.response_headers_ms,
            }
            .into_response()
            .map(Either::Right),
            Err(ForwardError::Failed(detail)) => {
                let region = target.region_name();
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
    ) -> Result<(Target, UpstreamBody), Problem> {
        let limits = &self.config.limits;
        headers::check_loop(&parts.headers, &self.config.region, limits.max_hops)
            .map_err(Problem::Loop)?;
        let (found, body) = self.extract(parts, body).await?;
        let table = self.table.load_full();
        let decision = self.resolve(&table, found)?;
        let authority = table
            .region(decision.region)
            .next_upstream()
            .authority
            .clone();
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
                        rule: crate::table::Rule::DefaultRegion,
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
