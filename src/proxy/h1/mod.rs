//! The own HTTP/1.x engine's head path for one request (docs/data-path.md, "One data
//! path"), read top to bottom in [`Proxy::h1`], on a head the codec (`crate::http1`) parsed
//! into offsets over the client connection's buffer.
//!
//! admit and loop check, extract (the shared phase functions of `proxy::phases`, over a
//! `HeadView`) → resolve → the region phase → write the upstream head once
//! (docs/data-path.md's header rules, `headers::raw`) → forward with retries (`exchange.rs`:
//! the request's own task drives the upstream connection, from a per-worker pool of plain
//! or TLS sockets) → respond (the response head rewritten the same way, the body relayed by
//! its framing).
//!
//! The REST path (an id in the path or a header, one region), GraphQL (`graphql.rs`),
//! fan-outs (`fanout.rs`), `Expect: 100-continue` and HTTP/1.0 clients run here. What the
//! head path does not carry — upgrades, targets not in origin form, gRPC routes, a fan-out
//! `GET` with a body, a chunked GraphQL body or a `nodes` split over several regions, legacy
//! ids to probe, regions with an HTTP/2 upstream — goes through the shared phases
//! (`Proxy::handle`, HTTP/2's) on the same connection, this engine still reading the
//! request and writing the answer (`bridge.rs`). An HTTP/1.0 client (RFC 9112 §9.3) keeps
//! its connection only when it asks (`Connection: keep-alive`, said back), gets `HTTP/1.0`
//! answers, no 1xx, and a chunked or close-delimited answer decoded and closed.

mod answer;
mod body;
mod bridge;
mod exchange;
mod fanout;
mod respond;

use tokio::io::{AsyncRead, AsyncWrite};
use tracing::Instrument;

use super::headers::raw::{self, Nominated, RawForwarding};
use super::headers::ClientAddr;
use super::life::Life;
use super::moving::HeadMove;
use super::phases::{HeadView, RequestView, Told};
use super::route::Extraction;
use super::Proxy;
use crate::error::{Error, ErrorKind};
use crate::http1::head::{self, RequestHead, Seen};
use crate::http1::{framing, write, Chunked, Framing};
use crate::metrics;
use crate::problem::Problem;
use crate::ratelimit::Verdict;
use crate::relay::{Buffered, Readiness};
use crate::table::RegionId;
use crate::upstream::regions::Routing;
use answer::framing_problem;

/// How a connection goes on after a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Read the next request.
    KeepAlive,
    /// Close the connection (the client asked, or the request's framing was broken).
    Close,
}

/// The request's head as it goes upstream, written once: the request line, the fields
/// under the header rules with the framing and the final CRLF. `Host` goes between the line
/// and the fields, per attempt (each upstream has its own).
pub(super) struct Outbound {
    bytes: Vec<u8>,
    line_end: usize,
    fields_end: usize,
    /// The body's length when it is held: all of it pending in the client's buffer, after
    /// the head, sent with the head by every attempt (retryable). `None`: it streams from
    /// the client, one attempt.
    held: Option<usize>,
    framing: Framing,
    idempotent: bool,
    /// What its body says it does (GraphQL), over its method: whether it reads
    /// (`Outbound::reads`) is asked only of a region with a failover.
    said: Option<crate::extract::Access>,
    /// A trusted peer failed it over already: served here, never failed over again.
    stays: bool,
    head_request: bool,
    /// The client speaks HTTP/1.0: no 1xx, no chunked coding, `HTTP/1.0` answers.
    http10: bool,
}

impl Drop for Outbound {
    fn drop(&mut self) {
        crate::relay::give_small(std::mem::take(&mut self.bytes));
    }
}

/// What the head decided: where the request goes.
struct Planned {
    routing: std::sync::Arc<Routing>,
    region: RegionId,
    route: Option<crate::extract::RouteKind>,
    /// Whether its body says it reads or writes (GraphQL), over what its method says.
    said: Option<crate::extract::Access>,
    /// What a move covering its id asks (docs/moves.md): its write counted in flight to
    /// `from` while the request lives, the phase for `X-Iuid-Move`.
    moving: Option<Box<super::moving::Moving>>,
    /// The id's fingerprint (`Decision::id`), for an owner a `421` names.
    id: u64,
}

pub use answer::refuse;

/// Why the head stops here.
enum Stop<'r> {
    /// The shared phases carry it (`bridge.rs`, see the module docs).
    Shared,
    /// A read of a moving group chosen for a mirror copy: the shared phases send it
    /// (docs/moves.md).
    Mirror,
    /// A refusal; `close`: the body's framing is unknown, so the connection cannot go on.
    Refuse(Problem, bool),
    /// A `graphql:` route: its ids are in the body (or the query string), read next
    /// (`body.rs`).
    Graphql(&'r std::sync::Arc<crate::extract::graphql::GraphqlRoute>),
    /// A `json:` route: its id is in the body, read next (`body.rs`).
    Json(super::route::Pending<'r>),
    /// A `fanout:` route: every region asked (`fanout.rs`).
    Fanout(&'r std::sync::Arc<crate::extract::fanout::FanoutRoute>),
}

impl From<Problem> for Stop<'_> {
    fn from(problem: Problem) -> Self {
        Stop::Refuse(problem, false)
    }
}

impl Proxy {
    /// Serves one request whose head `head` was parsed from the start of
    /// `client.pending()`, end to end: the answer written, the body relayed. Never fails: a
    /// refusal is a problem+json answer. `draining`: the answer says `Connection: close`.
    pub async fn h1<S>(
        &self,
        client: &mut Buffered<S>,
        head: &RequestHead,
        addr: &ClientAddr,
        draining: bool,
    ) -> Outcome
    where
        S: AsyncRead + AsyncWrite + Unpin + Readiness,
    {
        let buf = client.pending();
        let view = HeadView::new(buf, head, self.config.limits.escaped_slashes);
        let mut life = self.begin(&view, addr);
        // An HTTP/1.0 connection persists only when its request asks (RFC 9112 §9.3).
        let http10 = head.minor == 0;
        let connection = head.seen.has(Seen::CONNECTION);
        let client_close = draining
            || (connection && Nominated::close(buf, &head.fields))
            || (http10 && !(connection && Nominated::asks(buf, &head.fields, b"keep-alive")));
        if !head.target.of(buf).starts_with(b"/") {
            // Absolute-form (and `OPTIONS *`): the shared phases read the target.
            let expect =
                head.seen.has(Seen::EXPECT) && !http10 && answer::expects_continue(buf, head);
            // Boxed: the shared phases' future is large, and every request's would be
            // sized for it.
            let bridged = self.h1_bridge(client, head, addr, client_close, expect, life);
            return Box::pin(bridged).await;
        }
        let framing = match head.seen.has(Seen::FRAMING) {
            true => framing::request_framing(buf, head),
            false => Ok(Framing::Empty),
        };
        let small_body = match framing {
            Ok(Framing::Length(n)) if n <= self.config.retries.buffer_bytes as u64 => {
                usize::try_from(n).ok()
            }
            _ => None,
        };
        let planned = framing
            .map_err(|e| Stop::Refuse(framing_problem(e), true))
            .and_then(|framing| {
                let planned = self
                    .h1_plan(&view, addr, &mut life)
                    .map_err(|stop| match stop {
                        // The body was not read: the connection cannot go on past it.
                        Stop::Refuse(p, _) => Stop::Refuse(p, framing != Framing::Empty),
                        handoff => handoff,
                    })?;
                Ok((planned, framing))
            });
        // `Expect: 100-continue` (the only expectation `h1_plan` lets by): the client waits
        // for `100 Continue` before its body, which is answered here when the body is about
        // to be read, as Envoy and nginx do; the field is hop-by-hop (docs/data-path.md).
        // (Never to an HTTP/1.0 client, RFC 9110 §10.1.1: its expectation is ignored.)
        let mut expect = head.seen.has(Seen::EXPECT)
            && !http10
            && matches!(framing, Ok(Framing::Length(1..) | Framing::Chunked));
        // A GraphQL or JSON request's ids are in its body: read whole first (bounded), then
        // resolved.
        let planned = match planned {
            Err(Stop::Graphql(route)) => {
                let framing = framing.unwrap_or(Framing::Empty);
                let route = route.clone();
                self.h1_graphql(client, head, &route, framing, &mut expect, &life)
                    .await
                    .map(|planned| (planned, framing))
            }
            Err(Stop::Json(pending)) => {
                let framing = framing.unwrap_or(Framing::Empty);
                self.h1_json(client, head, pending, framing, &mut expect, &life)
                    .await
                    .map(|planned| (planned, framing))
            }
            other => other,
        };
        // From here a stop is a refusal: (the problem, whether the connection closes).
        let planned: Result<_, (Problem, bool)> = match planned {
            Err(Stop::Fanout(route)) => {
                let route = route.clone();
                // (Closed after, to an HTTP/1.0 client: the page's head says no `keep-alive`.)
                let close = client_close || http10;
                let done = self.h1_fanout(client, head, &route, addr, &life, close);
                let done = done.instrument(life.span.clone()).await;
                life.route = Some(crate::extract::RouteKind::Fanout);
                life.regions = done.regions;
                life.region = Some(self.all_regions.clone());
                life.finish(self, done.status);
                return done.outcome;
            }
            Err(Stop::Mirror) => {
                let expect = expect && answer::expects_continue(client.pending(), head);
                let moved = super::moving::Moved {
                    sampled: Some(true),
                    ..Default::default()
                };
                life.moved = Some(Box::new(moved));
                // Boxed, as below.
                let bridged = self.h1_bridge(client, head, addr, client_close, expect, life);
                return Box::pin(bridged).await;
            }
            Err(Stop::Shared | Stop::Graphql(_) | Stop::Json(_)) => {
                let expect = expect && answer::expects_continue(client.pending(), head);
                // Boxed, as above.
                let bridged = self.h1_bridge(client, head, addr, client_close, expect, life);
                return Box::pin(bridged).await;
            }
            Err(Stop::Refuse(p, close)) => Err((p, close)),
            Ok(planned) => Ok(planned),
        };
        if expect
            && planned.is_ok()
            && !answer::send_continue(client, &mut expect, self.config.timeouts.idle()).await
        {
            return Outcome::Close;
        }
        // A body small enough to hold for a retry (`retries.buffer_bytes`) is read whole
        // first, as the shared phases and nginx (`proxy_request_buffering`) read it: it can be
        // sent again, and it goes upstream with its head in one write. A refused request's
        // is read too, and dropped with it, so that its connection goes on (as nginx
        // discards a body it answers without).
        let mut planned = planned;
        let mut dropped_body = 0;
        // A refused request whose client still waits for `100 Continue` sends no body, and a
        // body refused for its declared length is never awaited (the client may wait for the
        // answer before sending it, as it would for 100 Continue): its connection closes
        // after the answer instead.
        let read_whole = match &planned {
            Ok(_) => small_body,
            // A body that already failed (stalled for `idle_ms`, cut short: a GraphQL or
            // JSON route read it) is not waited for again: its 408 comes once.
            Err((Problem::PayloadTooLarge { .. } | Problem::Client(_), _)) => None,
            Err((_, true)) if !expect => small_body,
            Err(_) => None,
        };
        if let Some(n) = read_whole {
            let total = head.len + n;
            let idle = self.config.timeouts.idle();
            let failed = exchange::read_body(client, total, idle).await.err();
            match (failed, &mut planned) {
                (Some(error), _) => {
                    planned = Err((Problem::Client(error), true));
                }
                (None, Err((_, close))) => {
                    *close = false;
                    dropped_body = n;
                }
                (None, _) => {}
            }
        }
        let buf = client.pending();
        let planned = planned.and_then(|(planned, framing)| {
            let outbound = self.h1_outbound(buf, head, addr, &life, framing, &planned)?;
            Ok((planned, outbound))
        });
        let (planned, outbound) = match planned {
            Ok(ready) => ready,
            // A refusal to an HTTP/1.0 client closes its connection: the answer says no
            // `keep-alive`.
            Err((problem, close)) => {
                client.consume(head.len + dropped_body);
                let status = problem.status().as_u16();
                life.refused(problem.slug());
                let written = answer::write_problem(
                    client,
                    problem,
                    &life.id,
                    close || client_close || http10,
                    self.config.timeouts.idle(),
                    self.alt_svc.as_ref(),
                )
                .await;
                life.finish(self, status);
                return if close || client_close || http10 || !written {
                    Outcome::Close
                } else {
                    Outcome::KeepAlive
                };
            }
        };
        // A held body stays pending until the request is done: each attempt sends it.
        client.consume(head.len);
        let held = outbound.held;
        let region = planned.routing.region(planned.region);
        let to = (&*planned.routing, region);
        life.record_region(&region.state.metrics);
        life.route = planned.route;
        // Instrumented only when the span is on, and the future awaited where it is made:
        // a wrapper, or a named future awaited later, is one more copy of it on every
        // request (measured: 184 instructions of `memcpy` per REST request).
        let answered = match life.span.is_disabled() {
            true => {
                self.h1_forward(client, to, outbound, &life, client_close)
                    .await
            }
            false => {
                let span = life.span.clone();
                self.h1_forward(client, to, outbound, &life, client_close)
                    .instrument(span)
                    .await
            }
        };
        if let Some(n) = held {
            client.consume(n);
        }
        if let crate::upstream::attempts::Detour::Hinted(owner) = answered.detour {
            self.learn_owner(&planned.routing, planned.id, owner);
        }
        life.upstream = answered.upstream;
        life.finish_in(self, answered.status, Some(&region.state.metrics));
        answered.outcome
    }

    /// Phases 0–3 on the head: admission, loop check, extraction, resolution.
    fn h1_plan(
        &self,
        view: &HeadView<'_>,
        addr: &ClientAddr,
        life: &mut Life,
    ) -> Result<Planned, Stop<'_>> {
        let (buf, head) = (view.buf, view.head);
        let fields = &head.fields;
        let seen = head.seen;
        if seen.has(Seen::UPGRADE)
            || seen.has(Seen::EXPECT) && !answer::expects_continue(buf, head)
            || seen.has(Seen::CONTENT_TYPE)
                && crate::extract::grpc::is_grpc_content_type(
                    head::all(buf, fields, b"content-type").next(),
                )
        {
            return Err(Stop::Shared);
        }
        self.admit_head(view, life.trusted_peer)?;
        if view.path_changed() && self.config.limits.forward_normalized_path {
            // The normal form goes upstream: the shared phases write the target from it.
            return Err(Stop::Shared);
        }
        if let Some(limits) = &self.limits {
            if limits.is_shared() && limits.has_region_rules() {
                // Redis decides every region's budget: the shared phases await it (planned
                // here, the routing decision would be counted twice).
                return Err(Stop::Shared);
            }
            match self.limit_head(view, addr) {
                Verdict::Admit => life.head_limited = true,
                Verdict::Limited(limited) => return Err(Problem::RateLimited(limited).into()),
                // Redis decides: the shared phases await it (docs/rate-limits.md). Nothing
                // was counted: the script runs when the decision is polled.
                Verdict::Ask(_) => return Err(Stop::Shared),
            }
        }
        let found = self.extract_head(view);
        match &found {
            Extraction::Pending(pending) => {
                return match (pending.graphql(), pending.json()) {
                    (Some(graphql), _) => Err(Stop::Graphql(graphql)),
                    (None, Some(_)) => Err(Stop::Json(*pending)),
                    (None, None) => Err(Stop::Shared),
                }
            }
            // A list is asked with GET (405 otherwise, its body dropped); a GET with a body
            // goes through the shared phases.
            Extraction::Fanout(_) if head.method.of(buf) != b"GET" => {
                return Err(Problem::GetOnly.into())
            }
            Extraction::Fanout(route) if !seen.has(Seen::FRAMING) => {
                return Err(Stop::Fanout(route))
            }
            _ => {}
        }
        self.h1_resolve(found, view, life)
    }

    /// Phase 3 on the head path, for a request whose route found its id (or none): the
    /// region it resolves to, or what the head path does not carry (several ids, several
    /// regions, a legacy id to probe) handed to the shared phases.
    fn h1_resolve<'r>(
        &self,
        found: Extraction<'_, '_>,
        view: &HeadView<'_>,
        life: &Life,
    ) -> Result<Planned, Stop<'r>> {
        let route = found.route_kind();
        match &found {
            Extraction::Id(..) | Extraction::NoId | Extraction::Invalid(..) => {}
            Extraction::Ids(..) | Extraction::Fanout(_) | Extraction::Pending(_) => {
                return Err(Stop::Shared)
            }
        }
        let routing = self.regions.current();
        let (decision, legacy_id) = self.resolve(&routing.table, found, life)?;
        if legacy_id.is_some() {
            // A legacy id may be probed in the other regions: the shared phases do that.
            return Err(Stop::Shared);
        }
        let told = Told {
            trusted_peer: life.trusted_peer,
            ..Told::default()
        };
        self.planned(routing, &decision, view, route, told)
    }

    /// Where a resolved request goes, on the head path: a region whose upstreams it can
    /// reach itself (HTTP/1.1, plain or TLS), after the region phase; else the shared
    /// phases.
    ///
    /// `told`: what its body says it does (GraphQL), whether a trusted peer sent it. An id
    /// a move covers (docs/moves.md) stays here unless its write is held or its read copied.
    fn planned<'r>(
        &self,
        routing: std::sync::Arc<Routing>,
        decision: &crate::table::Decision,
        view: &HeadView<'_>,
        route: Option<crate::extract::RouteKind>,
        mut told: Told,
    ) -> Result<Planned, Stop<'r>> {
        let raw = |r| routing.raw_capable(r);
        let mut region = decision.region;
        if let crate::table::Rule::Move { index } = decision.rule {
            let access = told
                .said
                .unwrap_or_else(|| crate::extract::Access::of_method(view.method()));
            let copy = told.trusted_peer && view.value(&super::moving::MIRROR).is_some();
            match self.move_on_head(&routing, index, (access, copy)) {
                HeadMove::Here(to) => (region, told.sampled) = (to, Some(false)),
                HeadMove::Copied => return Err(Stop::Mirror),
                HeadMove::Shared => return Err(Stop::Shared),
            }
        }
        if !raw(region) {
            return Err(Stop::Shared);
        }
        // No legacy id comes here (`h1_resolve` hands those over).
        let plan = self.plan(&routing, decision, view, None, told)?;
        if !matches!(plan.limit, Verdict::Admit) {
            // Redis decides: never here, since `h1_plan` hands those requests over first.
            return Err(Stop::Shared);
        }
        if plan.region != region && !raw(plan.region) {
            return Err(Stop::Shared);
        }
        if let Some(super::moving::Step::Hold(_)) = plan.moving.as_ref().map(|m| &m.step) {
            // The phase changed since `move_on_head` read it: the shared phases hold it
            // (its decision is counted twice, in that rare race).
            return Err(Stop::Shared);
        }
        Ok(Planned {
            region: plan.region,
            routing,
            route,
            said: told.said,
            moving: plan.moving,
            id: decision.id,
        })
    }

    /// Phase 4: the request's head going upstream, written once (`Outbound`), and whether
    /// its body is held (small and read whole, for a retry).
    fn h1_outbound(
        &self,
        buf: &[u8],
        head: &RequestHead,
        addr: &ClientAddr,
        life: &Life,
        framing: Framing,
        planned: &Planned,
    ) -> Result<Outbound, (Problem, bool)> {
        let said = planned.said;
        let method = head.method.of(buf);
        let body = &buf[head.len..];
        let limit = self.config.retries.buffer_bytes;
        let held = match framing {
            Framing::Empty => Some(0),
            Framing::Length(n) if n as usize <= limit && body.len() as u64 >= n => Some(n as usize),
            Framing::Chunked => {
                let mut scanner = Chunked::new();
                match scanner.scan(body) {
                    // A body with trailer fields streams: they are dropped as it is relayed
                    // (`Chunked::request`), which a held body, sent as it came, is not.
                    Ok(p) if p.done && p.used <= limit && !scanner.has_trailer_fields() => {
                        Some(p.used)
                    }
                    Ok(_) => None,
                    Err(e) => {
                        metrics::client_error(ErrorKind::BadFraming);
                        let error = Error::new(ErrorKind::BadFraming, format!("body framing: {e}"));
                        return Err((Problem::Client(error), true));
                    }
                }
            }
            _ => None,
        };
        // Small: it is held while the answer is awaited (for a retry); a large head or held
        // body grows it.
        let mut bytes = crate::relay::take_small();
        bytes.extend_from_slice(method);
        bytes.push(b' ');
        bytes.extend_from_slice(head.target.of(buf));
        bytes.extend_from_slice(b" HTTP/1.1\r\n");
        let line_end = bytes.len();
        let original_host = match head.seen.has(Seen::HOST) {
            true => head::all(buf, &head.fields, b"host").next(),
            false => None,
        };
        raw::write_request_fields(
            &mut bytes,
            buf,
            &head.fields,
            &RawForwarding {
                client: addr,
                original_host,
                via: match head.minor {
                    0 => self.via.for_version(http::Version::HTTP_10).as_bytes(),
                    _ => self.via.http11.as_bytes(),
                },
                preserve_host: self.config.preserve_host,
                request_id: life.id.as_bytes(),
                nominates: head.seen.has(Seen::CONNECTION),
                trace: life.traced(),
                underscores: self.config.limits.underscore_fields,
            },
        );
        if self.config.decision_headers {
            let (routing, moving) = (&planned.routing, planned.moving.as_deref());
            super::moving::decision_lines(&mut bytes, routing, planned.region, moving);
        }
        match framing {
            Framing::Length(n) => {
                bytes.extend_from_slice(b"Content-Length: ");
                write::decimal(&mut bytes, n);
                bytes.extend_from_slice(b"\r\n");
            }
            Framing::Chunked => write::field(&mut bytes, b"Transfer-Encoding", b"chunked"),
            // A body-less POST keeps saying so (`Content-Length: 0`), as it came.
            Framing::Empty
                if head::all(buf, &head.fields, b"content-length")
                    .next()
                    .is_some() =>
            {
                write::field(&mut bytes, b"Content-Length", b"0")
            }
            Framing::Empty | Framing::Close => {}
        }
        bytes.extend_from_slice(b"\r\n");
        let fields_end = bytes.len();
        Ok(Outbound {
            bytes,
            line_end,
            fields_end,
            held,
            framing,
            idempotent: crate::extract::Access::resendable(method, said),
            said,
            stays: life.trusted_peer
                && head::all(buf, &head.fields, b"x-iuid-failover")
                    .next()
                    .is_some(),
            head_request: method == b"HEAD",
            http10: head.minor == 0,
        })
    }
}
