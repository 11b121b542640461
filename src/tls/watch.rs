//! Reloading the listener's certificates when their files change (docs/tls-h2-grpc.md).
//!
//! As with the routing table (`crate::table::watch`), the watch is on the files'
//! *directories*: certificate managers (cert-manager's Secret volumes, certbot's renewals)
//! replace files by rename or symlink swap, which a watch on the file itself would miss.
//! Any event in one of those directories triggers a reload after the debounce; a reload that
//! fails keeps the certificates in use and is logged and counted.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::Certificates;

pub use crate::watch::Watch;

/// Starts watching the directories of `certs`' files; must be called inside a tokio runtime.
///
/// Errors: a directory cannot be watched (`notify`'s reason, with the directory).
pub fn watch(certs: Arc<Certificates>, debounce: Duration) -> Result<Watch, String> {
    let dirs: BTreeSet<PathBuf> = certs
        .files()
        .into_iter()
        .map(crate::watch::dir_of)
        .collect();
    let watch = crate::watch::on_change(dirs, debounce, move || {
        let certs = certs.clone();
        async move {
            // Reading and parsing PEM files is blocking work: off the runtime's threads.
            let reloaded = tokio::task::spawn_blocking(move || certs.reload())
                .await
                .unwrap_or_else(|e| Err(format!("reload task failed: {e}")));
            match reloaded {
                Ok(()) => tracing::info!("TLS certificates reloaded"),
                Err(e) => {
                    tracing::error!(error = %e, "TLS certificates not reloaded; the ones in use are kept")
                }
            }
        }
    })
    .map_err(|e| e.to_string())?;
    Ok(watch)
}
