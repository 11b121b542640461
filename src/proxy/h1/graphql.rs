//! Phase 2 of a `graphql:` route on the own engine (docs/data-path.md): a `POST`'s body is
//! read whole into the connection's buffer (bounded by `limits.graphql_body_bytes`, each
//! wait by `idle_ms`), its ids found by the same reader the shared phases use
//! (`route::graphql::ids_in`), and the request forwarded with that body held, as a REST
//! request's small body is. A `GET` reads its query string. What the head path does not
//! carry, a chunked body and a `nodes` split over several regions, goes through the shared
//! phases with the bytes read so far (the body still pending, read there).

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use super::{Planned, Stop};
use crate::extract::graphql::GraphqlRoute;
use crate::extract::RouteKind;
use crate::http1::head::{self, RequestHead};
use crate::http1::Framing;
use crate::problem::{LimitedBody, Problem};
use crate::proxy::route::graphql::{ids_in, Read};
use crate::proxy::route::Extraction;
use crate::proxy::Proxy;
use crate::relay::Buffered;

impl Proxy {
    /// The region of a GraphQL request whose head `head` starts `client.pending()`. A
    /// refusal after the body was read says `close` (the caller drops a small body and
    /// keeps the connection).
    pub(super) async fn h1_graphql<S>(
        &self,
        client: &mut Buffered<S>,
        head: &RequestHead,
        route: &Arc<GraphqlRoute>,
        framing: Framing,
        expect: &mut bool,
        span: &tracing::Span,
    ) -> Result<Planned, Stop<'static>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let method = head.method.of(client.pending());
        let (get, post) = (method == b"GET", method == b"POST");
        let length = match framing {
            Framing::Empty => 0,
            Framing::Length(n) => n,
            // A chunked GraphQL body: the shared phases read it.
            Framing::Chunked | Framing::Close => return Err(Stop::Shared),
        };
        let limit = self.config.limits.graphql_body_bytes;
        if post && length > limit as u64 {
            return Err(Stop::Refuse(
                Problem::PayloadTooLarge {
                    what: LimitedBody::GraphqlBody,
                    limit,
                },
                true,
            ));
        }
        let total = head.len + length as usize;
        if post && length > 0 {
            let idle = self.config.timeouts.idle();
            if !super::exchange::send_continue(client, expect, idle).await {
                let error = crate::error::Error::new(
                    crate::error::ErrorKind::Aborted,
                    "the client closed its connection before sending its body",
                );
                return Err(Stop::Refuse(Problem::Client(error), true));
            }
            if let Err(error) = super::exchange::read_body(client, total, idle).await {
                return Err(Stop::Refuse(Problem::Client(error), true));
            }
        }
        let buf = client.pending();
        let read = if get {
            let target = head.target.of(buf);
            let query = match target.iter().position(|&b| b == b'?') {
                Some(q) => &target[q + 1..],
                None => &[][..],
            };
            // The codec refused a target with bytes outside US-ASCII.
            Read::Query(std::str::from_utf8(query).map_err(|_| Problem::BadTarget)?)
        } else {
            let content_type = head::all(buf, &head.fields, b"content-type").next();
            Read::Body(content_type, &buf[head.len..total])
        };
        // OPTIONS (CORS preflight) and the like carry no ids: the unrouted policy.
        let ids = match get || post {
            true => ids_in(route, read)
                .await
                .map_err(|p| Stop::Refuse(p, true))?,
            false => Vec::new(),
        };
        let routing = self.regions.current();
        let decision = match self.resolve(&routing.table, Extraction::Ids(ids, route), span) {
            Ok((decision, _)) => decision,
            // Split by region and merged: the shared phases do that.
            Err(Problem::RegionConflict { .. }) if route.split_nodes() && post => {
                return Err(Stop::Shared)
            }
            Err(problem) => return Err(Stop::Refuse(problem, true)),
        };
        self.planned(routing, &decision, Some(RouteKind::Graphql))
    }
}
