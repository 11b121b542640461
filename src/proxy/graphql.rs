//! Phase 2 for GraphQL routes: read the body (bounded), find the node ids, and keep the
//! bytes to send upstream unchanged.
//!
//! Small documents are read on the async worker: a cache hit costs a few microseconds and a
//! cold parse of a few KiB well under a millisecond. Bodies over [`BLOCKING_ABOVE`] bytes go
//! to the blocking pool, so that a cold parse of a large document (bounded by the token and
//! depth limits) never holds up other connections on the same worker.

use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::request::Parts;
use http::Method;
use http_body_util::{BodyExt, Either, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use iuid::Id;

use super::problem::Problem;
use crate::extract::graphql::{GraphqlError, GraphqlRoute};
use crate::extract::RouteKind;
use crate::upstream::UpstreamBody;

/// Bodies larger than this are searched for ids on the blocking pool.
pub const BLOCKING_ABOVE: usize = 16 << 10;

/// The ids of a GraphQL request and the body to forward. `GET` requests keep their body
/// streaming; `POST` bodies are read up to `limit` bytes (413 beyond).
pub async fn read_ids(
    route: &Arc<GraphqlRoute>,
    parts: &Parts,
    body: Incoming,
    limit: usize,
) -> Result<(Vec<Id>, UpstreamBody), Problem> {
    let mut ids = Vec::new();
    if parts.method == Method::GET {
        let query = parts.uri.query().unwrap_or("");
        route.ids_from_query(query, &mut ids).map_err(problem)?;
        return Ok((ids, Either::Left(body)));
    }
    if parts.method != Method::POST {
        // OPTIONS (CORS preflight) and the like carry no ids.
        return Ok((ids, Either::Left(body)));
    }
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(Problem::PayloadTooLarge { limit });
    }
    let bytes: Bytes = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => return Err(Problem::PayloadTooLarge { limit }),
        Err(e) => {
            return Err(Problem::GraphqlInvalid(format!(
                "the request body could not be read: {e}"
            )))
        }
    };
    let content_type = parts.headers.get(CONTENT_TYPE).cloned();
    let ct = content_type.as_ref().map(|v| v.as_bytes());
    if bytes.len() <= BLOCKING_ABOVE {
        route.ids_from_body(ct, &bytes, &mut ids).map_err(problem)?;
    } else {
        let (route, body) = (route.clone(), bytes.clone());
        ids = tokio::task::spawn_blocking(move || {
            let mut ids = Vec::new();
            let ct = content_type.as_ref().map(|v| v.as_bytes());
            route.ids_from_body(ct, &body, &mut ids).map(|()| ids)
        })
        .await
        .map_err(|e| Problem::GraphqlInvalid(format!("the GraphQL request failed: {e}")))?
        .map_err(problem)?;
    }
    Ok((ids, Either::Right(Full::new(bytes))))
}

fn problem(e: GraphqlError) -> Problem {
    match e {
        GraphqlError::Invalid(m) => Problem::GraphqlInvalid(m),
        GraphqlError::MalformedId(e) => Problem::MalformedId(e, RouteKind::Graphql),
    }
}
