//! The request's life: admit (method, transfer coding, `Host`) → check for loops → extract
//! the id → resolve the region → pick an upstream → forward → respond. [`Proxy::handle`] reads
//! top to bottom in that order, one named function per phase, in the manner of Pingora's
//! `ProxyHttp` phases. Every failure says who is to blame ([`crate::error`]).
//!
//! The live routing table and its regions' runtime are read as one snapshot through
//! `arc-swap` ([`crate::upstream::regions`]): no lock on the hot path, and a reload never
//! changes the table under a request that already resolved its region. Picking an
//! upstream, retrying on another and ejecting failing ones is [`crate::upstream`]'s part.

mod access;
mod admit;
mod bad_answer;
pub mod h1;
pub mod headers;
mod legacy;
mod life;
mod moving;
pub mod phases;
pub mod request_id;
mod resolve;
pub mod route;
mod send;
mod upgrade;

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HOST};
use http::request::Parts;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body::Body as _;
use http_body_util::{BodyExt, Either, Full, Limited};
use tracing::Instrument;

use crate::config::RouterConfig;
use crate::extract::fanout::FanoutRoute;
use crate::extract::graphql::plan::SplitNodes;
use crate::fanout::budget::FanoutBudget;
use crate::metrics;
use crate::problem::Problem;
use crate::table::RegionId;
use crate::trace::Tracing;
use crate::upstream::attempts::Detour;
use crate::upstream::body::{Guarded, IdleTimeout, Inbound, Prefixed, Watched};
use crate::upstream::budget::RetryBudget;
use crate::upstream::forward::{self, Answered, Outgoing};
use crate::upstream::owners::Owners;
use crate::upstream::regions::{RegionRuntime, Regions, Routing};
use crate::upstream::{self};
use headers::{ClientAddr, Forwarding, ViaValues};
use life::Life;
use route::{Extraction, Routes};

/// The body of every response the router sends: the upstream's (with its first frame put back
/// when it was read before the head was relayed), streamed with an idle timeout, or one of its
/// own.
pub type ProxyBody = Either<Guarded<IdleTimeout<Prefixed>, InFlightGuards>, Full<Bytes>>;

/// What counts a proxied request in flight while its response body streams: the router-wide
/// gauge and the upstream's count that P2C balances on.
#[derive(Debug)]
pub struct InFlightGuards {
    _request: Option<metrics::InFlight>,
    _upstream: upstream::health::InFlight,
    _region: crate::upstream::regions::RegionPermit,
    /// A write of a moving group counted in flight to `from` (docs/moves.md).
    _moved: Option<crate::moves::FromWrite>,
}

/// A request body after extraction: streaming (a `grpc:` route's read put back) or whole.
type ClientBody = Either<Prefixed, Bytes>;

/// Where a request goes: its snapshot (kept, so the region outlives a reload) and region.
struct Target {
    routing: Arc<Routing>,
    region: RegionId,
    /// Boxed: rare, and every request's future holds the target.
    probe: Option<Box<legacy::Probe>>,
    /// Whether its body says it reads or writes (GraphQL), over what its method says.
    said: Option<crate::extract::Access>,
    /// What a move covering its id asks (docs/moves.md).
    moving: Option<Box<moving::Moving>>,
    /// The id's fingerprint (`Decision::id`), for an owner a `421` names.
    id: u64,
}

/// What the routing phases decided: one region, or several (docs/fanout.md).
enum Routed {
    /// One region (the usual case).
    Region(Target, ClientBody),
    /// A `fanout:` list route: every region; the body (a `GET`'s) is read and dropped first.
    Fanout(Arc<FanoutRoute>, ClientBody),
    /// A GraphQL `nodes(ids: $var)` whose ids live in several regions, split by region.
    Split {
        scheme: String,
        split: SplitNodes,
        body: Bytes,
    },
}

impl Target {
    fn region(&self) -> &RegionRuntime {
        self.routing.region(self.region)
    }
}

/// Shared state of the data path: config, live routing, `Via` values.
#[derive(Debug)]
pub struct Proxy {
    config: Arc<RouterConfig>,
    /// The config's `routes:`, compiled.
    routes: Routes,
    regions: Arc<Regions>,
    via: ViaValues,
    /// Metrics of requests refused before a region was chosen (`region="none"`).
    no_region: metrics::RegionMetrics,
    /// Metrics of requests sent to several regions (`region="all"`).
    all_regions: Arc<metrics::RegionMetrics>,
    /// Owners learned at run time: legacy ids' (`legacy: probe`) and `421` hints'
    /// (docs/failover.md); shared with the admin API.
    owners: Arc<Owners>,
    /// Bounds on fan-outs in flight and the answers they buffer.
    fanouts: FanoutBudget,
    /// Probes of legacy ids: a share of the requests for them (`legacy_probe`).
    probes: RetryBudget,
    /// `tracing:` (docs/traces.md): the tracer every request's life and attempts use.
    tracing: Option<Tracing>,
    /// `rate_limits:` (docs/rate-limits.md): checked in the admit phase and the plan step.
    limits: Option<Arc<crate::ratelimit::RateLimits>>,
    /// The proxy itself, for the work a request leaves on a task of its own (a move's
    /// mirror copy, docs/moves.md); empty until [`Proxy::shared`].
    me: std::sync::Weak<Proxy>,
    /// `Alt-Svc: h3=":<port>"` for every response on TCP, with `http3:` (docs/http3.md).
    pub(crate) alt_svc: Option<http::HeaderValue>,
}

impl Proxy {
    /// A proxy over live routing (kept in step with the table's reloads), finding ids with
    /// `routes` ([`Routes::for_config`]), its requests traced with `tracing` when given
    /// ([`Tracing::start`]), refused over the `rate_limits:` rules `limits`
    /// ([`crate::ratelimit::RateLimits::start`]).
    pub fn new(
        config: Arc<RouterConfig>,
        routes: Routes,
        regions: Arc<Regions>,
        tracing: Option<Tracing>,
        limits: Option<Arc<crate::ratelimit::RateLimits>>,
        owners: Arc<Owners>,
    ) -> Proxy {
        let via = ViaValues::new(&config.region);
        let fanouts = FanoutBudget::new(&config.limits);
        let legacy_probe = config.legacy_probe;
        Proxy {
            limits,
            config,
            routes,
            regions,
            via,
            no_region: metrics::RegionMetrics::new("none"),
            all_regions: Arc::new(metrics::RegionMetrics::new("all")),
            owners,
            fanouts,
            // A calm spell saves at most a second's floor of probes (docs/data-path.md).
            probes: RetryBudget::with_depth(legacy_probe.min_per_second),
            tracing,
            me: std::sync::Weak::new(),
            alt_svc: None,
        }
    }

    /// The proxy announcing HTTP/3 on UDP `port` (RFC 7838 §3, RFC 9114 §3.1.1), or not.
    pub fn announcing_h3(self, port: Option<u16>) -> Proxy {
        let alt_svc = port.map(|p| format!("h3=\":{p}\"; ma=86400").parse().ok());
        Proxy {
            alt_svc: alt_svc.flatten(),
            ..self
        }
    }

    /// The proxy behind an `Arc` that knows itself, so that a request can leave work
    /// (a mirror's copy) on a task of its own.
    pub fn shared(proxy: impl FnOnce() -> Proxy) -> Arc<Proxy> {
        Arc::new_cyclic(|me| Proxy {
            me: me.clone(),
            ..proxy()
        })
    }

    /// The tracer, when `tracing:` is configured.
    pub fn tracing(&self) -> Option<&Tracing> {
        self.tracing.as_ref()
    }

    /// The `rate_limits:` rules and their counters, when there are any.
    pub fn rate_limits(&self) -> Option<&Arc<crate::ratelimit::RateLimits>> {
        self.limits.as_ref()
    }

    /// The router config this proxy serves with.
    pub fn config(&self) -> &RouterConfig {
        &self.config
    }

    /// Handles one request end to end; never fails: refusals are problem+json responses.
    /// Its life (request id, span, metrics, access log: `life.rs`) begins here.
    pub fn handle<'a>(
        &'a self,
        req: Request<Inbound>,
        client: &'a ClientAddr,
    ) -> impl Future<Output = Response<ProxyBody>> + Send + 'a {
        let (parts, body) = req.into_parts();
        let life = self.begin(&parts, client);
        self.carry(parts, body, client, life)
    }

    /// Runs the phases for a request whose life has begun (here, or on the own engine's
    /// head path, which hands a request over with its life: `h1/bridge.rs`), and ends the
    /// life with the answer.
    ///
    /// What comes before the phases is done before the returned future, and what comes after
    /// them is a map of theirs: the future keeps no copy of the request beside the one the
    /// phases hold (rustc keeps what an `async` block captured beside what it is moved into:
    /// the request's 272 bytes, which every waiting request held, `-Zprint-type-sizes`).
    pub(crate) fn carry<'a>(
        &'a self,
        mut parts: Parts,
        body: Inbound,
        client: &'a ClientAddr,
        life: Life,
    ) -> impl Future<Output = Response<ProxyBody>> + Send + 'a {
        phases::read_path(&mut parts, &self.config.limits);
        let request_id = life.id.stamp(&mut parts.headers);
        if let Some(trace) = life.traced() {
            trace.write_fields(&mut parts.headers);
        }
        let grpc = crate::extract::grpc::is_grpc(&parts.headers);
        let span = life.span.clone();
        // A map, not an `async` block: one awaiting `phases` would keep it twice, as what it
        // captured and as what it awaits.
        let phases = self.phases(parts, body, client, life).instrument(span);
        futures_util::FutureExt::map(phases, move |(mut resp, mut life)| {
            // A gRPC answer is counted by its grpc-status, not its HTTP 200 (docs/metrics.md).
            let mut counted = resp.status().as_u16();
            if let Some(made) = resp.extensions().get::<crate::problem::RouterMade>() {
                life.refused(made.slug);
                if grpc {
                    // A gRPC client reads the status in trailers, not a problem+json body.
                    counted = made.status.as_u16();
                    resp = crate::problem::grpc_response(made).map(Either::Right);
                }
            } else if grpc {
                counted = crate::problem::counted_status(resp.headers()).unwrap_or(counted);
            }
            resp.headers_mut()
                .insert(request_id::HEADER.clone(), request_id);
            life.finish(self, counted);
            resp
        })
    }

    /// The phases in order; each refusal ends them early as problem+json. The trail comes
    /// back with the response, for the metrics and the access log.
    ///
    /// Not an `async fn`: one keeps its arguments (the request head, its body, the life)
    /// beside the locals they are moved into, bytes every waiting request would hold twice.
    #[allow(clippy::manual_async_fn)]
    fn phases<'a>(
        &'a self,
        mut parts: Parts,
        body: Inbound,
        client: &'a ClientAddr,
        mut trail: Life,
    ) -> impl Future<Output = (Response<ProxyBody>, Life)> + Send + 'a {
        async move {
            let response = 'phases: {
                let trail = &mut trail;
                let (target, body) = match self.route(&parts, body, client, trail).await {
                    Ok(Routed::Region(target, body)) => (target, body),
                    Ok(Routed::Fanout(route, body)) => {
                        // A body cut midway is the client's error, and no region is asked for it.
                        if let Err(problem) = self.drop_body(body).await {
                            break 'phases problem.into_response().map(Either::Right);
                        }
                        self.rewrite_request(&mut parts, client);
                        // Boxed, as are the other several-region paths below: their futures are large
                        // and would otherwise grow every request's future (measured: +2 % instructions
                        // on the REST path, in memcpy and malloc).
                        let answer = match self.admit_fanout(client) {
                            Ok(_permit) => {
                                Box::pin(self.fanout(
                                    &route,
                                    parts,
                                    &mut trail.regions,
                                    trail.trace.as_deref(),
                                ))
                                .await
                            }
                            Err(refusal) => Err(Problem::FanoutBusy(refusal)),
                        };
                        break 'phases answer
                            .unwrap_or_else(Problem::into_response)
                            .map(Either::Right);
                    }
                    Ok(Routed::Split {
                        scheme,
                        split,
                        body,
                    }) => {
                        self.rewrite_request(&mut parts, client);
                        let splitting = Box::pin(self.split_nodes(
                            &scheme,
                            &split,
                            parts,
                            body,
                            &mut trail.regions,
                            trail.trace.as_deref(),
                        ));
                        let answer = match self.admit_fanout(client) {
                            Ok(_permit) => splitting.await,
                            Err(refusal) => Err(Problem::FanoutBusy(refusal)),
                        };
                        break 'phases answer
                            .unwrap_or_else(Problem::into_response)
                            .map(Either::Right);
                    }
                    Err(problem) => break 'phases problem.into_response().map(Either::Right),
                };
                let client_upgrade = upgrade::take(&mut parts);
                self.rewrite_request(&mut parts, client);
                let moving = target.moving.as_deref();
                self.decision_fields(&mut parts.headers, &target.routing, target.region, moving);
                let body = match self.hold_or_stream(&parts, body).await {
                    Ok(body) => body,
                    Err(problem) => break 'phases problem.into_response().map(Either::Right),
                };
                if let Some(moving) = &target.moving {
                    self.mirror(moving, &target.routing, &parts, &body, &mut trail.moved);
                }
                // A legacy id is asked elsewhere after a 404/410: keep the head (the body is empty).
                let probe_head = match (&target.probe, &body) {
                    (Some(_), Outgoing::Held(b)) if b.is_empty() => {
                        Some(forward::copy_head(&parts))
                    }
                    _ => None,
                };
                let mut answered = match self.forward(&target, parts, body, trail.traced()).await {
                    Ok(answered) => answered,
                    Err(problem) => break 'phases problem.into_response().map(Either::Right),
                };
                if answered.response.status() == StatusCode::SWITCHING_PROTOCOLS && !client_upgrade
                {
                    let problem = bad_answer::unsolicited_switch(&target, &answered);
                    break 'phases problem.into_response().map(Either::Right);
                }
                if let (Some(probe), Some(head)) = (&target.probe, probe_head) {
                    // Boxed, as the fan-out paths are: its future is large and would otherwise grow
                    // every request's.
                    let probing = self.legacy_probe(&target, probe, head, answered, trail);
                    answered = Box::pin(probing).await;
                }
                let Answered {
                    mut response,
                    upstream,
                    in_flight,
                    region_permit,
                    detour,
                } = answered;
                if let Detour::Hinted(owner) = detour {
                    self.learn_owner(&target.routing, target.id, owner);
                }
                trail.upstream = Some(upstream);
                let first = match bad_answer::first_frame(&mut response, trail).await {
                    Ok(first) => first,
                    Err(problem) => break 'phases problem.into_response().map(Either::Right),
                };
                let in_flight = InFlightGuards {
                    _request: trail.in_flight.take(),
                    _upstream: in_flight,
                    _region: region_permit,
                    _moved: trail.moved.as_mut().and_then(|m| m.write.take()),
                };
                self.respond(response, first, in_flight, client_upgrade)
            };
            (response, trail)
        }
    }

    /// Phase 5b, legacy ids only: a 404/410 from the region first asked sends the request to
    /// every other region (`legacy/`).
    async fn legacy_probe(
        &self,
        target: &Target,
        probe: &legacy::Probe,
        head: Parts,
        answered: Answered,
        trail: &mut Life,
    ) -> Answered {
        let routing = &target.routing;
        let (region, answered) = self
            .probe(
                routing,
                probe,
                target.region,
                head,
                answered,
                trail.traced(),
            )
            .await;
        if region != target.region {
            let asked = [target.region, region].map(|r| routing.region(r).name.as_str());
            trail.regions = Some(asked.join(","));
            trail.set_region(&routing.region(region).state.metrics);
        }
        answered
    }

    /// Phases 0–3: admission, loop check, id extraction, region resolution. The body comes
    /// back as it must go on (read whole only for GraphQL). A fan-out route, and GraphQL
    /// `nodes` split by region, go to several regions instead (docs/fanout.md).
    async fn route(
        &self,
        parts: &Parts,
        body: Inbound,
        client: &ClientAddr,
        trail: &mut Life,
    ) -> Result<Routed, Problem> {
        self.admit_head(parts, trail.trusted_peer)?;
        admit::admit_parts(parts)?;
        if !trail.head_limited {
            let limited = self.limit_head(parts, client).decided().await;
            limited.map_err(Problem::RateLimited)?;
        }
        let (found, body) = self.extract(parts, body).await?;
        trail.route = found.route_kind();
        let said = self.routes.said(&found, parts.uri.path());
        let split_route = match &found {
            Extraction::Fanout(route) => {
                trail.region = Some(self.all_regions.clone());
                if parts.method != http::Method::GET {
                    return Err(Problem::GetOnly);
                }
                return Ok(Routed::Fanout(Arc::clone(route), body));
            }
            Extraction::Ids(_, _, route) if route.split_nodes() => Some(Arc::clone(route)),
            _ => None,
        };
        let routing = self.regions.current();
        let (decision, legacy_id) = match self.resolve(&routing.table, found, trail) {
            Ok(resolved) => resolved,
            Err(Problem::RegionConflict { ids }) => {
                let split = match (&split_route, &body) {
                    (Some(route), Either::Right(bytes)) => route
                        .split_of(parts.headers.get(CONTENT_TYPE).map(|v| v.as_bytes()), bytes)
                        .map(|split| (route.scheme().to_owned(), split, bytes.clone())),
                    _ => None,
                };
                return match split {
                    Some((scheme, split, body)) => {
                        trail.region = Some(self.all_regions.clone());
                        Ok(Routed::Split {
                            scheme,
                            split,
                            body,
                        })
                    }
                    None => Err(Problem::RegionConflict { ids }),
                };
            }
            Err(problem) => return Err(problem),
        };
        let told = phases::Told {
            said,
            sampled: trail.moved.as_ref().and_then(|m| m.sampled),
            trusted_peer: trail.trusted_peer,
        };
        let phases::Plan {
            mut region,
            probe,
            limit,
            mut moving,
        } = self.plan(&routing, &decision, parts, legacy_id, told)?;
        limit.decided().await.map_err(Problem::RateLimited)?;
        let mut routing = routing;
        if let Some(moving) = moving.as_deref_mut() {
            if let Some(released) = self.release(&routing, moving).await? {
                (routing, region) = released;
            }
            if let Some(write) = moving.take_write() {
                trail.moved.get_or_insert_with(Box::default).write = Some(write);
            }
        }
        trail.set_region(&routing.region(region).state.metrics);
        let target = Target {
            routing,
            region,
            probe,
            said,
            moving,
            id: decision.id,
        };
        Ok(Routed::Region(target, body))
    }

    /// Phase 4a: docs/data-path.md header rules (once; each attempt then only aims the request).
    fn rewrite_request(&self, parts: &mut Parts, client: &ClientAddr) {
        let authority_host = parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
        let original_host = parts.headers.get(HOST).cloned().or(authority_host);
        headers::rewrite_request(
            &mut parts.headers,
            &Forwarding {
                client,
                original_host: original_host.as_ref(),
                via: self.via.for_version(parts.version),
                preserve_host: self.config.preserve_host,
                underscores: self.config.limits.underscore_fields,
            },
        );
    }

    /// Reads a body the request is not forwarded with to its end, each wait at most
    /// `idle_ms`, and drops it (as nginx discards one): its connection can go on, and a body
    /// cut midway is the client's error, counted.
    async fn drop_body(&self, body: ClientBody) -> Result<(), Problem> {
        let Either::Left(incoming) = body else {
            return Ok(());
        };
        let mut body = IdleTimeout::new(incoming, self.config.timeouts.idle());
        while let Some(frame) = body.frame().await {
            if let Err(e) = frame {
                return Err(client_body_problem(&*e));
            }
        }
        Ok(())
    }

    /// Phase 4b: bodies that can be held for a retry are read now (none, or small with a
    /// known length); others stream through, with an idle timeout, and get one attempt.
    async fn hold_or_stream(&self, parts: &Parts, body: ClientBody) -> Result<Outgoing, Problem> {
        let incoming = match body {
            Either::Right(bytes) => return Ok(Outgoing::Held(bytes)),
            Either::Left(incoming) => incoming,
        };
        let idle = self.config.timeouts.idle();
        if incoming.is_end_stream() {
            return Ok(Outgoing::Held(Bytes::new()));
        }
        let small = parts
            .headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .is_some_and(|n| n <= self.config.retries.buffer_bytes as u64);
        if !small {
            let (body, watch) = Watched::new(IdleTimeout::new(incoming, idle));
            return Ok(Outgoing::Streamed(Either::Left(body), watch));
        }
        let limited = Limited::new(
            IdleTimeout::new(incoming, idle),
            self.config.retries.buffer_bytes,
        );
        match limited.collect().await {
            Ok(collected) => Ok(Outgoing::Held(collected.to_bytes())),
            Err(e) => Err(client_body_problem(&*e)),
        }
    }

    /// Phase 6: the upstream's response with docs/data-path.md's header rules; the body streams back
    /// (`first`, its first frame if `bad_answer` read it, in front), carrying `in_flight` until
    /// it is done (a `101` answer to an upgrade starts the tunnel instead).
    fn respond(
        &self,
        mut resp: Response<Inbound>,
        first: Option<http_body::Frame<Bytes>>,
        in_flight: InFlightGuards,
        client_upgrade: bool,
    ) -> Response<ProxyBody> {
        headers::rewrite_response(resp.status(), resp.headers_mut(), &self.via.http11);
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS && client_upgrade {
            upgrade::keep(&mut resp);
        }
        let idle = self.config.timeouts.idle();
        resp.map(|b| {
            let body = Prefixed::with_first(first, b);
            Either::Left(Guarded::new(IdleTimeout::new(body, idle), in_flight))
        })
    }
}

/// The problem for a client body that could not be read whole (held for a retry, or GraphQL),
/// counted as the client's error.
pub(crate) fn client_body_problem(e: &(dyn std::error::Error + 'static)) -> Problem {
    let error = crate::upstream::body::client_error(e);
    crate::metrics::client_error(error.kind);
    Problem::Client(error)
}
