//! Reloading the listener's certificates when their files change (SPEC §12).
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

use notify_debouncer_mini::notify::{RecommendedWatcher, RecursiveMode};
use notify_debouncer_mini::{new_debouncer, DebounceEventResult, Debouncer};
use tokio::sync::mpsc;

use super::Certificates;

/// Keeps the watch alive; dropping it stops watching.
pub struct Watch {
    _debouncer: Debouncer<RecommendedWatcher>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("tls::Watch")
    }
}

/// Starts watching the directories of `certs`' files; must be called inside a tokio runtime.
///
/// Errors: a directory cannot be watched (`notify`'s reason, with the directory).
pub fn watch(certs: Arc<Certificates>, debounce: Duration) -> Result<Watch, String> {
    let dirs: BTreeSet<PathBuf> = certs
        .files()
        .iter()
        .flat_map(|f| [&f.cert, &f.key])
        .map(|p| match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        })
        .collect();
    // Capacity 1: events during a pending reload fold into it.
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut debouncer = new_debouncer(debounce, move |events: DebounceEventResult| match events {
        Ok(_) => {
            let _ = tx.try_send(());
        }
        Err(e) => tracing::warn!(error = %e, "certificate watch error"),
    })
    .map_err(|e| e.to_string())?;
    for dir in &dirs {
        debouncer
            .watcher()
            .watch(dir, RecursiveMode::NonRecursive)
            .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
    }
    tokio::spawn(async move {
        while rx.recv().await.is_some() {
            match certs.reload() {
                Ok(()) => tracing::info!("TLS certificates reloaded"),
                Err(e) => {
                    tracing::error!(error = %e, "TLS certificates not reloaded; the ones in use are kept")
                }
            }
        }
    });
    Ok(Watch {
        _debouncer: debouncer,
    })
}
