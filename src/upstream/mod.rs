//! Talking to upstreams: pools, balancing, health, retries (docs/data-path.md, last bullet).
//!
//! Each upstream (`host:port`) has its own [`UpstreamState`]: pooled HTTP/1.1 connections and
//! a health record. Separate pools mean a slow or dead upstream cannot hold up another
//! region's requests. There is one pool per worker thread (`crate::workers`), so a pooled
//! connection is only ever used by the thread whose event loop drives it; the pools are ours:
//! the own engine's sockets for HTTP/1.1 (`raw`, driven by `proxy::h1` and [`h1`]), hyper's
//! client connections for HTTP/2 and upgrades (`pool`). States live in a [`Registry`] keyed by
//! authority, so a routing-table reload keeps the warm connections and the health of the
//! upstreams that stay.
//!
//! - [`health`]: outlier ejection and power-of-two-choices balancing.
//! - [`budget`]: the retry budget.
//! - [`forward`]: one request, with retries on another upstream when that is safe.
//! - [`check`]: optional active health checks.
//! - [`body`]: idle timeouts on streamed bodies.
//! - [`regions`]: each region's runtime (upstreams, cursor, retry budget, metrics), kept in
//!   step with the routing table by region name.

pub mod adaptive;
pub mod attempts;
pub mod body;
pub mod budget;
pub mod check;
pub mod forward;
pub mod h1;
pub mod health;
pub mod io;
pub mod owners;
mod pool;
pub mod raw;
pub mod raw_body;
pub mod regions;
mod registry;
pub mod stale;

pub use registry::Registry;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use http::uri::Authority;
use http::{HeaderValue, Request, Response, Version};
use http_body_util::{Either, Full};
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use crate::table::{UpstreamProtocol, UpstreamSpec};

/// Largest read buffer of an HTTP/1.1 upstream connection, in bytes; it also bounds an
/// upstream's response head (then 502).
const UPSTREAM_READ_BUFFER: usize = 64 << 10;
use crate::tls::client::UpstreamTls;
use io::UpstreamIo;
use tokio::net::TcpStream;

use crate::config::Timeouts;
use crate::error::{Error, ErrorKind, ShedReason};
use body::{BodyWatch, IdleTimeout, Inbound, Watched};
use health::Health;
use regions::{ConnectSlot, Connects};

/// A request body on its way upstream: the client's, streamed (with an idle timeout, reporting
/// to a [`body::BodyWatch`]), or bytes the router holds (a GraphQL body it read, or a small
/// body kept for a retry).
pub type UpstreamBody = Either<Watched<IdleTimeout<body::Prefixed>>, Full<Bytes>>;

/// One upstream's pool and health, shared by every table that lists it.
#[derive(Debug)]
pub struct UpstreamState {
    /// `host:port`.
    pub authority: Authority,
    /// `host:port` as a `Host` value, made once.
    pub host: HeaderValue,
    /// One pool per worker, index [`crate::workers::current`]; slot 0 serves threads that
    /// are no worker.
    pools: Box<[pool::Pool]>,
    /// The own HTTP/1.1 engine's idle connections, one pool per worker as `pools`.
    raw: Box<[raw::RawPool]>,
    timeouts: Timeouts,
    /// The bounds on its answers' heads (`limits.max_headers`, `limits.max_header_bytes`).
    answer_head: raw::AnswerHead,
    /// TLS, for an `https://` upstream.
    tls: Option<UpstreamTls>,
    /// HTTP/1.1 or HTTP/2.
    pub protocol: UpstreamProtocol,
    /// Passive (and active) health.
    pub health: Health,
}

impl UpstreamState {
    /// The state of `spec`'s upstream with room for `workers` worker pools.
    fn new(
        spec: &UpstreamSpec,
        timeouts: &Timeouts,
        answer_head: raw::AnswerHead,
        workers: usize,
    ) -> UpstreamState {
        let authority = spec.authority.clone();
        UpstreamState {
            host: HeaderValue::from_str(authority.as_str())
                .unwrap_or(HeaderValue::from_static("localhost")),
            authority,
            tls: spec.tls.clone(),
            protocol: spec.protocol,
            pools: (0..=workers)
                .map(|_| pool::Pool::new(timeouts.idle()))
                .collect(),
            raw: (0..=workers).map(|_| raw::RawPool::default()).collect(),
            timeouts: *timeouts,
            answer_head,
            health: Health::default(),
        }
    }

    /// The calling worker's pool.
    fn pool(&self) -> &pool::Pool {
        self.pools
            .get(crate::workers::current())
            .unwrap_or(&self.pools[0])
    }

    /// The calling worker's pool of the own engine's connections.
    pub fn raw_pool(&self) -> &raw::RawPool {
        self.raw
            .get(crate::workers::current())
            .unwrap_or(&self.raw[0])
    }

    /// Whether this is an `https://` upstream.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Whether the own HTTP/1.1 engine can talk to this upstream itself: an HTTP/1.1 one,
    /// plain or TLS (HTTP/2 upstreams are hyper's client's), from either driver: the head
    /// path's exchange (`proxy::h1`) or the shared phases' ([`h1`]).
    pub fn raw_capable(&self) -> bool {
        self.protocol == UpstreamProtocol::Http1
    }

    /// A new connection for the own engine, within `connect_ms` for TCP and TLS together:
    /// plain, or TLS for an `https://` upstream (the region's CA, `server_name` and client
    /// certificate, ALPN `http/1.1`; a session resumed from the upstream's config's cache
    /// when it has one, as nginx's `proxy_ssl_session_reuse`).
    ///
    /// Errors: `Connect` (refused, unreachable, over `connect_ms`, a certificate that does
    /// not verify, or a failed handshake).
    pub async fn raw_connect(&self) -> Result<raw::RawConn, Error> {
        self.transport().await.map(crate::relay::Buffered::new)
    }

    /// TCP, then TLS for an `https://` upstream, within `connect_ms`.
    async fn transport(&self) -> Result<UpstreamIo, Error> {
        let connect_failed = |e: &dyn std::fmt::Display| {
            Error::new(ErrorKind::Connect, format!("connect failed: {e}"))
        };
        let connected = tokio::time::timeout(self.timeouts.connect(), async {
            let stream = TcpStream::connect(self.authority.as_str())
                .await
                .map_err(|e| match e.raw_os_error() {
                    // Out of descriptors is the router's, not the upstream's.
                    Some(libc::EMFILE | libc::ENFILE) => Error::new(
                        ErrorKind::Shed(ShedReason::Nofile),
                        format!("no descriptor for the upstream connection: {e}"),
                    ),
                    _ => connect_failed(&e),
                })?;
            // The last descriptors are the admin API's (`crate::nofile`): a request that
            // would hold one waiting on its region is shed instead.
            if crate::nofile::in_admin_reserve(std::os::fd::AsRawFd::as_raw_fd(&stream)) {
                return Err(Error::new(
                    ErrorKind::Shed(ShedReason::Nofile),
                    "no descriptor left for the upstream connection but the admin API's",
                ));
            }
            // A proxy writes whole messages; Nagle would only add latency.
            let _ = stream.set_nodelay(true);
            match &self.tls {
                None => Ok(UpstreamIo::Plain(stream)),
                // Boxed: a handshake's future is ~1 KiB, which every plain connect (and, in
                // a burst, every request being connected) would otherwise carry.
                Some(tls) => {
                    let connector = tokio_rustls::TlsConnector::from(tls.config.clone());
                    let stream = Box::pin(connector.connect(tls.server_name.clone(), stream))
                        .await
                        .map_err(|e| connect_failed(&format_args!("TLS: {e}")))?;
                    Ok(UpstreamIo::Tls(Box::new(stream)))
                }
            }
        })
        .await;
        match connected {
            Ok(io) => io,
            Err(_) => Err(connect_failed(&format_args!(
                "no connection within {} ms",
                self.timeouts.connect_ms
            ))),
        }
    }

    /// Connections pooled by the calling worker (busy or idle), for tests and the admin API.
    pub fn pooled(&self) -> usize {
        self.pool().len()
    }

    /// A new connection, its task spawned on the calling worker's event loop: TCP, TLS for an
    /// `https://` upstream, then the HTTP/1.1 or HTTP/2 handshake.
    ///
    /// Errors: `Connect` (refused, unreachable, over `connect_ms` for TCP and TLS together, a
    /// certificate that does not verify, or a failed handshake).
    async fn connect(&self) -> Result<pool::Sender, Error> {
        let connect_failed = |e: &dyn std::fmt::Display| {
            Error::new(ErrorKind::Connect, format!("connect failed: {e}"))
        };
        let io = self.transport().await?;
        let authority = self.authority.clone();
        let io = TokioIo::new(io);
        match self.protocol {
            UpstreamProtocol::Http1 => {
                // Each connection keeps its read buffer while pooled: hyper's default lets it
                // grow to ~400 KiB on a large answer (fan-outs: tens of MB held by idle
                // connections after a burst). 64 KiB reads large bodies as fast and bounds an
                // upstream's response head as Envoy's default does (60 KiB).
                let (sender, conn) = http1::Builder::new()
                    .max_buf_size(UPSTREAM_READ_BUFFER)
                    .handshake(io)
                    .await
                    .map_err(|e| connect_failed(&e))?;
                tokio::spawn(async move {
                    // Upgrades (WebSocket) take the connection over after a 101.
                    if let Err(e) = conn.with_upgrades().await {
                        tracing::debug!(upstream = %authority, error = %e, "upstream connection ended");
                    }
                });
                Ok(pool::Sender::H1(sender))
            }
            UpstreamProtocol::H2 => {
                let (sender, conn) = http2::Builder::new(TokioExecutor::new())
                    .timer(TokioTimer::new())
                    .handshake(io)
                    .await
                    .map_err(|e| connect_failed(&e))?;
                tokio::spawn(async move {
                    if let Err(e) = conn.await {
                        tracing::debug!(upstream = %authority, error = %e, "upstream connection ended");
                    }
                });
                Ok(pool::Sender::H2(sender))
            }
        }
    }

    /// Sends on a pooled connection, or a new one. A request that a pooled connection closed
    /// before taking (the upstream ended an idle keep-alive connection as the request left,
    /// or sent an HTTP/2 GOAWAY) is sent again on a new connection: nothing of it reached the
    /// upstream.
    async fn exchange(
        self: &Arc<Self>,
        mut req: Request<UpstreamBody>,
        connects: Option<Connects<'_>>,
    ) -> Result<Response<Inbound>, Exchange> {
        let mut refusals = 0;
        loop {
            let (mut sender, pooled) = match self.pool().checkout() {
                Some(sender) => (sender, true),
                None if self.protocol == UpstreamProtocol::H2 => {
                    // One connection per worker: whoever gets here first makes it, the others
                    // wait and share it.
                    let _connecting = self.pool().h2_connecting.lock().await;
                    match self.pool().checkout() {
                        Some(sender) => (sender, true),
                        None => {
                            let _slot = connect_slot(connects).map_err(Exchange::Connect)?;
                            let sender = self.connect().await.map_err(Exchange::Connect)?;
                            if let pool::Sender::H2(shared) = &sender {
                                self.pool().checkin(pool::Sender::H2(shared.clone()));
                            }
                            (sender, false)
                        }
                    }
                }
                // A connection freed meanwhile is taken instead of waiting on the new one,
                // which its task still finishes and pools: dropped midway, a TLS handshake was
                // begun and reset for nothing, and under load most were.
                None => {
                    let slot = connect_slot(connects).map_err(Exchange::Connect)?;
                    let connecting = self.connect_in_background(slot);
                    tokio::pin!(connecting);
                    tokio::select! {
                        biased;
                        connected = &mut connecting => {
                            (connected.map_err(Exchange::Connect)?, false)
                        }
                        freed = self.pool().freed() => (freed, true),
                    }
                }
            };
            let sent = match &mut sender {
                pool::Sender::H1(s) => s.try_send_request(req).await,
                // The shared HTTP/2 connection stays pooled while this stream runs.
                pool::Sender::H2(s) => {
                    // A new connection's first streams go out before the upstream's SETTINGS
                    // say how many it takes; those beyond are refused (REFUSED_STREAM, RFC
                    // 9113 §8.7: not processed) and are sent again, now within the limit. A
                    // held body can be; a streamed one has gone.
                    let again = held_copy(&req);
                    match s.try_send_request(req).await {
                        Err(e) if refusals < 8 && again.is_some() && refused(e.error()) => {
                            refusals += 1;
                            req = again.expect("checked");
                            continue;
                        }
                        sent => sent,
                    }
                }
            };
            match sent {
                Ok(resp) => {
                    if let pool::Sender::H1(_) = sender {
                        self.pool().checkin(sender);
                    }
                    return Ok(resp.map(Inbound::Hyper));
                }
                Err(mut e) => match e.take_message() {
                    Some(again) if pooled => req = again,
                    _ => return Err(Exchange::Failed(e.into_error())),
                },
            }
        }
    }

    /// A new HTTP/1.1 connection to an `https://` upstream ([`UpstreamState::connect`]) made
    /// on a task of its own:
    /// awaited, it is the caller's; dropped before it is made (a freed connection was taken
    /// instead), the task still makes it and checks it into the calling worker's pool, as
    /// hyper-util's pool finishes every connect it starts. Errors: `Connect`.
    ///
    /// Plain connects stay inline, dropped as before when overtaken: one costs a SYN, and a
    /// task each would hold memory that a burst of requests waiting on a silent upstream
    /// keeps (measured: 2 KiB per waiting request).
    async fn connect_in_background(
        self: &Arc<Self>,
        slot: Option<ConnectSlot>,
    ) -> Result<pool::Sender, Error> {
        if self.tls.is_none() {
            let sender = self.connect().await;
            drop(slot);
            return sender;
        }
        let (made, connected) = tokio::sync::oneshot::channel();
        let upstream = Arc::clone(self);
        tokio::spawn(async move {
            let sender = upstream.connect().await;
            drop(slot);
            if let Err(Ok(unwanted)) = made.send(sender) {
                upstream.pool().checkin(unwanted);
            }
        });
        match connected.await {
            Ok(sender) => sender,
            Err(_) => Err(Error::new(
                ErrorKind::Connect,
                "connect failed: its task ended before the connection was made",
            )),
        }
    }

    /// An active health check: `GET path` on a pooled or new connection, its body read and
    /// dropped (so the connection can be used again); the answer's status.
    ///
    /// Errors: as [`UpstreamState::send`].
    pub async fn probe(self: &Arc<Self>, path: &str) -> Result<http::StatusCode, Error> {
        /// The probe's own instance of `send` (see its `Caller`).
        struct Probe;
        let uri = format!("http://{}{}", self.authority, path);
        let mut req = Request::new(Either::Right(Full::new(Bytes::new())));
        *req.uri_mut() = uri
            .parse()
            .map_err(|e| Error::new(ErrorKind::Connect, format!("health check URI {uri}: {e}")))?;
        req.headers_mut()
            .insert(http::header::HOST, self.host.clone());
        let resp = self.send::<Probe>(req, None, None, true).await?;
        let status = resp.status();
        let _ = http_body_util::BodyExt::collect(http_body_util::Limited::new(
            resp.into_body(),
            64 << 10,
        ))
        .await;
        Ok(status)
    }

    /// Sends a request whose URI is already absolute and waits for the response headers;
    /// the body streams afterwards.
    ///
    /// `watch` is the streamed body's (none for a held one, which is sent at once). While it
    /// uploads, there is no response-header timer: a slow but steady upload is fine, a client
    /// that stalls it meets the body's own idle timer (408, the client's), and an upstream
    /// that reads none of it for `idle_ms` is a timeout (the upstream's). The
    /// `response_headers_ms` timer starts when the body has ended (docs/data-path.md).
    ///
    /// An HTTP/1.1 upstream is asked through the own engine's pooled sockets (`h1`), unless
    /// the request asks for an upgrade (hyper's client hands over the switched connection).
    /// `resendable`: whether the request may be sent twice, which decides whether it is sent
    /// again after its pooled connection closed with nothing of the answer come (`stale.rs`).
    ///
    /// Errors: the client's, when its body failed (whatever the exchange then reports); else
    /// `Connect`, `Reset` or `Timeout`.
    ///
    /// `Caller` is not used: each caller's type makes its own copy of this function, so that
    /// the proxied path's copy has one caller and is inlined into it (measured: shared with
    /// the fan-out paths, it was not, at +390 instructions per proxied request).
    ///
    /// The request is made ready and its exchange's future made before the returned future:
    /// that one keeps only the boxed exchange and the timers while it waits (rustc keeps an
    /// `async fn`'s arguments beside what they are moved into; a request waiting on a silent
    /// upstream held four copies of its head).
    pub fn send<'a, Caller>(
        self: &'a Arc<Self>,
        mut req: Request<UpstreamBody>,
        watch: Option<&'a BodyWatch>,
        connects: Option<Connects<'a>>,
        resendable: bool,
    ) -> impl Future<Output = Result<Response<Inbound>, Error>> + Send + 'a {
        let own = self.protocol == UpstreamProtocol::Http1
            && !req.headers().contains_key(http::header::UPGRADE);
        match self.protocol {
            // HTTP/1.1 whatever the client spoke, in origin form.
            UpstreamProtocol::Http1 => {
                *req.version_mut() = Version::HTTP_11;
                if let Some(pq) = req.uri().path_and_query().cloned() {
                    *req.uri_mut() = http::Uri::from(pq);
                }
            }
            // HTTP/2 takes the scheme and authority from the absolute URI.
            UpstreamProtocol::H2 => {
                *req.version_mut() = Version::HTTP_2;
                if self.tls.is_some() {
                    let mut parts = std::mem::take(req.uri_mut()).into_parts();
                    parts.scheme = Some(http::uri::Scheme::HTTPS);
                    if let Ok(uri) = http::Uri::from_parts(parts) {
                        *req.uri_mut() = uri;
                    }
                }
                // Connection-specific fields are not allowed in HTTP/2 (RFC 9113 §8.2.2).
                req.headers_mut().remove(http::header::HOST);
                // `te` is hop-by-hop and was removed, but gRPC requires `te: trailers` on
                // every HTTP/2 request (the gRPC HTTP/2 protocol).
                if crate::extract::grpc::is_grpc(req.headers()) {
                    req.headers_mut()
                        .insert(http::header::TE, HeaderValue::from_static("trailers"));
                }
            }
        }
        type Sent<'a> =
            Pin<Box<dyn Future<Output = Result<Response<Inbound>, Exchange>> + Send + 'a>>;
        let mut sent: Sent<'a> = if own {
            Box::pin(h1::exchange(self, req, connects, resendable))
        } else {
            Box::pin(self.exchange(req, connects))
        };
        async move {
            if let Some(watch) = watch {
                loop {
                    let frames = watch.frames();
                    tokio::select! {
                        biased;
                        result = &mut sent => return classify(result, Some(watch)),
                        () = watch.ended() => break,
                        () = tokio::time::sleep(self.timeouts.idle()) => {
                            if watch.frames() == frames && !watch.waiting_on_client() {
                                return Err(Error::new(
                                    ErrorKind::Timeout,
                                    format!(
                                        "the upstream read none of the request body for {} ms",
                                        self.timeouts.idle_ms
                                    ),
                                ));
                            }
                        }
                    }
                }
            }
            match tokio::time::timeout(self.timeouts.response_headers(), sent).await {
                Err(_) => Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "no response headers within {} ms",
                        self.timeouts.response_headers_ms
                    ),
                )),
                Ok(result) => classify(result, watch),
            }
        }
    }
}

/// A copy of a request whose body the router holds (to send it again), `None` for a streamed
/// body.
fn held_copy(req: &Request<UpstreamBody>) -> Option<Request<UpstreamBody>> {
    let Either::Right(full) = req.body() else {
        return None;
    };
    let mut copy = Request::new(Either::Right(full.clone()));
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    Some(copy)
}

/// Whether an HTTP/2 stream was refused unprocessed (`REFUSED_STREAM`).
fn refused(e: &hyper::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(h2) = c.downcast_ref::<h2::Error>() {
            return h2.reason() == Some(h2::Reason::REFUSED_STREAM);
        }
        cause = c.source();
    }
    false
}

/// How an exchange failed: no connection, or the exchange on one.
#[derive(Debug)]
enum Exchange {
    Connect(Error),
    Failed(hyper::Error),
    /// The own engine's exchange (`h1`): its error says what failed.
    Own(Error),
}

impl From<Error> for Exchange {
    fn from(e: Error) -> Exchange {
        Exchange::Own(e)
    }
}

/// Who is to blame for a failed exchange: the client if its body failed (hyper then reports
/// an error of its own, which says nothing about the upstream), else the upstream.
/// Room for one more connection being made to the region (`Connects::start`): `None` when
/// the caller counts none (a health check). Errors: `Shed(PendingConnects)`: the region
/// has `limits.region_max_pending_connects` connections being made.
pub fn connect_slot(connects: Option<Connects<'_>>) -> Result<Option<ConnectSlot>, Error> {
    let Some(connects) = connects else {
        return Ok(None);
    };
    match connects.start() {
        Some(slot) => Ok(Some(slot)),
        None => Err(Error::new(
            ErrorKind::Shed(ShedReason::PendingConnects),
            format!(
                "{} connections to the region are being made, its limit \
                 (limits.region_max_pending_connects)",
                connects.max
            ),
        )),
    }
}

fn classify(
    result: Result<Response<Inbound>, Exchange>,
    watch: Option<&BodyWatch>,
) -> Result<Response<Inbound>, Error> {
    let e = match result {
        Ok(resp) => return Ok(resp),
        Err(Exchange::Connect(e)) => return Err(e),
        Err(Exchange::Own(e)) => e,
        Err(Exchange::Failed(e)) => Error::new(ErrorKind::Reset, describe(&e)),
    };
    if let Some(failure) = watch.and_then(BodyWatch::failure) {
        return Err(Error::new(failure.kind, failure.detail.clone()));
    }
    Err(e)
}

/// A one-line reason: the innermost cause (e.g. "Connection reset by peer (os error 104)").
fn describe(e: &hyper::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    format!("{cause}")
}
