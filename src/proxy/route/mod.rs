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
mod json;
mod keys;
mod path;
mod query;

use std::borrow::Cow;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::request::Parts;
use http::{HeaderName, HeaderValue};
use http_body_util::{BodyExt, Either, LengthLimitError, Limited};
use serde::de::DeserializeOwned;

use super::{ClientBody, Proxy};
use crate::config::{RouteEntries, RouterConfig, SchemeUse, SchemeUses};
use crate::extract::fanout::FanoutRoute;
use crate::extract::graphql::plan::ParseLimits;
use crate::extract::graphql::GraphqlRoute;
use crate::extract::{Access, RouteKind};
use crate::problem::{LimitedBody, Problem};
use crate::scheme::IUID;
use crate::source::{Seg, Source, SourceError, SourceErrors};
use crate::upstream::body::{IdleTimeout, Inbound, Prefixed};

pub(super) use graphql::resolve_all;
pub use grpc::GrpcRoute;
pub use json::{is_json, JsonRoute};

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
    /// A `query:` parameter on a path.
    Query(query::QueryRoute),
    /// A `json:` pointer into the body on a path.
    Json(json::JsonRoute),
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
        RouteKind::Query => keys::fields_of::<query::Spec>(),
        RouteKind::Json => keys::fields_of::<json::Spec>(),
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
        RouteKind::Query => add::<query::Spec>(source, at, routes, limits),
        RouteKind::Json => add::<json::Spec>(source, at, routes, limits),
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
    /// string, whether it writes (a mutation), and the route (its scheme, whether it splits
    /// `nodes`).
    Ids(Vec<Vec<u8>>, Access, &'r Arc<GraphqlRoute>),
    /// A route whose ids are in the body (GraphQL, gRPC): its phase reads them
    /// (`Proxy::extract`).
    Pending(Pending<'r>),
    /// A list endpoint asked of every region.
    Fanout(&'r Arc<FanoutRoute>),
    /// A route matched but its id cannot be read (a `query:` parameter repeated with
    /// different values): 400 `invalid-parameter`, with this message.
    Invalid(String, RouteKind),
    /// No route matched: the `unrouted` policy applies.
    NoId,
}

impl Extraction<'_, '_> {
    /// The kind of route that matched (`None` when none did).
    pub fn route_kind(&self) -> Option<RouteKind> {
        match self {
            Extraction::Id(_, kind) | Extraction::Invalid(_, kind) => Some(*kind),
            Extraction::Ids(..) => Some(RouteKind::Graphql),
            Extraction::Pending(pending) => Some(pending.0.kind()),
            Extraction::Fanout(_) => Some(RouteKind::Fanout),
            Extraction::NoId => None,
        }
    }
}

/// A matched route whose ids are not in the request's head, and its place in `routes:` (a
/// `json:` route that finds nothing in the body hands on to the routes after it).
#[derive(Debug, Clone, Copy)]
pub struct Pending<'r>(&'r Route, usize);

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

    /// The `json:` route, when the pending route is one (the own engine reads its body too).
    pub fn json(&self) -> Option<&'r JsonRoute> {
        match self.0 {
            Route::Json(route) => Some(route),
            _ => None,
        }
    }

    /// Its place in `routes:`: [`Routes::after_body`] tries the routes after it.
    pub fn index(&self) -> usize {
        self.1
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
            Route::Query(_) => RouteKind::Query,
            Route::Json(_) => RouteKind::Json,
        }
    }
}

/// The path a `query:` or `json:` route applies to: exact, or a `matchit` template with
/// `{name}` and `{*rest}` segments.
#[derive(Debug)]
struct PathMatch(matchit::Router<()>, String);

impl PathMatch {
    /// Errors: the path does not start with `/`, or is not a template `matchit` takes.
    fn new(path: &str) -> Result<PathMatch, RouteError> {
        if !path.starts_with('/') {
            return Err(RouteError::new(
                "path",
                format!("path `{path}` must start with /"),
            ));
        }
        crate::extract::normalize::check_template(path).map_err(|e| RouteError::new("path", e))?;
        let mut router = matchit::Router::new();
        router
            .insert(path, ())
            .map_err(|e| RouteError::new("path", format!("path `{path}`: {e}")))?;
        Ok(PathMatch(router, path.to_owned()))
    }

    fn matches(&self, path: &str) -> bool {
        self.0.at(path).is_ok()
    }

    /// The path or template as written.
    fn template(&self) -> &str {
        &self.1
    }
}

/// A body the route must read whole to find its ids (GraphQL, JSON), read up to `limit`
/// bytes, each wait at most `idle`.
///
/// Errors: 413 `payload-too-large` naming `what` when `Content-Length` or the bytes read pass
/// `limit` (at once, before reading, when the declared length does); 408 when a wait passes
/// `idle`; the client's framing errors. A client that declares a length and stops sending
/// is the client's fault, not a request to hold forever.
async fn read_whole(
    parts: &Parts,
    body: Inbound,
    limit: usize,
    idle: Duration,
    what: LimitedBody,
) -> Result<Bytes, Problem> {
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(Problem::PayloadTooLarge { what, limit });
    }
    match Limited::new(IdleTimeout::new(body, idle), limit)
        .collect()
        .await
    {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(Problem::PayloadTooLarge { what, limit }),
        Err(e) => Err(super::client_body_problem(&*e)),
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
        let query = parts.uri.query().unwrap_or("");
        self.extract_head(parts.uri.path(), query, |name| {
            headers.get(name).map(HeaderValue::as_bytes)
        })
    }

    /// The route template of the first route of `kind` that matches `path`, as a trace's
    /// `http.route` names it (docs/traces.md): a `path:` template, a `query:` or `json:`
    /// route's path, a `graphql:`, `fanout:` or `grpc:` endpoint; `None` for a `header:`
    /// route, which has no path. Asked only for a sampled request, as it matches again.
    pub fn template(&self, kind: RouteKind, path: &str) -> Option<&str> {
        let normal = crate::extract::normalize::normalize(path).ok()?;
        let path = crate::extract::normalize::trim_trailing(&normal);
        self.routes.iter().find_map(|route| match (route, kind) {
            (Route::Path(paths), RouteKind::Path) => paths.template(path),
            (Route::Query(q), RouteKind::Query) => q.template(path),
            (Route::Json(j), RouteKind::Json) => j.template(path),
            (Route::Graphql(g), RouteKind::Graphql) => (g.path == path).then_some(g.path.as_str()),
            (Route::Fanout(f), RouteKind::Fanout) => (f.path == path).then_some(f.path.as_str()),
            (Route::Grpc(g), RouteKind::Grpc) => (g.path == path).then_some(g.path.as_str()),
            _ => None,
        })
    }

    /// [`Routes::extract`] for a head the own HTTP/1.1 engine parsed: its path, its query
    /// string (after `?`, `""` when none), and the first value of a field by name.
    pub fn extract_head<'q>(
        &self,
        path: &'q str,
        query: &'q str,
        header: impl Fn(&HeaderName) -> Option<&'q [u8]>,
    ) -> Extraction<'_, 'q> {
        self.extract_from(0, path, query, header)
    }

    /// After a `json:` route (at `pending`) found no id in a request's body (`body`, when it
    /// was read whole; `content_type` its type): the routes after it, in order, a `json:`
    /// route among them read in the same body. A `graphql:` or `grpc:` route after a
    /// `json:` route on the same path is not tried (its body was read as JSON).
    ///
    /// Errors: 400 `invalid-json` from a later `json:` route.
    pub fn after_body<'q>(
        &self,
        pending: Pending<'_>,
        path: &'q str,
        query: &'q str,
        header: impl Fn(&HeaderName) -> Option<&'q [u8]>,
        content_type: Option<&[u8]>,
        body: Option<&[u8]>,
    ) -> Result<Extraction<'_, 'q>, Problem> {
        let mut from = pending.index() + 1;
        loop {
            match self.extract_from(from, path, query, &header) {
                Extraction::Pending(next) => {
                    if let (Some(route), Some(body)) = (next.json(), body) {
                        if let Some(token) = route.token(content_type, body)? {
                            let token = Token {
                                text: Cow::Owned(token.text.into_owned()),
                                scheme: token.scheme,
                            };
                            return Ok(Extraction::Id(token, RouteKind::Json));
                        }
                    }
                    from = next.index() + 1;
                }
                found => return Ok(found),
            }
        }
    }

    /// The first route at or after `from` that matches.
    fn extract_from<'q>(
        &self,
        from: usize,
        path: &'q str,
        query: &'q str,
        header: impl Fn(&HeaderName) -> Option<&'q [u8]>,
    ) -> Extraction<'_, 'q> {
        for (at, route) in self.routes.iter().enumerate().skip(from) {
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
                    return Extraction::Pending(Pending(route, at))
                }
                Route::Grpc(grpc) if path == grpc.path => {
                    return Extraction::Pending(Pending(route, at))
                }
                Route::Query(params) => match params.token(path, query) {
                    Some(Ok(token)) => return Extraction::Id(token, RouteKind::Query),
                    Some(Err(e)) => return Extraction::Invalid(e, RouteKind::Query),
                    None => {}
                },
                Route::Json(json) if json.matches(path) => {
                    return Extraction::Pending(Pending(route, at))
                }
                Route::Graphql(_) | Route::Fanout(_) | Route::Grpc(_) | Route::Json(_) => {}
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
            Extraction::Pending(pending) => self.read_ids(pending, parts, body).await,
            found => Ok((found, Either::Left(Prefixed::new(body)))),
        }
    }

    /// The phase of a route whose ids are in the body.
    async fn read_ids<'r, 'q>(
        &'r self,
        pending: Pending<'r>,
        parts: &'q Parts,
        body: Inbound,
    ) -> Result<(Extraction<'r, 'q>, ClientBody), Problem> {
        match pending.0 {
            Route::Graphql(route) => {
                let limit = self.config.limits.graphql_body_bytes;
                let idle = self.config.timeouts.idle();
                let ((ids, access), body) =
                    graphql::read_ids(route, parts, body, limit, idle).await?;
                let body = match body {
                    Either::Left(streaming) => Either::Left(Prefixed::new(streaming)),
                    Either::Right(bytes) => Either::Right(bytes),
                };
                Ok((Extraction::Ids(ids, access, route), body))
            }
            Route::Grpc(route) => {
                let limit = self.config.limits.grpc_message_bytes;
                grpc::read_id(route, body, limit, self.config.timeouts.idle()).await
            }
            Route::Json(route) => {
                let limit = self.config.limits.json_body_bytes;
                let idle = self.config.timeouts.idle();
                let (token, body) = route.read_id(parts, body, limit, idle).await?;
                let found = match (token, &body) {
                    (Some(token), _) => Extraction::Id(token, RouteKind::Json),
                    (None, read) => {
                        let headers = &parts.headers;
                        self.routes.after_body(
                            pending,
                            parts.uri.path(),
                            parts.uri.query().unwrap_or(""),
                            |name| headers.get(name).map(HeaderValue::as_bytes),
                            headers.get(CONTENT_TYPE).map(HeaderValue::as_bytes),
                            match read {
                                Either::Right(bytes) => Some(bytes),
                                Either::Left(_) => None,
                            },
                        )?
                    }
                };
                let body = match body {
                    Either::Left(streaming) => Either::Left(Prefixed::new(streaming)),
                    Either::Right(bytes) => Either::Right(bytes),
                };
                Ok((found, body))
            }
            // `Routes::extract` leaves no other kind pending: their ids are in the head.
            Route::Path(_) | Route::Header(_) | Route::Fanout(_) | Route::Query(_) => {
                Ok((Extraction::NoId, Either::Left(Prefixed::new(body))))
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests;
