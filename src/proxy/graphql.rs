//! Phase 2 for GraphQL routes: read the body (bounded), find the node ids, and keep the
//! bytes to send upstream unchanged.
//!
//! Requests are read on the async worker when that is cheap: a cache hit costs a few
//! microseconds, cold parses of up to 4 KiB of documents about 100 µs. A request whose
//! cache-missing documents come to more than 4 KiB together (one large document, or a batch of
//! many small distinct ones), and any body over [`BLOCKING_ABOVE`] bytes (whose JSON decoding
//! alone takes milliseconds at 1 MiB), go to the blocking pool, so that a cold parse — bounded
//! by the token and depth limits — never holds up other connections of the same worker.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use http::request::Parts;
use http::Method;
use http_body_util::{BodyExt, Either, LengthLimitError, Limited};
use hyper::body::Incoming;

use crate::extract::graphql::{ColdParse, GraphqlError, GraphqlRoute};
use crate::problem::Problem;
use crate::upstream::body::IdleTimeout;

/// Bodies larger than this are searched for ids on the blocking pool.
pub const BLOCKING_ABOVE: usize = 64 << 10;

/// The ids of a GraphQL request and the body to forward. `GET` requests keep their body
/// streaming; `POST` bodies are read up to `limit` bytes (413 beyond), each wait for more at
/// most `idle` (408 beyond).
pub async fn read_ids(
    route: &Arc<GraphqlRoute>,
    parts: &Parts,
    body: Incoming,
    limit: usize,
    idle: Duration,
) -> Result<(Vec<Vec<u8>>, Either<Incoming, Bytes>), Problem> {
    let mut ids = Vec::new();
    if parts.method == Method::GET {
        let query = parts.uri.query().unwrap_or("");
        match route.ids_from_query(query, ColdParse::SmallOnly, &mut ids) {
            Err(GraphqlError::ParseElsewhere) => {
                let (route, query) = (route.clone(), query.to_owned());
                ids = off_worker(move |ids| route.ids_from_query(&query, ColdParse::Here, ids))
                    .await?;
            }
            done => done.map_err(problem)?,
        }
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
        return Err(Problem::PayloadTooLarge {
            what: crate::problem::LimitedBody::GraphqlBody,
            limit,
        });
    }
    // The idle timer: a client that declares a length and stops sending is the client's
    // fault (408), not a request to hold forever.
    let bytes: Bytes = match Limited::new(IdleTimeout::new(body, idle), limit)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.is::<LengthLimitError>() => {
            return Err(Problem::PayloadTooLarge {
                what: crate::problem::LimitedBody::GraphqlBody,
                limit,
            })
        }
        Err(e) => return Err(super::client_body_problem(&*e)),
    };
    let content_type = parts.headers.get(CONTENT_TYPE).cloned();
    let ct = content_type.as_ref().map(|v| v.as_bytes());
    let inline = if bytes.len() <= BLOCKING_ABOVE {
        route.ids_from_body(ct, &bytes, ColdParse::SmallOnly, &mut ids)
    } else {
        Err(GraphqlError::ParseElsewhere)
    };
    match inline {
        Err(GraphqlError::ParseElsewhere) => {
            let (route, body) = (route.clone(), bytes.clone());
            ids = off_worker(move |ids| {
                let ct = content_type.as_ref().map(|v| v.as_bytes());
                route.ids_from_body(ct, &body, ColdParse::Here, ids)
            })
            .await?;
        }
        done => done.map_err(problem)?,
    }
    Ok((ids, Either::Right(bytes)))
}

/// Runs an extraction on the blocking pool.
async fn off_worker<F>(extract: F) -> Result<Vec<Vec<u8>>, Problem>
where
    F: FnOnce(&mut Vec<Vec<u8>>) -> Result<(), GraphqlError> + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let mut ids = Vec::new();
        extract(&mut ids).map(|()| ids)
    })
    .await
    .map_err(|e| Problem::GraphqlInvalid(format!("the GraphQL request failed: {e}")))?
    .map_err(problem)
}

fn problem(e: GraphqlError) -> Problem {
    match e {
        GraphqlError::ParseElsewhere => Problem::GraphqlInvalid(e.to_string()),
        GraphqlError::Invalid(m) => Problem::GraphqlInvalid(m),
    }
}
