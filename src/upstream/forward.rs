//! A request in `http` form on its way to a region (HTTP/2, gRPC, the bridge's, fan-out
//! legs, `nodes` splits, legacy probes): its body held or streamed ([`Outgoing`]), the wire
//! the attempt loop sends it on ([`HttpExchange`], an [`Exchange`]), and the answer it
//! gets ([`Answered`]). Which attempts are made, and which are retried, is
//! `attempts.rs`'s: a retry needs the request again, so only a held body (none, a small
//! one kept up to `retries.buffer_bytes`, or one read whole for its ids) is sent twice.

use std::sync::Arc;

use super::attempts::{Delivered, Detour, Exchange, Failed};
use super::body::{BodyWatch, Inbound};
use super::health;
use super::regions::{Connects, RegionPermit, Upstream};
use super::{UpstreamBody, UpstreamState};
use crate::error::{Error, ErrorKind};
use crate::extract::Access;
use crate::trace::{Stamp, TRACEPARENT, TRACESTATE};
use bytes::Bytes;
use http::request::Parts;
use http::uri::Authority;
use http::{HeaderValue, Request, Response};
use http_body_util::{Either, Full};

/// The body to send: held (replayable) or streamed (one attempt).
#[derive(Debug)]
pub enum Outgoing {
    /// Bytes the router holds; sent again on a retry.
    Held(Bytes),
    /// The client's body, streamed through, and its watch (how the sender learns when it
    /// ended and whether the client failed it).
    Streamed(UpstreamBody, Arc<BodyWatch>),
}

/// An upstream's answer: its response head (the body still streaming), which upstream gave
/// it, and the guard that counts the request in flight there until the body is done.
#[derive(Debug)]
pub struct Answered {
    /// The upstream's response.
    pub response: Response<Inbound>,
    /// The upstream that gave it.
    pub upstream: Authority,
    /// Keep it with the response body (P2C balances on this count).
    pub in_flight: health::InFlight,
    /// The request's place in its region's `limits.region_max_in_flight`: kept with the
    /// response body too.
    pub region_permit: RegionPermit,
    /// Whether a failover region or a hinted owner answered (docs/failover.md).
    pub detour: Detour,
}

impl From<Delivered<Response<Inbound>>> for Answered {
    fn from(d: Delivered<Response<Inbound>>) -> Answered {
        Answered {
            response: d.done,
            upstream: d.upstream,
            in_flight: d.in_flight,
            region_permit: d.region_permit,
            detour: d.detour,
        }
    }
}

/// A copy of a request head (`Parts` is not `Clone`: its extensions may not be).
pub fn copy_head(parts: &Parts) -> Parts {
    let mut req = Request::new(());
    *req.method_mut() = parts.method.clone();
    *req.uri_mut() = parts.uri.clone();
    *req.version_mut() = parts.version;
    *req.headers_mut() = parts.headers.clone();
    req.into_parts().0
}

/// The wire of a request in `http` form ([`super::attempts::Exchange`]): its head (copied
/// for each attempt while a retry may follow, moved into the last), its body held (sent
/// again on a retry) or streamed (one attempt). `aim` points the request at the chosen
/// upstream (URI, `Host`); `Caller` makes each caller's instance its own, so it is inlined
/// there.
pub struct HttpExchange<Aim> {
    parts: Parts,
    held: Option<Bytes>,
    streamed: Option<UpstreamBody>,
    watch: Option<Arc<BodyWatch>>,
    retry_ok: bool,
    aim: Aim,
    /// The trace fields the next attempt sends (docs/traces.md); boxed, as a request without
    /// tracing carries one word for them.
    stamp: Option<Box<Stamp>>,
    /// Whether it reads (docs/data-path.md "Reads and writes").
    reads: bool,
    /// It asks its region only (a probe, a mirror copy, a peer's failed-over read).
    stays: bool,
    /// `X-Iuid-Failover`'s value once failed over (docs/failover.md).
    failed_over: Option<HeaderValue>,
    /// Its head went with an attempt: it cannot be sent again.
    spent: bool,
}

/// `X-Iuid-Failover: <owner region>`: a request (and its answer) a failover region served
/// (docs/failover.md).
pub static FAILOVER: http::HeaderName = http::HeaderName::from_static("x-iuid-failover");
/// `X-Iuid-Owner: <region>`: with a `421` answer, the region that owns the id
/// (docs/failover.md "Owners learned from the regions").
pub static OWNER: http::HeaderName = http::HeaderName::from_static("x-iuid-owner");

impl<Aim: Fn(&mut Parts, &UpstreamState) + Send + Sync> HttpExchange<Aim> {
    /// `said`: whether the body says the request reads or writes (a GraphQL request's
    /// operations), which decides over its method whether it is sent again after a reset
    /// ([`Access::resendable`]).
    pub fn new(parts: Parts, body: Outgoing, said: Option<Access>, aim: Aim) -> Self {
        let method = parts.method.as_str().as_bytes();
        let retry_ok = Access::resendable(method, said);
        let reads = said.unwrap_or_else(|| Access::of_method(method)) == Access::Read;
        // Only a trusted peer's survives the header rules: its read was failed over once.
        let stays = parts.headers.contains_key(&FAILOVER);
        let (held, streamed, watch) = match body {
            Outgoing::Held(bytes) => (Some(bytes), None, None),
            Outgoing::Streamed(b, watch) => (None, Some(b), Some(watch)),
        };
        HttpExchange {
            parts,
            held,
            streamed,
            watch,
            retry_ok,
            aim,
            stamp: None,
            reads,
            stays,
            failed_over: None,
            spent: false,
        }
    }

    /// The same, asking its region only: never failed over (a legacy probe, a mirror copy).
    pub fn staying(self) -> Self {
        HttpExchange {
            stays: true,
            ..self
        }
    }
}

impl<Aim: Fn(&mut Parts, &UpstreamState) + Send + Sync> Exchange for HttpExchange<Aim> {
    type Head = Response<Inbound>;
    type Done = Response<Inbound>;

    fn replayable(&self) -> bool {
        self.held.is_some() && !self.spent
    }

    fn reads(&self) -> bool {
        self.reads
    }

    fn may_fail_over(&self) -> bool {
        !self.stays
    }

    fn fail_over(&mut self, owner: &str) {
        self.failed_over = HeaderValue::from_str(owner).ok();
    }

    fn owner_hint(head: &Response<Inbound>) -> Option<&str> {
        head.headers().get(&OWNER)?.to_str().ok()
    }

    fn resendable(&self) -> bool {
        self.retry_ok
    }

    fn stamp(&mut self, stamp: Stamp) {
        match &mut self.stamp {
            Some(held) => **held = stamp,
            None => self.stamp = Some(Box::new(stamp)),
        }
    }

    fn status(head: &Response<Inbound>) -> u16 {
        head.status().as_u16()
    }

    fn attempt<'s>(
        &'s mut self,
        upstream: &'s Upstream,
        connects: Connects<'s>,
        again: bool,
    ) -> impl std::future::Future<Output = Result<Response<Inbound>, Failed>> + 's {
        let body = match (&self.held, self.streamed.take()) {
            (Some(bytes), _) => Some(Either::Right(Full::new(bytes.clone()))),
            (None, Some(b)) => Some(b),
            // A streamed body is sent once (`replayable`).
            (None, None) => None,
        };
        let mut head = if again {
            copy_head(&self.parts)
        } else {
            self.spent = true;
            std::mem::replace(&mut self.parts, copy_head_empty())
        };
        (self.aim)(&mut head, &upstream.state);
        if let Some(owner) = &self.failed_over {
            head.headers.insert(FAILOVER.clone(), owner.clone());
        }
        if let Some(stamp) = &self.stamp {
            // One `traceparent` (the client's replaced), and `tracestate` only with it.
            if let Ok(value) = HeaderValue::from_bytes(stamp.traceparent.value()) {
                head.headers.insert(TRACEPARENT.clone(), value);
            }
            match &stamp.tracestate {
                Some(state) => {
                    head.headers.insert(TRACESTATE.clone(), state.clone());
                }
                None if stamp.strip_tracestate => {
                    head.headers.remove(&TRACESTATE);
                }
                None => {}
            }
        }
        let state = &upstream.state;
        let watch = self.watch.as_deref();
        match body {
            Some(body) => {
                let req = Request::from_parts(head, body);
                let sent = state.send::<Aim>(req, watch, Some(connects), self.retry_ok);
                futures_util::future::Either::Left(futures_util::TryFutureExt::map_err(
                    sent,
                    Failed::Error,
                ))
            }
            None => futures_util::future::Either::Right(std::future::ready(Err(Failed::Final(
                Error::new(ErrorKind::Reset, "the request's body was sent once already"),
            )))),
        }
    }

    fn deliver(
        &mut self,
        _upstream: &Upstream,
        mut head: Response<Inbound>,
    ) -> impl std::future::Future<Output = Result<(Response<Inbound>, Option<ErrorKind>), Error>>
    {
        // The client learns its answer came from the failover region (docs/failover.md).
        if let Some(owner) = &self.failed_over {
            head.headers_mut().insert(FAILOVER.clone(), owner.clone());
        }
        std::future::ready(Ok((head, None)))
    }
}

/// A placeholder head for a moved-out request (never sent).
fn copy_head_empty() -> Parts {
    Request::new(()).into_parts().0
}
