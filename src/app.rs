//! One way to start the router: [`App`] wires the config, the live routing table, the
//! upstream runtime, the data path, the admin API, table reloads (file watch, `SIGHUP`,
//! `POST /admin/reload`) and graceful shutdown (docs/cli.md, §7, §8). `serve`, `demo` and the
//! integration tests all start it, so what one exercises the others run.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::admin::{self, AdminState};
use crate::config::RouterConfig;
use crate::proxy::route::Routes;
use crate::proxy::Proxy;
use crate::server::{self, Drain};
use crate::source::SourceErrors;
use crate::table::{watch, LiveTable};
use crate::tls::Certificates;
use crate::trace::Tracing;
use crate::upgrade::{self, Handover, Handshake, Listeners, Origin};
use crate::upstream::regions::Regions;
use crate::upstream::Registry;
use axum::serve::ListenerExt;

/// Why the router could not start or stopped with an error.
#[derive(Debug)]
pub enum StartError {
    /// A route of the config is invalid (every error, with file:line:column).
    Routes(SourceErrors),
    /// The routing table is invalid (every error, with file:line:column).
    Table(SourceErrors),
    /// A listener could not be bound, or the worker threads could not start.
    Io(std::io::Error),
    /// The routing table's directory cannot be watched.
    Watch(watch::WatchError),
    /// The listener's TLS certificates cannot be loaded or watched.
    Tls(String),
    /// The listening sockets cannot be opened, passed or taken over (docs/upgrades.md).
    Listen(String),
    /// The trace export cannot start (docs/traces.md).
    Tracing(String),
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Routes(e) | StartError::Table(e) => write!(f, "{e}"),
            StartError::Io(e) => write!(f, "{e}"),
            StartError::Watch(e) => write!(f, "{e}"),
            StartError::Tls(e) => write!(f, "TLS: {e}"),
            StartError::Listen(e) => write!(f, "{e}"),
            StartError::Tracing(e) => write!(f, "tracing: {e}"),
        }
    }
}

impl std::error::Error for StartError {}

impl From<std::io::Error> for StartError {
    fn from(e: std::io::Error) -> Self {
        StartError::Io(e)
    }
}

/// The router, loaded and ready to run: config, live table and upstream runtime.
#[derive(Debug)]
pub struct App {
    config: RouterConfig,
    routes: Routes,
    table: Arc<LiveTable>,
    regions: Arc<Regions>,
    tls: Option<Tls>,
}

/// The listener's TLS: its certificates (reloaded, reported) and the rustls config over them.
#[derive(Debug)]
struct Tls {
    certs: Arc<Certificates>,
    config: Arc<rustls::ServerConfig>,
    /// With `http3:`, the QUIC listener's TLS over the same certificates.
    quic: Option<crate::tls::QuicTls>,
}

impl App {
    /// Loads the routing table `config` names and sets up the upstream runtime. Call inside a
    /// tokio runtime (active health checks start with their upstreams).
    ///
    /// Errors: a route is invalid ([`StartError::Routes`]), the table is invalid
    /// ([`StartError::Table`]).
    pub fn new(config: RouterConfig) -> Result<App, StartError> {
        // The recorder first, so that the first load is counted too.
        crate::metrics::handle();
        let table = Arc::new(LiveTable::load(&config.routing_table).map_err(StartError::Table)?);
        // Routes name schemes the table declares; a table without one is never installed.
        let routes = Routes::for_config(&config).map_err(StartError::Routes)?;
        let uses = routes.scheme_uses().clone();
        table
            .require(move |t| uses.check(&t.scheme_names(), &t.timeless_schemes()))
            .map_err(StartError::Table)?;
        let registry = Arc::new(
            Registry::new(config.timeouts, config.health_check.clone(), config.workers)
                .with_answer_head(crate::upstream::raw::AnswerHead::of(&config.limits)),
        );
        let regions = Regions::new(&table, registry);
        let http3 = config.http3;
        let tls = match &config.tls {
            None => None,
            Some(settings) => {
                let certs =
                    Certificates::load(settings.certificates.clone(), settings.client_auth.clone())
                        .map_err(StartError::Tls)?;
                let config = crate::tls::server_config(certs.clone(), settings.min_version)
                    .map_err(StartError::Tls)?;
                let quic = match http3 {
                    Some(http3) => Some(
                        crate::tls::quic_server_config(certs.clone(), http3.zero_rtt)
                            .map_err(StartError::Tls)?,
                    ),
                    None => None,
                };
                Some(Tls {
                    certs,
                    config,
                    quic,
                })
            }
        };
        Ok(App {
            config,
            routes,
            table,
            regions,
            tls,
        })
    }

    /// The live routing table (to reload it, or read its status).
    pub fn table(&self) -> &Arc<LiveTable> {
        &self.table
    }

    /// Runs the router on `listener` (and the admin API on `admin`, if given) until
    /// `shutdown` completes, then drains (docs/admin.md order: `/readyz` 503, wait
    /// `drain_delay_ms`, close the listener, let requests in flight finish within
    /// `grace_ms`).
    ///
    /// Errors: the table's directory cannot be watched, or the workers cannot start.
    pub async fn run(
        self,
        listener: TcpListener,
        admin: Option<TcpListener>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), StartError> {
        let listeners = Listeners {
            public: vec![listener.into_std()?],
            admin: admin.map(|a| a.into_std()).transpose()?,
            upgrade: None,
            origin: Origin::Bound,
        };
        self.run_on(listeners, None, shutdown).await
    }

    /// Runs the router on `listeners` until `shutdown` completes (then drains as [`App::run`]
    /// says) or, with an upgrade socket, until a new process took the sockets over (then
    /// it stops accepting and drains the connections it has, docs/upgrades.md). With
    /// `handshake` (this process took them over itself), the old process is told to drain
    /// once this one serves.
    ///
    /// Errors: as [`App::run`], or a socket cannot be duplicated or registered.
    pub async fn run_on(
        self,
        listeners: Listeners,
        handshake: Option<Handshake>,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), StartError> {
        let App {
            config,
            routes,
            table,
            regions,
            tls,
        } = self;
        crate::metrics::spawn_upkeep(Duration::from_secs(1));
        let _watch = if config.reload.watch {
            let debounce = Duration::from_millis(config.reload.debounce_ms);
            Some(watch::watch(table.clone(), debounce).map_err(StartError::Watch)?)
        } else {
            None
        };
        let _tls_watch = match (&tls, config.reload.watch) {
            (Some(tls), true) => {
                let debounce = Duration::from_millis(config.reload.debounce_ms);
                Some(
                    crate::tls::watch::watch(tls.certs.clone(), debounce)
                        .map_err(StartError::Tls)?,
                )
            }
            _ => None,
        };
        let draining = Arc::new(AtomicBool::new(false));
        let group = server::group(
            listeners.public,
            config.workers,
            config.limits.listen_backlog,
        );
        // HTTP/3 listens where the TLS listener does (on the port bound, when 0 was asked).
        let quic_addr = group
            .first()
            .and_then(|s| s.local_addr().ok())
            .unwrap_or(config.listen);
        // Taken over from a running router: its UDP sockets close only when it exits.
        let took_over = handshake.is_some();
        let handover = match listeners.upgrade {
            Some(upgrade) => {
                let sockets = upgrade::duplicates(&group, listeners.admin.as_ref(), &upgrade)?;
                let (_, listener) = upgrade;
                listener.set_nonblocking(true)?;
                let listener = tokio::net::UnixListener::from_std(listener)?;
                Some(Handover::new(sockets, listener))
            }
            None => None,
        };
        let (handed_tx, handed_over) = tokio::sync::watch::channel(false);
        // When the hand-over happened: the drain timeout counts from there.
        let handed_at = Arc::new(std::sync::OnceLock::new());
        let handed_at_set = handed_at.clone();
        let mut admin_open = None;
        let rate_limits = crate::ratelimit::RateLimits::start(&config);
        let owners = Arc::new(crate::upstream::owners::Owners::for_config(&config));
        if let Some(admin) = listeners.admin {
            admin.set_nonblocking(true)?;
            let admin =
                upgrade::AdminListener::new(TcpListener::from_std(admin)?, handed_over.clone());
            admin_open = Some(admin.open());
            // `tap_io` for `ConnectInfo`: axum gives it to any listener so wrapped.
            let admin = admin.tap_io(|_| {});
            let state = AdminState {
                table: table.clone(),
                draining: draining.clone(),
                tls: tls.as_ref().map(|t| t.certs.clone()),
                admin: config.admin.clone(),
                regions: Some(regions.clone()),
                rates: Some(admin::rates::Rates::spawn(regions.clone())),
                rate_limits: rate_limits.clone(),
                owners: Some(owners.clone()),
            };
            tokio::spawn(async move {
                // With each client's address, for the admin token throttle.
                let service = upgrade::close_after_handover(admin::router(state), handed_over)
                    .into_make_service_with_connect_info::<std::net::SocketAddr>();
                if let Err(e) = axum::serve(admin, service).await {
                    tracing::error!(error = %e, "admin API stopped");
                }
            });
        }
        // Registered here, not in the task: until the handler exists, SIGHUP's default action
        // would end the process.
        tokio::spawn(reload_on_sighup(hangups(), table.clone()));

        let drain_delay = Duration::from_millis(config.shutdown.drain_delay_ms);
        let grace = Duration::from_millis(config.shutdown.grace_ms);
        let drain_timeout = config.shutdown.drain_timeout();
        let tracing = match &config.tracing {
            Some(settings) => Some(Tracing::start(settings).map_err(StartError::Tracing)?),
            None => None,
        };
        let config = Arc::new(config);
        let http3 = config.http3;
        let alt_svc = http3.is_some().then_some(quic_addr.port());
        let proxy = Proxy::shared(|| {
            Proxy::new(config, routes, regions, tracing, rate_limits, owners).announcing_h3(alt_svc)
        });
        // First polled once the workers accept (`server::serve`): then this process serves.
        let begin_drain = async move {
            if let Some(handshake) = handshake {
                let old_pid = handshake.old_pid;
                match handshake.ready().await {
                    Ok(()) => {
                        tracing::info!(old_pid, "upgraded: serving; the old process drains");
                        announce_upgraded(old_pid);
                    }
                    Err(e) => {
                        tracing::error!(old_pid, error = %e, "upgrade: the old process did not confirm; it may still be serving")
                    }
                }
            }
            upgrade::systemd::notify_ready();
            let handed = async {
                match handover {
                    Some(handover) => handover.serve().await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = shutdown => {
                    draining.store(true, Ordering::Relaxed);
                    tracing::info!("shutting down: /readyz answers 503");
                    tokio::time::sleep(drain_delay).await;
                    Drain::CloseIdle
                }
                () = handed => {
                    // The admin API stops accepting too; `/readyz` stays 200 for the
                    // connections it still has: the router is not going away.
                    let _ = handed_at_set.set(tokio::time::Instant::now());
                    let _ = handed_tx.send(true);
                    Drain::Handover { within: drain_timeout }
                }
            }
        };
        let quic = match (tls.as_ref().and_then(|t| t.quic.clone()), http3) {
            (Some(tls), Some(settings)) => Some(server::h3::Quic {
                tls,
                settings,
                addr: quic_addr,
                after_previous: took_over,
            }),
            _ => None,
        };
        let acceptor = tls.map(|t| tokio_rustls::TlsAcceptor::from(t.config));
        server::serve(group, proxy.clone(), acceptor, quic, begin_drain, grace).await?;
        if proxy.tracing().is_some() {
            // The spans of the last requests, exported before the process ends (the export
            // waits on its thread at most 5 s).
            let proxy = proxy.clone();
            let flushed = tokio::task::spawn_blocking(move || {
                if let Some(tracing) = proxy.tracing() {
                    tracing.shutdown();
                }
            });
            let _ = tokio::time::timeout(Duration::from_secs(6), flushed).await;
        }
        if let (Some(at), Some(open)) = (handed_at.get(), admin_open) {
            // After a hand-over the admin API's connections close after their next
            // response; the process waits for them (within the drain timeout) rather than
            // cut one mid-request.
            open.closed(drain_timeout.saturating_sub(at.elapsed()))
                .await;
        }
        tracing::info!("drained; exiting");
        Ok(())
    }

    /// Opens the configured sockets (docs/upgrades.md: bound, passed by systemd, or, with
    /// `upgrade`, taken over from the running router) and runs until `SIGTERM` or
    /// `SIGINT`, or until a newer process takes them over.
    ///
    /// Errors: as [`App::run_on`], or [`Listeners::open`]'s.
    pub async fn serve(self, upgrade: bool) -> Result<(), StartError> {
        let (listeners, handshake) = Listeners::open(&self.config, upgrade)
            .await
            .map_err(StartError::Listen)?;
        tracing::info!(
            listen = %self.config.listen,
            admin = ?self.config.admin_listen,
            region = %self.config.region,
            sockets = ?listeners.origin,
            "serving"
        );
        self.run_on(listeners, handshake, terminate()).await
    }
}

/// The one line `serve --upgrade` writes to stdout, once it serves: what
/// `iuid-router upgrade` waits for (docs/upgrades.md). Nothing else is written there, so a
/// closed stdout costs nothing.
fn announce_upgraded(old_pid: u32) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "upgraded: pid {} serves, pid {old_pid} drains",
        std::process::id()
    );
    let _ = out.flush();
}

/// Completes on the first `SIGTERM` or `SIGINT` (Ctrl-C).
pub async fn terminate() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "no SIGTERM handler; Ctrl-C only");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// The `SIGHUP` stream, if the platform has one.
#[cfg(unix)]
fn hangups() -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::hangup()) {
        Ok(hup) => Some(hup),
        Err(e) => {
            tracing::warn!(error = %e, "no SIGHUP handler: reload with POST /admin/reload");
            None
        }
    }
}

#[cfg(not(unix))]
fn hangups() -> Option<()> {
    None
}

/// Reloads the table on every `SIGHUP` (docs/routing-table.md#hot-reload).
#[cfg(unix)]
async fn reload_on_sighup(hup: Option<tokio::signal::unix::Signal>, live: Arc<LiveTable>) {
    let Some(mut hup) = hup else { return };
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading the routing table");
        let _ = live.reload().await;
    }
}

#[cfg(not(unix))]
async fn reload_on_sighup(_: Option<()>, _: Arc<LiveTable>) {}
