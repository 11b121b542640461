//! HTTP/3 (RFC 9114) on QUIC (RFC 9000), docs/http3.md: one more codec under the request's
//! life. Each request's `http` parts and body go to [`Proxy::handle`](crate::proxy::Proxy::handle), as an HTTP/2 stream's
//! do (`server/h2.rs`); routing, limits, traces, logs and the attempt loop are theirs.
//!
//! - **Sockets** (`socket.rs`): one UDP socket per worker in a `SO_REUSEPORT` group on the
//!   TLS listener's address, each with its own quinn endpoint on its worker's runtime, so
//!   that a connection, its requests and their upstream connections stay on one thread
//!   (`crate::workers`). Connection ids carry the worker, and the group steers packets by
//!   them: a client that changes address (connection migration, a NAT rebinding; quinn
//!   validates the new path, RFC 9000 §8.2) stays on its worker. quinn sends and receives
//!   with GSO and GRO where the kernel has them.
//! - **Admission**: a worker with `http3.max_handshakes` handshakes in progress asks a new
//!   client to prove its address with a Retry first (stateless); at 4× it refuses.
//! - **0-RTT** (`early.rs`): a resumed client's early data is read before the handshake
//!   completes; a safe method is forwarded at once with `Early-Data: 1` (RFC 8470), any
//!   other waits for the handshake (whose completion proves it is no replay).
//! - **Limits**: streams per connection (`http3.max_streams`, QUIC's own stream credit),
//!   the header section (`limits.max_header_bytes`, QPACK's decoded size), flow-control
//!   windows that bound what a connection buffers, a connection with no request for
//!   `timeouts.idle_ms` closed with GOAWAY, a stream whose client stops reading or sending
//!   for `idle_ms` reset, and a connection whose client cancels more than `max_streams`
//!   streams in a second (HTTP/2's Rapid Reset, CVE-2023-44487, over QUIC) closed.
//! - **Drain**: on shutdown each connection sends GOAWAY and finishes what it accepted.

mod early;
pub mod socket;
mod stream;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use super::Shared;
use crate::config::Http3Settings;
use crate::metrics::http3::{self as m, Handshake};
use crate::workers::Workers;
use early::Early;
use stream::Ended;

/// H3_NO_ERROR (RFC 9114 §8.1).
const NO_ERROR: u32 = 0x100;
/// H3_EXCESSIVE_LOAD (RFC 9114 §8.1): the peer generates too much load.
const EXCESSIVE_LOAD: u32 = 0x107;

/// What the QUIC listener needs beyond the TCP listener's: its TLS, its settings and where.
#[derive(Debug, Clone)]
pub struct Quic {
    /// The QUIC TLS context (`crate::tls::quic_server_config`).
    pub tls: crate::tls::QuicTls,
    /// `http3:`.
    pub settings: Http3Settings,
    /// The TLS listener's address: the UDP port is the same.
    pub addr: SocketAddr,
    /// The TCP sockets were taken over from a running router (docs/upgrades.md): its UDP
    /// sockets are not handed over, so the group is bound once they are closed.
    pub after_previous: bool,
}

/// Starts an endpoint on each worker, on the UDP sockets bound here; after an upgrade,
/// bound once the previous router has closed its own (see [`wait_and_bind`]).
///
/// Errors: the UDP port cannot be bound.
pub(super) fn start(quic: &Quic, workers: &Workers, shared: &Arc<Shared>) -> std::io::Result<()> {
    let mut sockets = Vec::with_capacity(workers.len());
    for index in 0..workers.len() {
        let (tx, rx) = tokio::sync::oneshot::channel::<std::net::UdpSocket>();
        sockets.push(tx);
        let (quic, shared) = (quic.clone(), shared.clone());
        let mut draining = shared.draining.clone();
        workers.spawn_on(index, async move {
            tokio::select! {
                socket = rx => if let Ok(socket) = socket {
                    endpoint(index, socket, quic, shared).await;
                },
                _ = async { draining.wait_for(|d| *d).await.is_ok() } => {}
            }
        });
    }
    if quic.after_previous {
        tokio::spawn(wait_and_bind(quic.addr, sockets, shared.draining.clone()));
        return Ok(());
    }
    hand(
        socket::bind_group(quic.addr, workers.len())?,
        sockets,
        quic.addr,
    );
    Ok(())
}

/// Gives socket `i` of `group` to worker `i` (a group of one, without steering, to the first).
fn hand(
    group: Vec<std::net::UdpSocket>,
    workers: Vec<tokio::sync::oneshot::Sender<std::net::UdpSocket>>,
    addr: SocketAddr,
) {
    tracing::info!(%addr, sockets = group.len(), "HTTP/3 listening (UDP)");
    for (socket, worker) in group.into_iter().zip(workers) {
        let _ = worker.send(socket);
    }
}

/// After an upgrade: binds the group once no socket of the previous router is left on the
/// port. Joining its `SO_REUSEPORT` group instead would split datagrams between the two
/// processes (one's connections reset by the other), and the kernel, filling each closed
/// socket's slot with the group's last, would leave the steering's worker numbers pointing
/// at other workers. Until then HTTP/3 clients fall back to TCP, which the `Alt-Svc` they
/// hold allows (RFC 7838 §2.4).
async fn wait_and_bind(
    addr: SocketAddr,
    workers: Vec<tokio::sync::oneshot::Sender<std::net::UdpSocket>>,
    mut draining: tokio::sync::watch::Receiver<bool>,
) {
    tracing::info!(%addr, "HTTP/3 waits for the previous router's UDP sockets to close");
    // A plain bind fails while any socket, in a reuseport group or not, holds the port.
    while std::net::UdpSocket::bind(addr).is_err() {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = async { draining.wait_for(|d| *d).await.is_ok() } => return,
        }
    }
    match socket::bind_group(addr, workers.len()) {
        Ok(group) => hand(group, workers, addr),
        Err(e) => tracing::error!(%addr, error = %e, "HTTP/3 could not listen"),
    }
}

/// The transport limits of every connection (see the module docs).
fn transport(settings: &Http3Settings, idle: Duration) -> quinn::TransportConfig {
    let mut t = quinn::TransportConfig::default();
    t.max_concurrent_bidi_streams(settings.max_streams.into())
        // The client's control and QPACK streams (RFC 9114 §6.2), and room for grease.
        .max_concurrent_uni_streams(8u32.into())
        // QUIC's own idle timeout (silent: no CONNECTION_CLOSE) only after the router's
        // GOAWAY has had its chance, as HTTP/2's GOAWAY grace does.
        .max_idle_timeout((idle * 2).try_into().ok())
        // Per stream and per connection, what a client may have in flight to the router:
        // bounded memory per connection whatever it opens.
        .stream_receive_window((256u32 << 10).into())
        .receive_window((4u32 << 20).into())
        .send_window(4 << 20);
    t
}

/// One worker's endpoint: accepts connections until the drain, then lets them finish.
async fn endpoint(index: usize, socket: std::net::UdpSocket, quic: Quic, shared: Arc<Shared>) {
    let idle = shared.settings.idle;
    let mut server = quinn::ServerConfig::with_crypto(quic.tls.0.clone());
    server
        .transport_config(Arc::new(transport(&quic.settings, idle)))
        .migration(true)
        .max_incoming(quic.settings.max_handshakes.saturating_mul(8).max(64));
    let mut config = quinn::EndpointConfig::default();
    config.cid_generator(move || Box::new(socket::WorkerCids::new(index)));
    let runtime = Arc::new(quinn::TokioRuntime);
    let endpoint = match quinn::Endpoint::new(config, Some(server), socket, runtime) {
        Ok(endpoint) => endpoint,
        Err(e) => {
            tracing::error!(error = %e, "an HTTP/3 endpoint could not start");
            return;
        }
    };
    let handshakes = Arc::new(AtomicUsize::new(0));
    let max = quic.settings.max_handshakes;
    let mut draining = shared.draining.clone();
    loop {
        let incoming = tokio::select! {
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => incoming,
                None => break,
            },
            _ = async { draining.wait_for(|d| *d).await.is_ok() } => break,
        };
        let now = handshakes.load(Ordering::Relaxed);
        if now >= max && !incoming.remote_address_validated() && incoming.may_retry() {
            m::handshake(Handshake::Retry);
            let _ = incoming.retry();
            continue;
        }
        if now >= max.saturating_mul(4) {
            m::handshake(Handshake::Refused);
            incoming.refuse();
            continue;
        }
        match incoming.accept() {
            Ok(connecting) => {
                m::handshake(Handshake::Accepted);
                let counted = Handshaking::new(&handshakes);
                let settings = quic.settings;
                tokio::spawn(connection(connecting, counted, settings, shared.clone()));
            }
            Err(e) => {
                m::handshake(Handshake::Failed);
                tracing::debug!(error = %e, "a QUIC connection attempt failed");
            }
        }
    }
    // New connections are refused from now (CONNECTION_CLOSE, so that a client falls back to
    // TCP at once); those open drain in their own tasks.
    drop(shared);
    loop {
        tokio::select! {
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => {
                    m::handshake(Handshake::Refused);
                    incoming.refuse();
                }
                None => break,
            },
            () = endpoint.wait_idle() => break,
        }
    }
}

/// Counts a handshake in progress on its worker until it completes or fails.
struct Handshaking(Option<Arc<AtomicUsize>>);

impl Handshaking {
    fn new(count: &Arc<AtomicUsize>) -> Handshaking {
        count.fetch_add(1, Ordering::Relaxed);
        Handshaking(Some(count.clone()))
    }

    fn done(&mut self) {
        if let Some(count) = self.0.take() {
            count.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.done();
    }
}

/// Streams a client may cancel per second before its connection is closed, as a multiple of
/// `max_streams` (the bucket's size and its refill per second).
struct ResetBudget {
    tokens: f64,
    per_s: f64,
    at: Instant,
}

impl ResetBudget {
    fn new(max_streams: u32) -> ResetBudget {
        let per_s = f64::from(max_streams);
        ResetBudget {
            tokens: per_s,
            per_s,
            at: Instant::now(),
        }
    }

    /// Spends one cancelled stream; false once the budget is gone.
    fn spend(&mut self) -> bool {
        let now = Instant::now();
        let refill = now.duration_since(self.at).as_secs_f64() * self.per_s;
        self.tokens = (self.tokens + refill).min(self.per_s);
        self.at = now;
        self.tokens -= 1.0;
        self.tokens >= 0.0
    }
}

/// One QUIC connection: its handshake (early data read while it runs), then its requests,
/// polled in the connection's task, until the client closes it, it idles, or the listener
/// drains.
async fn connection(
    connecting: quinn::Connecting,
    mut handshaking: Handshaking,
    settings: Http3Settings,
    shared: Arc<Shared>,
) {
    let _open = shared.open.clone();
    let header_timeout = shared.settings.header_timeout;
    let idle = shared.settings.idle;
    // A forwarded client certificate is read from the completed handshake: no early data.
    let early_ok = settings.zero_rtt && !shared.settings.forward_client_cert;
    let (conn, handshake) = match connecting.into_0rtt() {
        Ok((conn, accepted)) if early_ok => (conn, Some(accepted)),
        Ok((conn, accepted)) => match tokio::time::timeout(header_timeout, accepted).await {
            // quinn resolves it whether 0-RTT was accepted, or false once the connection
            // failed: its close reason tells the two apart.
            Ok(_) if conn.close_reason().is_some() => return handshake_failed(&conn, "failed"),
            Ok(_) => (conn, None),
            Err(_) => return handshake_failed(&conn, "not done within the header read timeout"),
        },
        Err(connecting) => match tokio::time::timeout(header_timeout, connecting).await {
            Ok(Ok(conn)) => (conn, None),
            _ => {
                m::handshake(Handshake::Failed);
                return;
            }
        },
    };
    let early = Arc::new(Early::new(handshake.is_none()));
    if handshake.is_none() {
        handshaking.done();
    }
    // One per connection: its fan-outs in flight are bounded together
    // (`limits.fanout_per_connection`). A migrated connection keeps its first address.
    let mut addr = shared.conn(conn.remote_address()).addr;
    if shared.settings.forward_client_cert {
        addr.client_cert = client_certificate(&conn);
    }
    let addr = Arc::new(addr);
    let h3 = ::h3::server::builder()
        .max_field_section_size(u64::from(shared.settings.max_header_list_size))
        .build::<_, bytes::Bytes>(h3_quinn::Connection::new(conn.clone()))
        .await;
    let mut h3 = match h3 {
        Ok(h3) => h3,
        Err(e) => {
            tracing::debug!(error = %e, "HTTP/3 connection setup failed");
            return;
        }
    };
    let mut handshake = handshake.map(|h| Box::pin(tokio::time::timeout(header_timeout, h)));
    // The connection's requests, polled in its task as hyper polls an HTTP/2 connection's
    // streams: a request wakes this task, not a task of its own.
    let mut requests: FuturesUnordered<Pin<Box<dyn Future<Output = Ended> + Send>>> =
        FuturesUnordered::new();
    let mut resets = ResetBudget::new(settings.max_streams);
    let mut draining = shared.draining.clone();
    let timer = tokio::time::sleep(idle);
    tokio::pin!(timer);
    let mut last_end = Instant::now();
    loop {
        tokio::select! {
            biased;
            // First: a request read after the handshake completed is never taken for early.
            done = async {
                match handshake.as_mut() {
                    Some(handshake) => handshake.await,
                    None => std::future::pending().await,
                }
            }, if handshake.is_some() =>
            {
                handshake = None;
                handshaking.done();
                match done {
                    Ok(_) if conn.close_reason().is_some() => {
                        return handshake_failed(&conn, "failed")
                    }
                    Ok(_) => {}
                    Err(_) => {
                        return handshake_failed(&conn, "not done within the header read timeout")
                    }
                }
                early.complete();
            }
            // Before new streams: what is under way finishes first.
            Some(ended) = requests.next(), if !requests.is_empty() => {
                last_end = Instant::now();
                if ended == Ended::ClientReset && !resets.spend() {
                    m::closed(false);
                    tracing::debug!(client = %conn.remote_address(), "HTTP/3 streams reset faster than max_streams per second; closed");
                    conn.close(EXCESSIVE_LOAD.into(), b"too many streams reset");
                    return;
                }
            }
            accepted = h3.accept() => match accepted {
                Ok(Some(resolver)) => {
                    let request = stream::Request {
                        proxy: shared.proxy.clone(),
                        addr: addr.clone(),
                        early: early.clone(),
                        idle,
                        header_timeout,
                    };
                    requests.push(Box::pin(request.serve(resolver)));
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(error = %e, "HTTP/3 connection ended");
                    break;
                }
            },
            () = timer.as_mut() => {
                let until = last_end + idle;
                if requests.is_empty() && until <= Instant::now() {
                    m::closed(true);
                    tracing::debug!(client = %conn.remote_address(), "HTTP/3 connection idle; GOAWAY");
                    let _ = tokio::time::timeout(super::h2::goaway_grace(idle), h3.shutdown(0)).await;
                    conn.close(NO_ERROR.into(), b"idle");
                    return;
                }
                timer.as_mut().reset(if requests.is_empty() { until } else { Instant::now() + idle });
            }
            _ = async { draining.wait_for(|d| *d).await.is_ok() } => {
                // Bounded: the requests under way are not polled meanwhile.
                let _ = tokio::time::timeout(super::h2::goaway_grace(idle), h3.shutdown(0)).await;
                break;
            }
        }
    }
    // Finish what was accepted (the drain's grace bounds it from outside), then close.
    while requests.next().await.is_some() {}
    conn.close(NO_ERROR.into(), b"");
}

/// Counts and closes a connection whose handshake did not complete.
fn handshake_failed(conn: &quinn::Connection, why: &str) {
    m::handshake(Handshake::Failed);
    tracing::debug!(client = %conn.remote_address(), why, "QUIC handshake failed");
    conn.close(NO_ERROR.into(), b"");
}

/// The verified client certificate's `X-Forwarded-Client-Cert` value, from the handshake.
fn client_certificate(conn: &quinn::Connection) -> Option<http::HeaderValue> {
    let identity = conn.peer_identity()?;
    let chain = identity
        .downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
        .ok()?;
    crate::tls::peer::forwarded_client_cert(chain.first()?)
}
