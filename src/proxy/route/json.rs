//! `json:` routes (docs/config.md): on a matching path, the id is the string at a JSON
//! pointer (RFC 6901) in the request's JSON body, e.g. `{ path: /v1/payments, json:
//! /order_id }` reads `POST /v1/payments` with `{"order_id": "<id>", …}` (a write whose owning
//! entity is named in its body).
//!
//! Phase 2 reads the body whole, bounded by `limits.json_body_bytes` (413 beyond), each wait
//! by `idle_ms` (408), finds the id with `crate::extract::json::id_at` (one pass, nothing
//! built), and forwards the body unchanged, held as a GraphQL body is. A body that is not
//! JSON is 400 `invalid-json`; one the upstream could read otherwise (a member on the
//! pointer's path given twice, an integer id beyond 2^53 unless `json_numbers: exact`) is 400
//! `ambiguous-json` (docs/data-path.md, "JSON bodies"). A request with no body, a `Content-Type` that is not JSON, or
//! a body where the pointer names nothing (or `null`) is not this route's: the routes after
//! it are tried (`Routes::after`), then the `unrouted` policy.

use std::borrow::Cow;
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::request::Parts;
use http_body::Body as _;
use http_body_util::Either;
use serde::Deserialize;

use super::{read_whole, scheme_or_default, Kind, PathMatch, Route, RouteError, Token};
use crate::extract::graphql::plan::ParseLimits;
use crate::extract::json::{id_at, JsonError, Numbers, Pointer};
use crate::problem::{LimitedBody, Problem};
use crate::upstream::body::Inbound;

/// A `json:` route's keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Spec {
    /// The JSON pointer to the id, e.g. `/order_id`.
    json: String,
    /// The path the route applies to: exact, or a template with `{name}` and `{*rest}`
    /// segments (no `{id}` needed).
    path: String,
    /// The scheme of the route's ids (docs/schemes.md); default `iuid`.
    #[serde(default)]
    scheme: Option<String>,
    /// How an integer id is read: `safe` (the default: up to 2^53, beyond is 400
    /// `ambiguous-json`) or `exact` (any 64-bit integer; the upstreams read them exactly).
    #[serde(default)]
    json_numbers: Option<String>,
}

impl Kind for Spec {
    fn scheme(&self) -> Option<&str> {
        self.scheme.as_deref()
    }

    fn compile(self, routes: &mut Vec<Route>, _: ParseLimits) -> Result<(), RouteError> {
        let pointer = Pointer::parse(&self.json).map_err(|e| RouteError::new("json", e))?;
        let numbers = Numbers::from_key(self.json_numbers.as_deref())
            .map_err(|e| RouteError::new("json_numbers", e))?;
        routes.push(Route::Json(JsonRoute {
            path: PathMatch::new(&self.path)?,
            pointer,
            numbers,
            scheme: scheme_or_default(self.scheme)?,
        }));
        Ok(())
    }
}

/// A compiled `json:` route.
#[derive(Debug)]
pub struct JsonRoute {
    path: PathMatch,
    pointer: Pointer,
    numbers: Numbers,
    scheme: String,
}

impl JsonRoute {
    /// The route's path as written, when it matches `path` (a span's `http.route`).
    pub(super) fn template(&self, path: &str) -> Option<&str> {
        self.path.matches(path).then(|| self.path.template())
    }

    /// Whether the route applies to `path` (its body is read next).
    pub(super) fn matches(&self, path: &str) -> bool {
        self.path.matches(path)
    }

    /// The id's token in a body read whole; `None`: the route does not apply (no body, not
    /// JSON by its `Content-Type`, nothing at the pointer).
    ///
    /// Errors: 400 `invalid-json` (the body is not JSON, or the value there is no id), 400
    /// `ambiguous-json` (a member on the pointer's path given twice, an integer id beyond
    /// 2^53 when the route reads safe numbers).
    pub fn token<'b>(
        &self,
        content_type: Option<&[u8]>,
        body: &'b [u8],
    ) -> Result<Option<Token<'_, 'b>>, Problem> {
        if body.is_empty() || !content_type.is_none_or(is_json) {
            return Ok(None);
        }
        match id_at(body, &self.pointer, self.numbers) {
            Ok(found) => Ok(found.map(|text| Token {
                text,
                scheme: &self.scheme,
            })),
            Err(e @ (JsonError::NotJson(_) | JsonError::NotAnId(_))) => {
                Err(Problem::InvalidJson(e.to_string()))
            }
            Err(JsonError::Ambiguous(m)) => Err(Problem::AmbiguousJson(m)),
        }
    }

    /// Phase 2 on `http` parts: the body read whole (unless no JSON body can be there) and
    /// the id found in it; the body comes back to be forwarded unchanged.
    ///
    /// Errors: 413 over `limit`, 408 when a wait passes `idle`, 400 `invalid-json`.
    pub(super) async fn read_id(
        &self,
        parts: &Parts,
        body: Inbound,
        limit: usize,
        idle: Duration,
    ) -> Result<(Option<Token<'_, 'static>>, Either<Inbound, Bytes>), Problem> {
        let content_type = parts.headers.get(CONTENT_TYPE).map(|v| v.as_bytes());
        if body.is_end_stream() || !content_type.is_none_or(is_json) {
            return Ok((None, Either::Left(body)));
        }
        let bytes = read_whole(parts, body, limit, idle, LimitedBody::JsonBody).await?;
        let token = self.token(content_type, &bytes)?.map(|t| Token {
            text: Cow::Owned(t.text.into_owned()),
            scheme: t.scheme,
        });
        Ok((token, Either::Right(bytes)))
    }
}

/// Whether a `Content-Type` is JSON: `application/json`, or any `+json` type
/// (`application/merge-patch+json`), parameters allowed (RFC 6839 §3.1).
pub fn is_json(content_type: &[u8]) -> bool {
    let essence = content_type
        .split(|&b| b == b';')
        .next()
        .unwrap_or(content_type)
        .trim_ascii();
    essence.eq_ignore_ascii_case(b"application/json")
        || essence.len() > 5 && essence[essence.len() - 5..].eq_ignore_ascii_case(b"+json")
}
