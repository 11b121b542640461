//! Phase 2 of the routes whose ids are in the body, on the own engine (docs/data-path.md):
//! `graphql:` and `json:`. A body with a `Content-Length` is read whole into the connection's
//! buffer (bounded by the kind's limit, `limits.graphql_body_bytes` or
//! `limits.json_body_bytes`, each wait by `idle_ms`), its ids found by the same readers the
//! shared phases use (`route::graphql::ids_in`, `JsonRoute::token`), and the request
//! forwarded with that body held, as a REST request's small body is. A GraphQL `GET` reads
//! its query string. What the head path does not carry, a chunked body and a `nodes` split
//! over several regions, goes through the shared phases with the bytes read so far (the body
//! still pending, read there).

use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

use super::{Planned, Stop};
use crate::extract::graphql::GraphqlRoute;
use crate::extract::{Access, RouteKind};
use crate::http1::head::{self, RequestHead};
use crate::http1::Framing;
use crate::problem::{LimitedBody, Problem};
use crate::proxy::life::Life;
use crate::proxy::phases::{HeadView, RequestView};
use crate::proxy::route::graphql::{ids_in, Read};
use crate::proxy::route::{is_json, Extraction, Pending};
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
        life: &Life,
    ) -> Result<Planned, Stop<'static>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        if matches!(framing, Framing::Chunked | Framing::Close) {
            // A chunked GraphQL body: the shared phases read it.
            return Err(Stop::Shared);
        }
        let method = head.method.of(client.pending());
        let (get, post) = (method == b"GET", method == b"POST");
        let method_access = Access::of_method(method);
        let limit = self.config.limits.graphql_body_bytes;
        let total = match post {
            true => {
                self.h1_read_whole(
                    client,
                    head,
                    framing,
                    limit,
                    LimitedBody::GraphqlBody,
                    expect,
                )
                .await?
            }
            false => head.len,
        };
        let buf = client.pending();
        let view = HeadView::new(buf, head, self.config.limits.escaped_slashes);
        let read = if get {
            Read::Query(view.query())
        } else {
            let content_type = head::all(buf, &head.fields, b"content-type").next();
            Read::Body(content_type, &buf[head.len..total], view.query())
        };
        // OPTIONS (CORS preflight) and the like carry no ids: the unrouted policy.
        let (ids, access) = match get || post {
            true => ids_in(route, read)
                .await
                .map_err(|p| Stop::Refuse(p, true))?,
            false => (Vec::new(), method_access),
        };
        let routing = self.regions.current();
        let found = Extraction::Ids(ids, access, route);
        let decision = match self.resolve(&routing.table, found, life) {
            Ok((decision, _)) => decision,
            // Split by region and merged: the shared phases do that.
            Err(Problem::RegionConflict { .. }) if route.split_nodes() && post => {
                return Err(Stop::Shared)
            }
            Err(problem) => return Err(Stop::Refuse(problem, true)),
        };
        let told = super::super::phases::Told {
            said: Some(access),
            sampled: None,
            trusted_peer: life.trusted_peer,
        };
        self.planned(routing, &decision, &view, Some(RouteKind::Graphql), told)
    }

    /// The region of a request a `json:` route matched (`pending`): its body read whole when
    /// it is JSON, the id at the route's pointer, else the routes after it
    /// (`Routes::after_body`). Refusals as [`Proxy::h1_graphql`]'s.
    pub(super) async fn h1_json<S>(
        &self,
        client: &mut Buffered<S>,
        head: &RequestHead,
        pending: Pending<'_>,
        framing: Framing,
        expect: &mut bool,
        life: &Life,
    ) -> Result<Planned, Stop<'static>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let Some(route) = pending.json() else {
            return Err(Stop::Shared);
        };
        let content_type = head::all(client.pending(), &head.fields, b"content-type").next();
        let json = framing != Framing::Empty && content_type.is_none_or(is_json);
        let limit = self.config.limits.json_body_bytes;
        let total = match json {
            true => {
                self.h1_read_whole(client, head, framing, limit, LimitedBody::JsonBody, expect)
                    .await?
            }
            false => head.len,
        };
        let buf = client.pending();
        let content_type = head::all(buf, &head.fields, b"content-type").next();
        let body = &buf[head.len..total];
        let refuse = |p| Stop::Refuse(p, true);
        let view = HeadView::new(buf, head, self.config.limits.escaped_slashes);
        let found = match route.token(content_type, body).map_err(refuse)? {
            Some(token) => Extraction::Id(token, RouteKind::Json),
            None => {
                let body = json.then_some(body);
                self.routes
                    .after_body(
                        pending,
                        view.path(),
                        view.query(),
                        |n| view.value(n),
                        content_type,
                        body,
                    )
                    .map_err(refuse)?
            }
        };
        match self.h1_resolve(found, &view, life) {
            Err(Stop::Refuse(p, _)) => Err(Stop::Refuse(p, true)),
            Err(Stop::Mirror) => Err(Stop::Mirror),
            Err(_) => Err(Stop::Shared),
            Ok(planned) => Ok(planned),
        }
    }

    /// Reads a body of `framing` whole into `client`'s buffer, after the head; the end of
    /// the body in the buffer. `100 Continue` is sent first when the client waits for it.
    ///
    /// Errors: a chunked or close-delimited body is the shared phases' (`Stop::Shared`);
    /// over `limit` 413 naming `what`, at once; the client's read errors. After these the
    /// connection closes.
    async fn h1_read_whole<S>(
        &self,
        client: &mut Buffered<S>,
        head: &RequestHead,
        framing: Framing,
        limit: usize,
        what: LimitedBody,
        expect: &mut bool,
    ) -> Result<usize, Stop<'static>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let length = match framing {
            Framing::Empty => 0,
            Framing::Length(n) => n,
            Framing::Chunked | Framing::Close => return Err(Stop::Shared),
        };
        if length > limit as u64 {
            return Err(Stop::Refuse(Problem::PayloadTooLarge { what, limit }, true));
        }
        let total = head.len + length as usize;
        if length > 0 {
            let idle = self.config.timeouts.idle();
            if !super::answer::send_continue(client, expect, idle).await {
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
        Ok(total)
    }
}
