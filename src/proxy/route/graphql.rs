//! `graphql:` routes (docs/config.md, docs/data-path.md, docs/fanout.md): a GraphQL endpoint's
//! path, matched exactly; ids are read from `node(id:)` and `nodes(ids:)` in the request, and
//! with `split_nodes` a `nodes(ids: $var)` whose ids live in several regions is split, one
//! request per region.
//!
//! Phase 2 reads the body (bounded), finds the node ids, and keeps the bytes to send upstream
//! unchanged. Requests are read on the async worker when that is cheap: a cache hit costs a
//! few microseconds, cold parses of up to 4 KiB of documents about 100 µs. A request whose
//! cache-missing documents come to more than 4 KiB together (one large document, or a batch of
//! many small distinct ones), and any body over [`BLOCKING_ABOVE`] bytes (whose JSON decoding
//! alone takes milliseconds at 1 MiB), go to the blocking pool, so that a cold parse — bounded
//! by the token and depth limits — never holds up other connections of the same worker. The
//! scan, plan and plan cache are `crate::extract::graphql`'s.
//!
//! Splitting: without `split_nodes` (or with ids in literals, several fields, a batch) the
//! one-region 400 of docs/data-path.md stands; `GraphqlRoute::split_of` decides which requests
//! qualify, and each region is asked with [`Proxy::ask`] for its ids, in parallel, the answers
//! merged as one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::trace::Traced;
use crate::upstream::body::Inbound;
use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, TRANSFER_ENCODING};
use http::request::Parts;
use http::{HeaderValue, Method, Response, StatusCode};
use http_body_util::{Either, Full};
use serde::Deserialize;
use serde_json::Value;

use super::fanout::{for_merging, json_response, LegFailure};
use super::{read_whole, scheme_or_default, Kind, Route, RouteError};
use crate::extract::graphql::plan::{arg_paths, ParseLimits, SplitNodes};
use crate::extract::graphql::{ColdParse, GraphqlError, GraphqlRoute};
use crate::extract::{Access, RouteKind};
use crate::fanout::budget::Refusal;
use crate::fanout::leg::LegError;
use crate::fanout::nodes::{self, Part};
use crate::metrics;
use crate::problem::{LimitedBody, Problem};
use crate::proxy::Proxy;
use crate::table::{Decision, RegionId, RoutingTable};
use crate::upstream::forward;

/// A `graphql:` route's keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Spec {
    /// The endpoint's path, matched exactly.
    graphql: String,
    /// The scheme of the route's ids (docs/schemes.md); default `iuid`.
    #[serde(default)]
    scheme: Option<String>,
    /// Variables that hold ids in persisted queries sent by hash only (default `id`, `ids`,
    /// `nodeId`).
    #[serde(default)]
    persisted_id_variables: Option<Vec<String>>,
    /// Whether a `nodes(ids: $var)` over several regions is split by region (docs/fanout.md).
    #[serde(default)]
    split_nodes: Option<bool>,
    /// The argument paths of root fields that hold ids (default `[id, input.id]`; `[]`: only
    /// a query's `node` and `nodes`).
    #[serde(default)]
    id_arguments: Option<Vec<String>>,
    /// How an integer id in `variables` is read: `safe` (the default: up to 2^53, beyond is
    /// 400 `ambiguous-graphql`) or `exact` (the route's servers read 64-bit integers exactly).
    #[serde(default)]
    json_numbers: Option<String>,
}

impl Kind for Spec {
    fn scheme(&self) -> Option<&str> {
        self.scheme.as_deref()
    }

    fn compile(self, routes: &mut Vec<Route>, limits: ParseLimits) -> Result<(), RouteError> {
        let scheme = scheme_or_default(self.scheme)?;
        if !self.graphql.starts_with('/') {
            return Err(RouteError::new(
                "graphql",
                format!("graphql path `{}` must start with /", self.graphql),
            ));
        }
        crate::extract::normalize::check_template(&self.graphql)
            .map_err(|e| RouteError::new("graphql", e))?;
        let vars = self.persisted_id_variables.unwrap_or_default();
        let numbers = crate::extract::json::Numbers::from_key(self.json_numbers.as_deref())
            .map_err(|e| RouteError::new("json_numbers", e))?;
        let mut route = GraphqlRoute::new(self.graphql, vars, scheme, limits)
            .with_split_nodes(self.split_nodes.unwrap_or(false))
            .with_numbers(numbers);
        if let Some(paths) = self.id_arguments {
            let paths = arg_paths(&paths).map_err(|e| RouteError::new("id_arguments", e))?;
            route = route.with_id_arguments(paths);
        }
        routes.push(Route::Graphql(Arc::new(route)));
        Ok(())
    }
}

/// Bodies larger than this are searched for ids on the blocking pool.
pub const BLOCKING_ABOVE: usize = 64 << 10;

/// The ids of a GraphQL request, whether it writes, and the body to forward. `GET` requests
/// keep their body streaming; `POST` bodies are read up to `limit` bytes (413 beyond), each
/// wait for more at most `idle` (408 beyond).
pub(super) async fn read_ids(
    route: &Arc<GraphqlRoute>,
    parts: &Parts,
    body: Inbound,
    limit: usize,
    idle: Duration,
) -> Result<(Found, Either<Inbound, Bytes>), Problem> {
    if parts.method == Method::GET {
        let query = parts.uri.query().unwrap_or("");
        let found = ids_in(route, Read::Query(query)).await?;
        return Ok((found, Either::Left(body)));
    }
    if parts.method != Method::POST {
        // OPTIONS (CORS preflight) and the like carry no ids.
        let access = Access::of_method(parts.method.as_str().as_bytes());
        return Ok(((Vec::new(), access), Either::Left(body)));
    }
    let bytes = read_whole(parts, body, limit, idle, LimitedBody::GraphqlBody).await?;
    let content_type = parts.headers.get(CONTENT_TYPE).map(|v| v.as_bytes());
    let url_query = parts.uri.query().unwrap_or("");
    let found = ids_in(route, Read::Body(content_type, &bytes, url_query)).await?;
    Ok((found, Either::Right(bytes)))
}

/// The id texts of a GraphQL request and whether it writes (a mutation).
pub(in crate::proxy) type Found = (Vec<Vec<u8>>, Access);

/// Where a GraphQL request's ids are read from: a `GET`'s query string, or a `POST`'s body
/// (read whole) with its `Content-Type` and its URL's query string (whose GraphQL
/// parameters, if any, must agree with the body: `GraphqlRoute::url_agrees`).
#[derive(Clone, Copy)]
pub(in crate::proxy) enum Read<'a> {
    Query(&'a str),
    Body(Option<&'a [u8]>, &'a [u8], &'a str),
}

/// The ids of a GraphQL request and whether it writes, for both engines: on the worker when
/// the plan cache has the document or it is small, else (a cold parse of more than 4 KiB, or
/// a body over [`BLOCKING_ABOVE`]) on the blocking pool, from a copy. Errors: 400
/// `graphql-invalid`.
pub(in crate::proxy) async fn ids_in(
    route: &Arc<GraphqlRoute>,
    read: Read<'_>,
) -> Result<Found, Problem> {
    let mut ids = Vec::new();
    let inline = match read {
        Read::Query(query) => route.ids_from_query(query, ColdParse::SmallOnly, &mut ids),
        Read::Body(ct, body, url) if body.len() <= BLOCKING_ABOVE => route
            .url_agrees(url, ct, body)
            .and_then(|()| route.ids_from_body(ct, body, ColdParse::SmallOnly, &mut ids)),
        Read::Body(..) => Err(GraphqlError::ParseElsewhere),
    };
    match (inline, read) {
        (Err(GraphqlError::ParseElsewhere), Read::Query(query)) => {
            let (route, query) = (route.clone(), query.to_owned());
            off_worker(move |ids| route.ids_from_query(&query, ColdParse::Here, ids)).await
        }
        (Err(GraphqlError::ParseElsewhere), Read::Body(ct, body, url)) => {
            let (route, ct, body) = (route.clone(), ct.map(<[u8]>::to_vec), body.to_vec());
            let url = url.to_owned();
            off_worker(move |ids| {
                route.url_agrees(&url, ct.as_deref(), &body)?;
                route.ids_from_body(ct.as_deref(), &body, ColdParse::Here, ids)
            })
            .await
        }
        (done, _) => done.map(|access| (ids, access)).map_err(problem),
    }
}

/// Runs an extraction on the blocking pool.
async fn off_worker<F>(extract: F) -> Result<Found, Problem>
where
    F: FnOnce(&mut Vec<Vec<u8>>) -> Result<Access, GraphqlError> + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let mut ids = Vec::new();
        extract(&mut ids).map(|access| (ids, access))
    })
    .await
    .map_err(|e| Problem::GraphqlInvalid(format!("the GraphQL request failed: {e}")))?
    .map_err(problem)
}

fn problem(e: GraphqlError) -> Problem {
    match e {
        GraphqlError::ParseElsewhere => Problem::GraphqlInvalid(e.to_string()),
        GraphqlError::Invalid(m) => Problem::GraphqlInvalid(m),
        GraphqlError::Ambiguous(m) => Problem::AmbiguousGraphql(m),
    }
}

impl Proxy {
    /// Splits `body` (one JSON operation whose `variables.<split.variable>` lists the ids) by
    /// region, asks each region for its ids, and merges the answers. `parts` has had the header
    /// rules of docs/data-path.md applied.
    pub(in crate::proxy) async fn split_nodes(
        &self,
        scheme: &str,
        split: &SplitNodes,
        parts: Parts,
        body: Bytes,
        regions_seen: &mut Option<String>,
        trace: Option<&Traced>,
    ) -> Result<Response<Full<Bytes>>, Problem> {
        let routing = self.regions.current();
        let op: Value = serde_json::from_slice(&body)
            .map_err(|e| Problem::GraphqlInvalid(format!("invalid JSON body: {e}")))?;
        let list = op
            .pointer(&format!("/variables/{}", split.variable))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // Regions in order of their first id, each with the positions and ids it gets.
        let mut groups: Vec<(RegionId, Vec<usize>, Vec<Value>)> = Vec::new();
        for (at, id) in list.iter().enumerate() {
            let text = match id {
                Value::String(s) => s.trim().to_owned(),
                Value::Number(n) => n.to_string(),
                _ => continue,
            };
            let (_, decision) = routing
                .table
                .resolve_text(scheme, text.as_bytes())
                .map_err(|e| Problem::unresolved(e, Some(RouteKind::Graphql), text.as_bytes()))?;
            match groups.iter_mut().find(|(r, ..)| *r == decision.region) {
                Some((_, positions, ids)) => {
                    positions.push(at);
                    ids.push(id.clone());
                }
                None => groups.push((decision.region, vec![at], vec![id.clone()])),
            }
        }
        let names: Vec<&str> = groups
            .iter()
            .map(|(r, ..)| routing.region(*r).name.as_str())
            .collect();
        *regions_seen = Some(names.join(","));
        let timeout = self.config.timeouts.response_headers();
        let routing = &routing;
        let legs = groups.into_iter().map(|(region_id, positions, ids)| {
            let region = routing.region(region_id);
            let mut head = forward::copy_head(&parts);
            let body = nodes::region_body(&body, &split.variable, ids);
            async move {
                let started = Instant::now();
                let body = match body {
                    Ok(b) => Bytes::from(b),
                    Err(e) => {
                        return Part {
                            region: region.name.clone(),
                            positions,
                            answer: Err(e),
                            served_by: None,
                        }
                    }
                };
                head.headers.remove(TRANSFER_ENCODING);
                for_merging(&mut head.headers);
                head.headers
                    .insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
                let mut served_by = None;
                let judged = self
                    .ask(
                        (routing, region),
                        head,
                        (body, Some(Access::Read)),
                        timeout,
                        trace,
                    )
                    .await
                    .and_then(|leg| {
                        served_by = leg.served_by.clone();
                        serde_json::from_slice::<Value>(&leg.body).map_err(|e| {
                            LegFailure::new(
                                LegError::NotJson,
                                format!("the answer is not JSON: {e}"),
                            )
                        })
                    });
                let outcome = judged.as_ref().map_or_else(|f| f.error.as_str(), |_| "ok");
                let answer = judged.map_err(|f| format!("{}: {}", f.error, f.detail));
                metrics::fanout_leg(
                    &region.state.metrics.label,
                    outcome,
                    started.elapsed().as_secs_f64(),
                );
                Part {
                    region: region.name.clone(),
                    positions,
                    answer,
                    served_by,
                }
            }
        });
        let parts = futures_util::future::join_all(legs).await;
        let full = |p: &Part| {
            p.answer
                .as_ref()
                .is_err_and(|e| e.starts_with(LegError::BufferFull.as_str()))
        };
        if parts.iter().any(full) {
            metrics::fanout_refused(Refusal::Memory.as_str());
            return Err(Problem::FanoutBusy(Refusal::Memory));
        }
        let failed = parts.iter().filter(|p| p.answer.is_err()).count();
        let result = match failed {
            0 => metrics::FanoutResult::Complete,
            n if n == parts.len() => metrics::FanoutResult::Failed,
            _ => metrics::FanoutResult::Partial,
        };
        metrics::fanout_request(metrics::FanoutKind::SplitNodes, result);
        let merged = nodes::merge(list.len(), &split.response_key, parts);
        let bytes = serde_json::to_vec(&merged).unwrap_or_default();
        Ok(json_response(StatusCode::OK, bytes))
    }
}

/// The one region that owns every id of a GraphQL request; ids in several regions cannot be
/// served by one upstream (docs/data-path.md: 400 naming the regions).
pub(in crate::proxy) fn resolve_all(
    table: &RoutingTable,
    scheme: &str,
    texts: &[Vec<u8>],
) -> Result<Decision, Problem> {
    let mut resolved = Vec::with_capacity(texts.len());
    for text in texts {
        let found = table
            .resolve_text(scheme, text)
            .map_err(|e| Problem::unresolved(e, Some(RouteKind::Graphql), text))?;
        resolved.push(found);
    }
    let mut first = resolved[0].1;
    if resolved.len() == 1 {
        // One id: an owner a region names for it is learned (docs/failover.md).
        first.id = resolved[0].0.fingerprint();
    }
    if resolved.iter().all(|(_, d)| d.region == first.region) {
        // One id of a moving group makes the request the group's (docs/moves.md: a
        // mutation of it is held in `fence`).
        let moved = resolved
            .iter()
            .find(|(_, d)| matches!(d.rule, crate::table::Rule::Move { .. }));
        return Ok(moved.map_or(first, |(_, d)| *d));
    }
    let placed = resolved
        .iter()
        .map(|(key, d)| (key.to_string(), table.region(d.region).name.clone()))
        .collect();
    Err(Problem::RegionConflict { ids: placed })
}
