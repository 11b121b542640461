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

pub mod body;
pub mod budget;
pub mod check;
pub mod forward;
pub mod health;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};

use bytes::Bytes;
use http::uri::Authority;
use http::{HeaderValue, Request, Response, Version};
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::Timeouts;
use body::IdleTimeout;
use health::Health;

/// A request body on its way upstream: the client's, streamed (with an idle timeout), or
/// bytes the router holds (a GraphQL body it read, or a small body kept for a retry).
pub type UpstreamBody = Either<IdleTimeout<Incoming>, Full<Bytes>>;

/// How sending one request to one upstream failed.
#[derive(Debug)]
pub enum SendError {
    /// No connection: refused, unreachable, connect timeout. Nothing was sent.
    Connect(String),
    /// The connection failed after the request was (maybe) sent, before response headers.
    Reset(String),
    /// No response headers within `timeouts.response_headers_ms`.
    TimedOut,
}

impl SendError {
    /// The metric label: `connect`, `reset`, `timeout`.
    pub fn kind(&self) -> &'static str {
        match self {
            SendError::Connect(_) => "connect",
            SendError::Reset(_) => "reset",
            SendError::TimedOut => "timeout",
        }
    }
}

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
    pub async fn send(
        &self,
        mut req: Request<UpstreamBody>,
    ) -> Result<Response<Incoming>, SendError> {
        // Upstreams speak HTTP/1.1 whatever the client spoke.
        *req.version_mut() = Version::HTTP_11;
        match tokio::time::timeout(self.timeouts.response_headers(), self.client().request(req))
            .await
        {
            Err(_) => Err(SendError::TimedOut),
            Ok(Ok(resp)) => Ok(resp),
            Ok(Err(e)) if e.is_connect() => Err(SendError::Connect(describe(&e))),
            Ok(Err(e)) => Err(SendError::Reset(describe(&e))),
        }
    }
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
    checks: Option<check::CheckPolicy>,
    states: Mutex<HashMap<Authority, Weak<UpstreamState>>>,
}

impl Registry {
    /// A registry whose clients use `timeouts`, with active checks if `checks` is set, for a
    /// router of `workers` worker threads.
    pub fn new(timeouts: Timeouts, checks: Option<check::CheckPolicy>, workers: usize) -> Registry {
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
