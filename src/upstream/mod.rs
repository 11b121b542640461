//! Talking to upstreams: one pooled HTTP/1.1 client shared by all regions.
//!
//! `hyper-util`'s pooled client keys idle connections by scheme and authority, so each upstream
//! has its own pool, and a routing-table reload keeps the warm connections of upstreams that
//! stay. Balancing is round-robin over a region's upstreams ([`crate::table::Region`]).

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::Timeouts;

/// A request body on its way upstream: the client's, streamed, or one the router buffered
/// (a GraphQL body it had to read to find the ids), sent as it was received.
pub type UpstreamBody = Either<Incoming, Full<Bytes>>;

/// How forwarding a request failed.
#[derive(Debug)]
pub enum ForwardError {
    /// The upstream refused the connection, reset it, or sent a bad response (→ 502).
    Failed {
        /// `connect` (refused, unreachable, connect timeout) or `reset` (anything after).
        kind: &'static str,
        /// What happened, for the client.
        detail: String,
    },
    /// No response headers within `timeouts.response_headers_ms` (→ 504).
    TimedOut,
}

/// The pooled upstream client.
#[derive(Clone, Debug)]
pub struct UpstreamClient {
    client: Client<HttpConnector, UpstreamBody>,
    response_headers: Duration,
}

impl UpstreamClient {
    /// A client with the config's connect and idle timeouts; `TCP_NODELAY` on, because a
    /// proxy writes whole messages and Nagle would only add latency.
    pub fn new(timeouts: &Timeouts) -> UpstreamClient {
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(timeouts.connect()));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(timeouts.idle())
            .pool_timer(TokioTimer::new())
            .build(connector);
        UpstreamClient {
            client,
            response_headers: timeouts.response_headers(),
        }
    }

    /// Sends a request whose URI is already absolute (`http://upstream/path?query`) and waits
    /// for the response headers; the body streams afterwards.
    pub async fn send(
        &self,
        mut req: Request<UpstreamBody>,
    ) -> Result<Response<Incoming>, ForwardError> {
        // Upstreams speak HTTP/1.1 whatever the client spoke.
        *req.version_mut() = Version::HTTP_11;
        match tokio::time::timeout(self.response_headers, self.client.request(req)).await {
            Err(_) => Err(ForwardError::TimedOut),
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) => Err(ForwardError::Failed {
                kind: if e.is_connect() { "connect" } else { "reset" },
                detail: describe(&e),
            }),
        }
    }
}

/// A one-line reason: the client error and its innermost cause (e.g. "connection refused").
fn describe(e: &hyper_util::client::legacy::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    if e.is_connect() {
        format!("connect failed: {cause}")
    } else {
        format!("{cause}")
    }
}
