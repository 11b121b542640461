//! `iuid-router serve`: the router, its admin API, table reloads and graceful shutdown, wired
//! together (SPEC §3, §7, §8).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::admin::{self, AdminState};
use crate::config::RouterConfig;
use crate::proxy::Proxy;
use crate::server;
use crate::table::{watch, LiveTable};
use crate::upstream::Registry;

/// A boxed error for the command line.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Runs the router on `listener` (and the admin API on `admin`, if given) until `shutdown`
/// completes, then drains (SPEC §8 order: `/readyz` 503, wait `drain_delay_ms`, close the
/// listener, let requests in flight finish within `grace_ms`). Returns the live table when
/// it is loaded, through `on_ready`, so callers can reload it.
pub async fn run(
    config: RouterConfig,
    listener: TcpListener,
    admin: Option<TcpListener>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    // The recorder first, so that the first load is counted too.
    crate::metrics::handle();
    crate::metrics::spawn_upkeep(Duration::from_secs(1));
    let registry = Arc::new(Registry::new(
        config.timeouts,
        config.health_check.clone(),
        config.workers,
    ));
    let live = Arc::new(LiveTable::load(&config.routing_table, registry)?);
    let _watch = if config.reload.watch {
        let debounce = Duration::from_millis(config.reload.debounce_ms);
        Some(watch::watch(live.clone(), debounce)?)
    } else {
        None
    };
    let draining = Arc::new(AtomicBool::new(false));
    if let Some(admin) = admin {
        let state = AdminState {
            table: live.clone(),
            draining: draining.clone(),
        };
        tokio::spawn(async move {
            if let Err(e) = axum::serve(admin, admin::router(state)).await {
                tracing::error!(error = %e, "admin API stopped");
            }
        });
    }
    // Registered here, not in the task: until the handler exists, SIGHUP's default action
    // would end the process.
    tokio::spawn(reload_on_sighup(hangups(), live.clone()));

    let drain_delay = Duration::from_millis(config.shutdown.drain_delay_ms);
    let grace = Duration::from_millis(config.shutdown.grace_ms);
    let proxy = Arc::new(Proxy::new(Arc::new(config), live));
    let begin_drain = async move {
        shutdown.await;
        draining.store(true, Ordering::Relaxed);
        tracing::info!("shutting down: /readyz answers 503");
        tokio::time::sleep(drain_delay).await;
    };
    server::serve(listener, proxy, begin_drain, grace).await?;
    tracing::info!("drained; exiting");
    Ok(())
}

/// `iuid-router serve`: binds the configured addresses and runs until `SIGTERM` or `SIGINT`.
pub async fn serve(config: RouterConfig) -> Result<(), Error> {
    let listener = server::bind(config.listen, config.limits.listen_backlog).await?;
    let admin = match config.admin_listen {
        Some(addr) => Some(server::bind(addr, crate::config::DEFAULT_BACKLOG).await?),
        None => None,
    };
    tracing::info!(
        listen = %listener.local_addr()?,
        admin = ?config.admin_listen,
        region = %config.region,
        "serving"
    );
    run(config, listener, admin, terminate()).await
}

/// Completes on the first `SIGTERM` or `SIGINT` (Ctrl-C).
async fn terminate() {
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

/// Reloads the table on every `SIGHUP` (SPEC §7).
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
