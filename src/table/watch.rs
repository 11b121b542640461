//! Reloading the routing table when its file changes (docs/routing-table.md#hot-reload).
//!
//! The watch is on the file's *directory*, not the file: an editor that saves by writing a
//! new file and renaming it over the old one, and a Kubernetes ConfigMap update (which swaps a
//! `..data` symlink in that directory, so the file's own inode never changes), are both seen
//! only there (`crate::watch`). Any change in the directory triggers a reload; reloads of
//! unchanged bytes are cheap no-ops (the content hash is compared first).

use std::sync::Arc;
use std::time::Duration;

use super::LiveTable;

pub use crate::watch::{Watch, WatchError};

/// Starts watching `live`'s file; changes reload it within `debounce` plus a reload's time.
/// Must be called inside a tokio runtime.
///
/// Errors: the file's directory cannot be watched.
pub fn watch(live: Arc<LiveTable>, debounce: Duration) -> Result<Watch, WatchError> {
    let dir = crate::watch::dir_of(live.path());
    let watch = crate::watch::on_change([dir.clone()], debounce, move || {
        let live = live.clone();
        // Errors are logged and recorded by the reload itself.
        async move {
            let _ = live.reload().await;
        }
    })?;
    tracing::info!(dir = %dir.display(), "watching the routing table's directory");
    Ok(watch)
}
