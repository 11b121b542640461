//! A `fanout:` route on the own engine (docs/fanout.md): the request's head is made into
//! the `http` form the fan-out phase reads (`route/fanout.rs`, the same code every engine
//! runs: each region asked with `Proxy::ask`, the pages merged), and the merged page is
//! written back here, so that the client's connection stays on this engine. A `fanout:`
//! request with a body is handed on (a list is asked with `GET`).

use http::{HeaderName, HeaderValue, Method, Request};
use tokio::io::{AsyncRead, AsyncWrite};

use super::Outcome;
use crate::extract::fanout::FanoutRoute;
use crate::http1::head::RequestHead;
use crate::problem::Problem;
use crate::problem::RouterMade;
use crate::proxy::headers::ClientAddr;
use crate::proxy::life::Life;
use crate::proxy::request_id::RequestId;
use crate::proxy::Proxy;
use crate::relay::Buffered;

/// How a fan-out ended: the status answered, the regions asked, and the connection.
pub(super) struct FannedOut {
    pub status: u16,
    pub regions: Option<String>,
    pub outcome: Outcome,
}

impl Proxy {
    /// Serves a fan-out request whose head (and nothing more) starts `client.pending()`, in
    /// its `life` (its id, its trace).
    pub(super) async fn h1_fanout<S>(
        &self,
        client: &mut Buffered<S>,
        head: &RequestHead,
        route: &FanoutRoute,
        addr: &ClientAddr,
        life: &Life,
        close: bool,
    ) -> FannedOut
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let (id, trace) = (&life.id, life.traced());
        let parts = parts_of(client.pending(), head, Some(id));
        client.consume(head.len);
        let mut regions = None;
        let answer = match parts {
            Err(problem) => Err(problem),
            Ok(parts) if parts.method != Method::GET => {
                drop(parts);
                Err(Problem::GetOnly)
            }
            Ok(mut parts) => {
                self.rewrite_request(&mut parts, addr);
                match self.admit_fanout(addr) {
                    // Boxed, as on every engine: its future is large.
                    Ok(_permit) => Box::pin(self.fanout(route, parts, &mut regions, trace)).await,
                    Err(refusal) => Err(Problem::FanoutBusy(refusal)),
                }
            }
        };
        let resp = answer.unwrap_or_else(Problem::into_response);
        if let Some(made) = resp.extensions().get::<RouterMade>() {
            life.refused(made.slug);
        }
        let status = resp.status().as_u16();
        let idle = self.config.timeouts.idle();
        let written =
            super::answer::write_response(client, resp, id, close, idle, self.alt_svc.as_ref())
                .await;
        FannedOut {
            status,
            regions,
            outcome: match close || !written {
                true => Outcome::Close,
                false => Outcome::KeepAlive,
            },
        }
    }
}

/// The head as `http` parts, the request id in `x-request-id` (the fan-out passes it on to
/// every region). Errors: a method, target or field the `http` crate does not take (400).
pub(super) fn parts_of(
    buf: &[u8],
    head: &RequestHead,
    id: Option<&RequestId>,
) -> Result<http::request::Parts, Problem> {
    let mut req = Request::new(());
    *req.method_mut() = Method::from_bytes(head.method.of(buf))
        .map_err(|_| Problem::BadHead("a method the router cannot read"))?;
    *req.uri_mut() = http::Uri::try_from(head.target.of(buf)).map_err(|_| Problem::BadTarget)?;
    let headers = req.headers_mut();
    for field in &head.fields {
        let name = HeaderName::from_bytes(field.name.of(buf));
        let value = HeaderValue::from_bytes(field.value.of(buf));
        match (name, value) {
            (Ok(name), Ok(value)) => {
                headers.append(name, value);
            }
            _ => return Err(Problem::BadHead("a field the router cannot read")),
        }
    }
    if let Some(id) = id {
        id.stamp(headers);
    }
    Ok(req.into_parts().0)
}
