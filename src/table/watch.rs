//! Reloading the routing table when its file changes (SPEC §7).
//!
//! The watch is on the file's *directory*, not the file: an editor that saves by writing a
//! new file and renaming it over the old one, and a Kubernetes ConfigMap update (which swaps a
//! `..data` symlink in that directory, so the file's own inode never changes), are both seen
//! only there. Events are debounced, then any change in the directory triggers a reload;
//! reloads of unchanged bytes are cheap no-ops (the content hash is compared first).

use std::sync::Arc;
use std::time::Duration;

use notify_debouncer_mini::notify::RecursiveMode;
use notify_debouncer_mini::{new_debouncer, DebounceEventResult, Debouncer};
use tokio::sync::mpsc;

use super::LiveTable;

/// Keeps the watch alive; dropping it stops watching.
pub struct Watch {
    _debouncer: Debouncer<notify_debouncer_mini::notify::RecommendedWatcher>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watch")
    }
}

/// The table's directory cannot be watched (`notify`'s reason).
#[derive(Debug)]
pub struct WatchError {
    /// The directory.
    pub dir: std::path::PathBuf,
    /// Why.
    pub reason: String,
}

impl std::fmt::Display for WatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot watch {}: {}", self.dir.display(), self.reason)
    }
}

impl std::error::Error for WatchError {}

/// Starts watching `live`'s file; changes reload it within `debounce` plus a reload's time.
/// Must be called inside a tokio runtime.
pub fn watch(live: Arc<LiveTable>, debounce: Duration) -> Result<Watch, WatchError> {
    let path = live.path().to_path_buf();
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    // Capacity 1: events that arrive while a reload is pending fold into it.
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut debouncer = new_debouncer(debounce, move |events: DebounceEventResult| match events {
        Ok(_) => {
            let _ = tx.try_send(());
        }
        Err(e) => tracing::warn!(error = %e, "routing table watch error"),
    })
    .map_err(|e| WatchError {
        dir: dir.clone(),
        reason: e.to_string(),
    })?;
    debouncer
        .watcher()
        .watch(&dir, RecursiveMode::NonRecursive)
        .map_err(|e| WatchError {
            dir: dir.clone(),
            reason: e.to_string(),
        })?;
    tokio::spawn(async move {
        while rx.recv().await.is_some() {
            // Errors are logged and recorded by the reload itself.
            let _ = live.reload().await;
        }
    });
    tracing::info!(dir = %dir.display(), "watching the routing table's directory");
    Ok(Watch {
        _debouncer: debouncer,
    })
}
