//! Watching directories for the file changes that trigger a reload (the routing table,
//! docs/routing-table.md#hot-reload; the listener's certificates, docs/tls-h2-grpc.md).
//!
//! Directories, not files: an editor that saves by renaming a new file over the old one, a
//! Kubernetes ConfigMap or Secret update (a `..data` symlink swap) and cert-manager renewals
//! are only seen there. Reads are not changes: the inotify watch also reports opens and
//! read-only closes, and counting those made every reload (which reads the file) trigger the
//! next one. A burst of events (an editor's save is several) folds into one reload, the
//! debounce after its first event. [`on_change`] runs a reload for each burst until its
//! [`Watch`] is dropped.

use std::path::PathBuf;
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

/// A directory that cannot be watched, with `notify`'s reason.
#[derive(Debug)]
pub struct WatchError {
    /// The directory.
    pub dir: PathBuf,
    /// Why.
    pub reason: String,
}

impl std::fmt::Display for WatchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot watch {}: {}", self.dir.display(), self.reason)
    }
}

impl std::error::Error for WatchError {}

/// Debounced changes in some directories: [`Changes::next`] resolves once per burst.
/// Dropping it stops watching.
struct Changes {
    _watcher: RecommendedWatcher,
    rx: mpsc::Receiver<()>,
    debounce: Duration,
}

impl std::fmt::Debug for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Changes")
            .field("debounce", &self.debounce)
            .finish_non_exhaustive()
    }
}

/// Whether an event can change what a reload reads (opens and read-only closes cannot).
fn is_change(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// The directory a file is in (`.` for a bare name).
pub fn dir_of(file: &std::path::Path) -> PathBuf {
    match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

impl Changes {
    /// Watches `dirs` (not recursively).
    ///
    /// Errors: a directory cannot be watched.
    fn watch(
        dirs: impl IntoIterator<Item = PathBuf>,
        debounce: Duration,
    ) -> Result<Changes, WatchError> {
        // Capacity 1: events while one is pending fold into it.
        let (tx, rx) = mpsc::channel::<()>(1);
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
                Ok(e) if is_change(&e.kind) => {
                    let _ = tx.try_send(());
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "file watch error"),
            })
            .map_err(|e| WatchError {
                dir: PathBuf::new(),
                reason: e.to_string(),
            })?;
        for dir in dirs {
            watcher
                .watch(&dir, RecursiveMode::NonRecursive)
                .map_err(|e| WatchError {
                    reason: e.to_string(),
                    dir,
                })?;
        }
        Ok(Changes {
            _watcher: watcher,
            rx,
            debounce,
        })
    }

    /// Waits for the next burst of changes and its debounce; `None` if the watch ended.
    async fn next(&mut self) -> Option<()> {
        self.rx.recv().await?;
        tokio::time::sleep(self.debounce).await;
        while self.rx.try_recv().is_ok() {}
        Some(())
    }
}

/// A running watch: dropping it stops watching and reloading.
#[derive(Debug)]
pub struct Watch {
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches `dirs` and awaits `reload()` after each debounced burst of changes, one at a time.
/// Must be called inside a tokio runtime.
///
/// Errors: a directory cannot be watched.
pub fn on_change<F, Fut>(
    dirs: impl IntoIterator<Item = PathBuf>,
    debounce: Duration,
    mut reload: F,
) -> Result<Watch, WatchError>
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let mut changes = Changes::watch(dirs, debounce)?;
    let task = tokio::spawn(async move {
        while changes.next().await.is_some() {
            reload().await;
        }
    });
    Ok(Watch { task })
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, ModifyKind};

    #[test]
    fn reads_are_not_changes() {
        assert!(!is_change(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!is_change(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(is_change(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(is_change(&EventKind::Modify(ModifyKind::Any)));
        assert!(is_change(&EventKind::Create(CreateKind::File)));
    }
}
