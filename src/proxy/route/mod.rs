//! Route kinds (docs/config.md, `routes[]`): where a request's ids are, and what its route
//! does with them before it is forwarded.
//!
//! One file per kind owns all of it, as mini-redis has one file per command: its keys in the
//! config (a serde struct with `deny_unknown_fields`), their validation, its match on the
//! request head, and its phase (reading a GraphQL body or a gRPC call's first message, asking
//! every region). This file registers the kinds — one arm of `Route` each — and dispatches
//! to them; the pure readers they use (GraphQL plans, the protobuf reader, path-segment
//! decoding, fan-out pages) are `crate::extract`'s.
//!
//! Routes are tried in the order of the config, first match wins. Extraction is
//! scheme-neutral: a route yields the id's raw token and the scheme the route names; the live
//! routing table parses and resolves it. A route that matches but whose token does not parse
//! is an error (400), not a miss: the client meant an id and got it wrong.
//!
//! The config keeps `routes:` as written (`crate::config::RouteEntries`); they are compiled
//! here, at start and by `check`, each entry read by its kind's struct with the entry's
//! position, so errors say `router.yaml:6:12: routes[0].field: …`.

mod fanout;
pub(super) mod graphql;
mod grpc;
mod header;
mod keys;
mod path;

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;

use http::request::Parts;
use http::{HeaderName, HeaderValue};
use http_body_util::Either;
use serde::de::DeserializeOwned;

use super::{ClientBody, Proxy};
use crate::config::{RouteEntries, RouterConfig, SchemeUse, SchemeUses};
use crate::extract::fanout::FanoutRoute;
use crate::extract::graphql::plan::ParseLimits;
use crate::extract::graphql::GraphqlRoute;
use crate::extract::RouteKind;
use crate::problem::Problem;
use crate::scheme::IUID;
use crate::source::{Seg, Source, SourceError, SourceErrors};
use crate::upstream::body::{Inbound, Prefixed};

pub(super) use graphql::resolve_all;
pub use grpc::GrpcRoute;

/// A compiled entry of `routes:`. Each arm registers a kind: its file compiles it
/// ([`Kind::compile`]), and the matches below dispatch to that file.
#[derive(Debug)]
enum Route {
    /// Every `path:` template, in one router at the place of the first.
    Path(path::Paths),
    /// A `header:` route.
    Header(header::HeaderRoute),
    /// A `graphql:` endpoint.
    Graphql(Arc<GraphqlRoute>),
    /// A `fanout:` list endpoint.
    Fanout(Arc<FanoutRoute>),
    /// A `grpc:` method.
    Grpc(Arc<GrpcRoute>),
}

/// What a kind's file provides to compile an entry: its keys (the struct), its ids' scheme,
/// and its compiled form added to the routes.
trait Kind: DeserializeOwned {
    /// Whether the kind's scheme must carry a creation time (fan-out merges by it).
    const NEEDS_TIME: bool = false;
    /// The `scheme:` key as written.
    fn scheme(&self) -> Option<&str>;
    /// Validates the entry and adds it to `routes`.
    fn compile(self, routes: &mut Vec<Route>, limits: ParseLimits) -> Result<(), RouteError>;
}

/// The keys each kind accepts (its struct's fields), for the errors that name them.
fn keys_of(kind: RouteKind) -> &'static [&'static str] {
    match kind {
        RouteKind::Path => keys::fields_of::<path::Spec>(),
        RouteKind::Header => keys::fields_of::<header::Spec>(),
        RouteKind::Graphql => keys::fields_of::<graphql::Spec>(),
        RouteKind::Fanout => keys::fields_of::<fanout::Spec>(),
        RouteKind::Grpc => keys::fields_of::<grpc::Spec>(),
    }
}

/// Reads entry `at` of `routes:` as a `kind` route and compiles it.
fn compile_as(
    kind: RouteKind,
    source: &Source,
    at: &[Seg],
    routes: &mut Vec<Route>,
    limits: ParseLimits,
) -> Result<Option<SchemeUse>, SourceError> {
    match kind {
        RouteKind::Path => add::<path::Spec>(source, at, routes, limits),
        RouteKind::Header => add::<header::Spec>(source, at, routes, limits),
        RouteKind::Graphql => add::<graphql::Spec>(source, at, routes, limits),
        RouteKind::Fanout => add::<fanout::Spec>(source, at, routes, limits),
        RouteKind::Grpc => add::<grpc::Spec>(source, at, routes, limits),
    }
}

/// An id as a route found it, not yet parsed: its text and the name of the scheme to parse
/// it with (the live table knows the scheme).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token<'r, 'q> {
    /// The id's text: borrowed from the request, or decoded (a percent-encoded path segment).
    pub text: Cow<'q, [u8]>,
    /// The route's scheme name.
    pub scheme: &'r str,
}

/// What [`Routes::extract`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Extraction<'r, 'q> {
    /// A route matched and found an id's token.
    Id(Token<'r, 'q>, RouteKind),
    /// The id texts of a GraphQL request (possibly none), read from its body or query
    /// string, and the route (its scheme, whether it splits `nodes`).
    Ids(Vec<Vec<u8>>, &'r Arc<GraphqlRoute>),
    /// A route whose ids are in the body (GraphQL, gRPC): its phase reads them
    /// (`Proxy::extract`).
    Pending(Pending<'r>),
    /// A list endpoint asked of every region.
    Fanout(&'r Arc<FanoutRoute>),
    /// No route matched: the `unrouted` policy applies.
    NoId,
}

impl Extraction<'_, '_> {
    /// The kind of route that matched (`None` when none did).
    pub fn route_kind(&self) -> Option<RouteKind> {
        match self {
            Extraction::Id(_, kind) => Some(*kind),
            Extraction::Ids(..) => Some(RouteKind::Graphql),
            Extraction::Pending(pending) => Some(pending.0.kind()),
            Extraction::Fanout(_) => Some(RouteKind::Fanout),
            Extraction::NoId => None,
        }
    }
}

/// A matched route whose ids are not in the request's head.
#[derive(Debug, Clone, Copy)]
pub struct Pending<'r>(&'r Route);

/// The same route (routes are compared by identity).
impl PartialEq for Pending<'_> {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for Pending<'_> {}

impl<'r> Pending<'r> {
    /// The `graphql:` route, when the pending route is one (the own engine reads its body
    /// itself; other kinds' it hands on).
    pub fn graphql(&self) -> Option<&'r Arc<GraphqlRoute>> {
        match self.0 {
            Route::Graphql(route) => Some(route),
            _ => None,
        }
    }
}

impl Route {
    /// The kind's name.
    fn kind(&self) -> RouteKind {
        match self {
            Route::Path(_) => RouteKind::Path,
            Route::Header(_) => RouteKind::Header,
            Route::Graphql(_) => RouteKind::Graphql,
            Route::Fanout(_) => RouteKind::Fanout,
            Route::Grpc(_) => RouteKind::Grpc,
        }
    }
}

/// The compiled `routes:` list.
#[derive(Debug)]
pub struct Routes {
    routes: Vec<Route>,
    /// How many entries `routes:` has (all path templates are one [`Route`]).
    len: usize,
    scheme_uses: SchemeUses,
}

/// What is wrong with a route: the key it is about (`path`, `scheme`, `limit`, …) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RouteError {
    key: &'static str,
    message: String,
}

impl RouteError {
    fn new(key: &'static str, message: impl Into<String>) -> RouteError {
        RouteError {
            key,
            message: message.into(),
        }
    }
}

/// A route's scheme name: `iuid` when not given. Whether the table defines it is checked
/// against the table (it may reload), by [`SchemeUses`].
fn scheme_or_default(scheme: Option<String>) -> Result<String, RouteError> {
    match scheme {
        None => Ok(IUID.to_owned()),
        Some(s) if s.is_empty() => Err(RouteError::new("scheme", "the scheme name is empty")),
        Some(s) => Ok(s),
    }
}

/// Reads one entry as a `K` and compiles it; its scheme use, if it names a scheme.
fn add<K: Kind>(
    source: &Source,
    at: &[Seg],
    routes: &mut Vec<Route>,
    limits: ParseLimits,
) -> Result<Option<SchemeUse>, SourceError> {
    let spec: K = source.parse_at(at)?;
    let key = |k: &str| [at, &[Seg::Key(k.to_owned())]].concat();
    let uses = spec.scheme().filter(|s| *s != IUID).map(|s| SchemeUse {
        scheme: s.to_owned(),
        needs_time: K::NEEDS_TIME,
        at: source.error_at(&key("scheme"), ""),
    });
    spec.compile(routes, limits)
        .map_err(|e| keys::error_at(source, &key(e.key), e.message))?;
    Ok(uses)
}

impl Routes {
    /// Compiles `routes:` as written; `limits` bound GraphQL parsing, `table` is the routing
    /// table's file (named when a route's scheme is not in it).
    ///
    /// Errors: every bad entry, at its key: not exactly one kind key, a key of another kind
    /// (`order goes with a fanout route`), an unknown key, a bad value.
    pub fn compile(
        entries: &RouteEntries,
        limits: ParseLimits,
        table: &Path,
    ) -> Result<Routes, SourceErrors> {
        let source = &entries.source;
        let mut routes = Vec::new();
        let mut uses = Vec::new();
        let mut errors = Vec::new();
        for i in 0..entries.len {
            let at = [Seg::Key("routes".to_owned()), Seg::Index(i)];
            let added = match keys::kind_of(source, &at, keys_of) {
                Ok(kind) => compile_as(kind, source, &at, &mut routes, limits),
                // Read as the kind its keys imply, an error inside them (a nested unknown
                // key) is reported rather than the missing kind key.
                Err(keys::NoKind {
                    error,
                    implied: Some(kind),
                }) => match compile_as(kind, source, &at, &mut Vec::new(), limits) {
                    Err(inner) if !inner.message.contains("missing field") => Err(inner),
                    _ => Err(error),
                },
                Err(keys::NoKind { error, .. }) => Err(error),
            };
            match added {
                Ok(used) => uses.extend(used),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            return Err(SourceErrors(errors));
        }
        Ok(Routes {
            routes,
            len: entries.len,
            scheme_uses: SchemeUses::new(uses, table.to_path_buf()),
        })
    }

    /// The routes of `config` (see [`Routes::compile`]).
    ///
    /// Errors: as [`Routes::compile`]'s.
    pub fn for_config(config: &RouterConfig) -> Result<Routes, SourceErrors> {
        let limits = config.limits.parse_limits();
        Routes::compile(&config.routes, limits, &config.routing_table)
    }

    /// How many route entries there are.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no route is configured (every request is unrouted).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The schemes the routes name, which the routing table must declare.
    pub fn scheme_uses(&self) -> &SchemeUses {
        &self.scheme_uses
    }

    /// Reads the id's token out of a request's head, or names the route whose phase reads
    /// on. Allocation-free unless a path segment is percent-encoded.
    pub fn extract<'q>(&self, parts: &'q Parts) -> Extraction<'_, 'q> {
        let headers = &parts.headers;
        self.extract_head(parts.uri.path(), |name| {
            headers.get(name).map(HeaderValue::as_bytes)
        })
    }

    /// [`Routes::extract`] for a head the own HTTP/1.1 engine parsed: its path, and the first
    /// value of a field by name.
    pub fn extract_head<'q>(
        &self,
        path: &'q str,
        header: impl Fn(&HeaderName) -> Option<&'q [u8]>,
    ) -> Extraction<'_, 'q> {
        for route in &self.routes {
            match route {
                Route::Path(paths) => {
                    if let Some(token) = paths.token(path) {
                        return Extraction::Id(token, RouteKind::Path);
                    }
                }
                Route::Header(route) => {
                    if let Some(token) = route.token(&header) {
                        return Extraction::Id(token, RouteKind::Header);
                    }
                }
                Route::Fanout(fanout) if path == fanout.path => return Extraction::Fanout(fanout),
                Route::Graphql(graphql) if path == graphql.path => {
                    return Extraction::Pending(Pending(route))
                }
                Route::Grpc(grpc) if path == grpc.path => {
                    return Extraction::Pending(Pending(route))
                }
                Route::Graphql(_) | Route::Fanout(_) | Route::Grpc(_) => {}
            }
        }
        Extraction::NoId
    }
}

impl Proxy {
    /// Phase 2: the id(s) in the request, from its head, or from its body for the kinds
    /// whose ids are there (GraphQL, gRPC).
    pub(super) async fn extract<'q>(
        &self,
        parts: &'q Parts,
        body: Inbound,
    ) -> Result<(Extraction<'_, 'q>, ClientBody), Problem> {
        match self.extract_head(parts) {
            Extraction::Pending(Pending(route)) => self.read_ids(route, parts, body).await,
            found => Ok((found, Either::Left(Prefixed::new(body)))),
        }
    }

    /// The phase of a route whose ids are in the body.
    async fn read_ids<'r, 'q>(
        &'r self,
        route: &'r Route,
        parts: &'q Parts,
        body: Inbound,
    ) -> Result<(Extraction<'r, 'q>, ClientBody), Problem> {
        match route {
            Route::Graphql(route) => {
                let limit = self.config.limits.graphql_body_bytes;
                let idle = self.config.timeouts.idle();
                let (ids, body) = graphql::read_ids(route, parts, body, limit, idle).await?;
                let body = match body {
                    Either::Left(streaming) => Either::Left(Prefixed::new(streaming)),
                    Either::Right(bytes) => Either::Right(bytes),
                };
                Ok((Extraction::Ids(ids, route), body))
            }
            Route::Grpc(route) => {
                let limit = self.config.limits.grpc_message_bytes;
                grpc::read_id(route, body, limit, self.config.timeouts.idle()).await
            }
            // `Routes::extract` leaves no other kind pending: their ids are in the head.
            Route::Path(_) | Route::Header(_) | Route::Fanout(_) => {
                Ok((Extraction::NoId, Either::Left(Prefixed::new(body))))
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::scheme::iuid::IuidKey;
    use iuid::ParseError;

    pub const ID: &str = "017f22e2-79b0-802a-8144-dc0c0c07398f";
    const LIMITS: ParseLimits = ParseLimits {
        tokens: 1000,
        depth: 32,
    };

    /// `routes:` written as YAML (its entries, `- path: …` lines), compiled.
    pub fn compile(entries: &str) -> Result<Routes, SourceErrors> {
        let indented: String = entries.lines().map(|l| format!("  {l}\n")).collect();
        let text = format!("routes:\n{indented}");
        let source = Source {
            path: "router.yaml".into(),
            text,
        };
        let entries = RouteEntries::of(&source).expect("routes");
        Routes::compile(&entries, LIMITS, Path::new("t.yaml"))
    }

    /// Like [`compile`], for valid routes.
    pub fn routes(entries: &str) -> Routes {
        compile(entries).expect("valid routes")
    }

    /// What the route found, parsed as the table would: the id with its route kind, the
    /// parse error with its route kind, or nothing.
    pub fn found(e: Extraction) -> Option<(Result<IuidKey, ParseError>, RouteKind)> {
        match e {
            Extraction::Id(token, kind) => {
                assert_eq!(token.scheme, "iuid");
                Some((crate::scheme::iuid::parse(&token.text), kind))
            }
            _ => None,
        }
    }

    pub fn parts(uri: &str, header: Option<&str>) -> Parts {
        let mut b = http::Request::builder().uri(uri);
        if let Some(h) = header {
            b = b.header("x-entity-id", h);
        }
        b.body(()).expect("request").into_parts().0
    }

    #[test]
    fn path_then_header_first_match_wins() {
        let r = routes(
            "- path: /v1/orders/{id}\n- path: /v1/orders/{id}/{*rest}\n- header: x-entity-id\n",
        );
        assert_eq!(r.len(), 3);
        let want = crate::scheme::iuid::parse(ID.as_bytes()).expect("vector");
        let uri = format!("/v1/orders/{ID}/items?x=1");
        assert_eq!(
            found(r.extract(&parts(&uri, None))),
            Some((Ok(want), RouteKind::Path))
        );
        assert_eq!(
            found(r.extract(&parts("/other", Some(ID)))),
            Some((Ok(want), RouteKind::Header))
        );
        assert_eq!(r.extract(&parts("/other", None)), Extraction::NoId);
        assert!(matches!(
            found(r.extract(&parts("/v1/orders/nope", Some(ID)))),
            Some((Err(_), RouteKind::Path))
        ));
    }

    #[test]
    fn bad_routes_are_reported_at_their_keys() {
        let errors = compile(
            "- path: /x/{key}\n- header: bad header\n- { path: \"/a/{id}\", header: x }\n- { path: \"/b/{id}\", order: asc }\n- { path: \"/c/{id}\", nope: 1 }\n- {}\n- grpc: /a.B/C\n- { path: \"/d/{id}\", scheme: '' }\n- cursor: { nope: 1 }\n- cursor: { param: p }\n",
        )
        .expect_err("invalid")
        .0;
        let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
        let want = [
            "router.yaml:2:11: routes[0].path: path template `/x/{key}` has no {id}",
            "router.yaml:3:13: routes[1].header: `bad header` is not a header name",
            "router.yaml:4:32: routes[2].header: a route has exactly one of path, header, graphql, fanout, grpc",
            "router.yaml:5:31: routes[3].order: order goes with a fanout route",
            "router.yaml:6:24: routes[4].nope: unknown field `nope`, expected one of `path`, `scheme`, `header`, `graphql`, `persisted_id_variables`, `split_nodes`, `fanout`, `items`, `id_field`, `order`, `limit`, `cursor`, `timeout_ms`, `on_region_error`, `grpc`, `field`",
            "router.yaml:7:5: routes[5]: a route has exactly one of path, header, graphql, fanout, grpc",
            "router.yaml:8:11: routes[6].grpc: a grpc route needs `field:`, the field holding the id",
            "router.yaml:9:32: routes[7].scheme: the scheme name is empty",
            "router.yaml:10:15: routes[8].cursor: unknown field `nope`, expected `param`",
            "router.yaml:11:5: routes[9]: a route has exactly one of path, header, graphql, fanout, grpc",
        ];
        assert_eq!(lines, want);
    }
}
