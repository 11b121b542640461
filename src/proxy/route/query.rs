//! `query:` routes (docs/config.md): on a matching path, the id is the value of a query
//! parameter, e.g. `{ path: /v1/rides, query: order_id }` reads `GET /v1/rides?order_id=<id>`
//! (a search or a list filtered by the entity that owns it). Read from the head only: the
//! parameter is found with `crate::extract::query::param`, borrowed unless percent-encoded.

use serde::Deserialize;

use super::{scheme_or_default, Kind, PathMatch, Route, RouteError, Token};
use crate::extract::graphql::plan::ParseLimits;
use crate::extract::query::param;

/// A `query:` route's keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Spec {
    /// The query parameter holding the id.
    query: String,
    /// The path the route applies to: exact, or a template with `{name}` and `{*rest}`
    /// segments (no `{id}` needed).
    path: String,
    /// The scheme of the route's ids (docs/schemes.md); default `iuid`.
    #[serde(default)]
    scheme: Option<String>,
}

impl Kind for Spec {
    fn scheme(&self) -> Option<&str> {
        self.scheme.as_deref()
    }

    fn compile(self, routes: &mut Vec<Route>, _: ParseLimits) -> Result<(), RouteError> {
        if self.query.is_empty() {
            return Err(RouteError::new("query", "the parameter name is empty"));
        }
        routes.push(Route::Query(QueryRoute {
            path: PathMatch::new(&self.path)?,
            param: self.query,
            scheme: scheme_or_default(self.scheme)?,
        }));
        Ok(())
    }
}

/// A compiled `query:` route.
#[derive(Debug)]
pub struct QueryRoute {
    path: PathMatch,
    param: String,
    scheme: String,
}

impl QueryRoute {
    /// The route's path as written, when it matches `path` (a span's `http.route`).
    pub(super) fn template(&self, path: &str) -> Option<&str> {
        self.path.matches(path).then(|| self.path.template())
    }

    /// On a matching path, the id's token in `query` (the target after `?`); `None` when the
    /// path does not match or the parameter is absent or empty (the next route applies).
    ///
    /// Errors: the parameter repeated with another value (400 `invalid-parameter`).
    pub(super) fn token<'q>(
        &self,
        path: &str,
        query: &'q str,
    ) -> Option<Result<Token<'_, 'q>, String>> {
        if !self.path.matches(path) {
            return None;
        }
        match param(query, &self.param) {
            Ok(found) => found.map(|text| {
                Ok(Token {
                    text,
                    scheme: &self.scheme,
                })
            }),
            Err(e) => Some(Err(e)),
        }
    }
}
