//! Talking to upstreams: pools, balancing, health, retries (SPEC §6, last bullet).
//!
//! Each upstream (`host:port`) has its own [`UpstreamState`]: pooled HTTP/1.1 clients and a
//! health record. Separate clients mean separate pools and pool locks, so a slow or dead
//! upstream cannot hold up another region's requests. There is one client per worker thread
//! (`crate::workers`), made on first use there, so a pooled connection is only ever used by
//! the thread whose event loop drives it. States live in a [`Registry`] keyed by
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

pub mod body;
pub mod budget;
pub mod check;
pub mod forward;
pub mod health;
pub mod regions;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::Bytes;
use http::uri::Authority;
use http::{HeaderValue, Request, Response, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::{CheckPolicy, Timeouts};
use crate::error::{Error, ErrorKind};
use body::{BodyWatch, IdleTimeout, Watched};
use health::Health;

/// A request body on its way upstream: the client's, streamed (with an idle timeout, reporting
/// to a [`body::BodyWatch`]), or bytes the router holds (a GraphQL body it read, or a small
/// body kept for a retry).
pub type UpstreamBody = Either<Watched<IdleTimeout<Incoming>>, Full<Bytes>>;

/// One upstream's pool and health, shared by every table that lists it.
#[derive(Debug)]
pub struct UpstreamState {
    /// `host:port`.
    pub authority: Authority,
    /// `host:port` as a `Host` value, made once.
    pub host: HeaderValue,
    /// One client (pool) per worker, index [`crate::workers::current`]; slot 0 serves
    /// threads that are no worker.
    clients: Box<[OnceLock<Client<HttpConnector, UpstreamBody>>]>,
    timeouts: Timeouts,
    /// Passive (and active) health.
    pub health: Health,
}

impl UpstreamState {
    /// The state of `authority` with room for `workers` worker pools.
    fn new(authority: Authority, timeouts: &Timeouts, workers: usize) -> UpstreamState {
        UpstreamState {
            host: HeaderValue::from_str(authority.as_str())
                .unwrap_or(HeaderValue::from_static("localhost")),
            authority,
            clients: (0..=workers).map(|_| OnceLock::new()).collect(),
            timeouts: *timeouts,
            health: Health::default(),
        }
    }

    /// The calling worker's client, made on its first request.
    fn client(&self) -> &Client<HttpConnector, UpstreamBody> {
        let slot = self
            .clients
            .get(crate::workers::current())
            .unwrap_or(&self.clients[0]);
        slot.get_or_init(|| {
            let mut connector = HttpConnector::new();
            connector.set_connect_timeout(Some(self.timeouts.connect()));
            // A proxy writes whole messages; Nagle would only add latency.
            connector.set_nodelay(true);
            Client::builder(TokioExecutor::new())
                .pool_idle_timeout(self.timeouts.idle())
                .pool_timer(TokioTimer::new())
                // `Host` is always set by `proxy::headers::aim`.
                .set_host(false)
                .build(connector)
        })
    }

    /// Sends a request whose URI is already absolute and waits for the response headers;
    /// the body streams afterwards.
    ///
    /// `watch` is the streamed body's (none for a held one, which is sent at once). While it
    /// uploads, there is no response-header timer: a slow but steady upload is fine, a client
    /// that stalls it meets the body's own idle timer (408, the client's), and an upstream
    /// that reads none of it for `idle_ms` is a timeout (the upstream's). The
    /// `response_headers_ms` timer starts when the body has ended (SPEC §6).
    ///
    /// Errors: the client's, when its body failed (whatever hyper then reports); else
    /// `Connect`, `Reset` or `Timeout`.
    ///
    /// `Caller` is not used: each caller's type makes its own copy of this function, so that
    /// the proxied path's copy has one caller and is inlined into it (measured: shared with
    /// the fan-out paths, it was not, at +390 instructions per proxied request).
    pub async fn send<Caller>(
        &self,
        mut req: Request<UpstreamBody>,
        watch: Option<&BodyWatch>,
    ) -> Result<Response<Incoming>, Error> {
        // Upstreams speak HTTP/1.1 whatever the client spoke.
        *req.version_mut() = Version::HTTP_11;
        let sent = self.client().request(req);
        tokio::pin!(sent);
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

/// Who is to blame for a failed exchange: the client if its body failed (hyper then reports
/// an error of its own, which says nothing about the upstream), else the upstream.
fn classify(
    result: Result<Response<Incoming>, hyper_util::client::legacy::Error>,
    watch: Option<&BodyWatch>,
) -> Result<Response<Incoming>, Error> {
    let e = match result {
        Ok(resp) => return Ok(resp),
        Err(e) => e,
    };
    if let Some(failure) = watch.and_then(BodyWatch::failure) {
        return Err(Error::new(failure.kind, failure.detail.clone()));
    }
    let kind = if e.is_connect() {
        ErrorKind::Connect
    } else {
        ErrorKind::Reset
    };
    Err(Error::new(kind, describe(&e)))
}

/// A one-line reason: the innermost cause (e.g. "Connection refused (os error 111)").
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

/// Upstream states by authority, shared across table reloads.
#[derive(Debug)]
pub struct Registry {
    timeouts: Timeouts,
    workers: usize,
    checks: Option<CheckPolicy>,
    states: Mutex<HashMap<Authority, Weak<UpstreamState>>>,
}

impl Registry {
    /// A registry whose clients use `timeouts`, with active checks if `checks` is set, for a
    /// router of `workers` worker threads.
    pub fn new(timeouts: Timeouts, checks: Option<CheckPolicy>, workers: usize) -> Registry {
        Registry {
            timeouts,
            workers,
            checks,
            states: Mutex::new(HashMap::new()),
        }
    }

    /// The state of `authority`: the existing one while any table holds it, else a new one
    /// (which starts its active check, if configured and inside a runtime).
    pub fn get(&self, authority: &Authority) -> Arc<UpstreamState> {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(state) = states.get(authority).and_then(Weak::upgrade) {
            return state;
        }
        states.retain(|_, w| w.strong_count() > 0);
        let state = Arc::new(UpstreamState::new(
            authority.clone(),
            &self.timeouts,
            self.workers,
        ));
        states.insert(authority.clone(), Arc::downgrade(&state));
        if let Some(policy) = self.checks.clone() {
            check::spawn(Arc::downgrade(&state), policy);
        }
        state
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new(Timeouts::default(), None, 1)
    }
}
