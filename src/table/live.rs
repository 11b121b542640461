//! The live routing table and its reloads (docs/routing-table.md#hot-reload).
//!
//! Requests read the table through `arc-swap`: a load is a couple of atomic operations and
//! never blocks, and a request keeps the `Arc` it loaded until it is done, so a reload never
//! changes the table under a request in flight. A reload reads, validates and compiles the
//! new file on the blocking pool (off the request path), then swaps it in whole. A table that
//! fails validation is never installed: the last good one keeps serving, and the error, with
//! its file:line:column, is logged, kept for `/admin/routing-table` and counted.
//!
//! The table is routing policy only. What runs per region (upstream pools and health,
//! balancing, retry budgets) is reconciled with each new table by whoever registered with
//! [`LiveTable::on_install`] (`crate::upstream::Regions`), so this module needs nothing of it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::{load_source, RoutingTable};
use crate::metrics::ReloadResult;
use crate::source::{Source, SourceError, SourceErrors};

/// Called with each table as it is installed.
type InstallHook = Box<dyn Fn(&Arc<RoutingTable>) + Send + Sync>;

/// Checks a table against what else relies on it (the config's routes) before it is
/// installed.
type Requirement = Box<dyn Fn(&RoutingTable) -> Result<(), SourceErrors> + Send + Sync>;

/// What `/admin/routing-table` reports (docs/admin.md).
#[derive(Debug, Clone, Serialize)]
pub struct TableStatus {
    /// The serving table's `version`.
    pub version: String,
    /// When the serving table was installed (RFC 3339).
    pub loaded_at: String,
    /// The file it was read from.
    pub source: PathBuf,
    /// SHA-256 of the file's bytes, hex: compare with `sha256sum routing-table.yaml`.
    pub content_sha256: String,
    /// The last failed reload, if it came after the last good one.
    pub last_reload_error: Option<ReloadError>,
    /// Reloads that installed a new table.
    pub reloads: u64,
    /// Reloads refused because the file was invalid.
    pub failed_reloads: u64,
    /// The last [`RECENT_RELOADS`] reloads, newest first, for the console.
    pub recent_reloads: VecDeque<ReloadRecord>,
}

/// How many reloads [`TableStatus::recent_reloads`] keeps.
pub const RECENT_RELOADS: usize = 10;

/// One reload as the console lists it.
#[derive(Debug, Clone, Serialize)]
pub struct ReloadRecord {
    /// When it ended (RFC 3339).
    pub at: String,
    /// What the reload did; JSON `installed`, `unchanged` (same bytes) or `refused`.
    pub outcome: ReloadRecordOutcome,
    /// The version serving after it.
    pub version: String,
    /// Every error of a refused reload, as `file:line:column: message`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// A reload as [`ReloadRecord`] lists it: what [`ReloadOutcome`] says, or refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReloadRecordOutcome {
    /// A new table is serving.
    Installed,
    /// The file's bytes had not changed.
    Unchanged,
    /// The table had errors; the last good one keeps serving.
    Refused,
}

impl TableStatus {
    fn record(&mut self, outcome: ReloadRecordOutcome, errors: Vec<String>) {
        if self.recent_reloads.len() == RECENT_RELOADS {
            self.recent_reloads.pop_back();
        }
        self.recent_reloads.push_front(ReloadRecord {
            at: now_rfc3339(),
            outcome,
            version: self.version.clone(),
            errors,
        });
    }
}

/// A refused reload.
#[derive(Debug, Clone, Serialize)]
pub struct ReloadError {
    /// When it was refused (RFC 3339).
    pub at: String,
    /// Every error, as `file:line:column: message`.
    pub errors: Vec<String>,
}

/// What a reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// A new table is serving.
    Installed,
    /// The file's bytes had not changed; nothing was swapped.
    Unchanged,
}

/// The serving table, its source file and its reload history.
pub struct LiveTable {
    current: ArcSwap<RoutingTable>,
    path: PathBuf,
    status: Mutex<TableStatus>,
    /// One reload at a time: a file event, `SIGHUP` and the admin API may ask together.
    reloading: tokio::sync::Mutex<()>,
    hooks: Mutex<Vec<InstallHook>>,
    requirements: Mutex<Vec<Requirement>>,
}

impl std::fmt::Debug for LiveTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveTable")
            .field("path", &self.path)
            .field("version", &self.current.load().version)
            .finish_non_exhaustive()
    }
}

fn now_rfc3339() -> String {
    let ms = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    rfc3339_ms(ms)
}

/// RFC 3339 text of a ms timestamp, e.g. `2022-02-22T19:25:00.016Z`.
pub fn rfc3339_ms(unix_ts_ms: u64) -> String {
    let ns = i128::from(unix_ts_ms) * 1_000_000;
    time::OffsetDateTime::from_unix_timestamp_nanos(ns)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default()
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl LiveTable {
    /// Loads the table at `path`; fails with every error if it is invalid.
    pub fn load(path: &Path) -> Result<LiveTable, SourceErrors> {
        let source = Source::read(path).map_err(|e| SourceErrors(vec![e]))?;
        Self::from_source(&source)
    }

    /// A live table from text already read (the demo's embedded table). Reloads read
    /// `source.path`.
    pub fn from_source(source: &Source) -> Result<LiveTable, SourceErrors> {
        let table = load_source(source)?;
        let status = TableStatus {
            version: table.version.clone(),
            loaded_at: now_rfc3339(),
            source: source.path.clone(),
            content_sha256: sha256_hex(source.text.as_bytes()),
            last_reload_error: None,
            reloads: 0,
            failed_reloads: 0,
            recent_reloads: VecDeque::new(),
        };
        crate::metrics::reload(ReloadResult::Success, None, Some(&table.version));
        Ok(LiveTable {
            current: ArcSwap::from_pointee(table),
            path: source.path.clone(),
            status: Mutex::new(status),
            reloading: tokio::sync::Mutex::new(()),
            hooks: Mutex::new(Vec::new()),
            requirements: Mutex::new(Vec::new()),
        })
    }

    /// Makes `check` a condition of every later install (a reload whose table fails it is
    /// refused, and the last good table keeps serving), and checks the serving table now.
    ///
    /// Errors: the serving table fails `check`.
    pub fn require(
        &self,
        check: impl Fn(&RoutingTable) -> Result<(), SourceErrors> + Send + Sync + 'static,
    ) -> Result<(), SourceErrors> {
        check(&self.current.load())?;
        self.requirements
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Box::new(check));
        Ok(())
    }

    /// Calls `hook` with the serving table now and with every table installed later, in
    /// install order (reloads are one at a time), before the reload that installed it returns.
    pub fn on_install(&self, hook: impl Fn(&Arc<RoutingTable>) + Send + Sync + 'static) {
        let mut hooks = self.hooks.lock().unwrap_or_else(|p| p.into_inner());
        hook(&self.current.load_full());
        hooks.push(Box::new(hook));
    }

    /// The serving table; hold the `Arc` for as long as the request needs it.
    #[inline]
    pub fn current(&self) -> Arc<RoutingTable> {
        self.current.load_full()
    }

    /// The file reloads read.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A snapshot of the status for the admin API.
    pub fn status(&self) -> TableStatus {
        self.status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Reads, validates and installs the file again. On error the serving table stays.
    pub async fn reload(&self) -> Result<ReloadOutcome, SourceErrors> {
        let _one_at_a_time = self.reloading.lock().await;
        let path = self.path.clone();
        let old_hash = self.status().content_sha256;
        let read = tokio::task::spawn_blocking(move || {
            let source = Source::read(&path).map_err(|e| SourceErrors(vec![e]))?;
            let hash = sha256_hex(source.text.as_bytes());
            // Same bytes as the serving table: nothing to validate or swap.
            let compiled = (hash != old_hash).then(|| load_source(&source));
            Ok::<_, SourceErrors>((compiled, hash))
        })
        .await
        .unwrap_or_else(|e| {
            Err(SourceErrors(vec![SourceError {
                file: self.path.clone(),
                position: None,
                message: format!("reload task failed: {e}"),
            }]))
        });
        let (compiled, hash) = match read {
            Ok(pair) => pair,
            Err(errors) => return Err(self.refuse(errors)),
        };
        match compiled {
            None => {
                let mut st = self.status.lock().unwrap_or_else(|p| p.into_inner());
                st.last_reload_error = None;
                st.record(ReloadRecordOutcome::Unchanged, Vec::new());
                Ok(ReloadOutcome::Unchanged)
            }
            Some(Ok(table)) => {
                let unmet: Vec<SourceError> = self
                    .requirements
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .iter()
                    .filter_map(|check| check(&table).err())
                    .flat_map(|e| e.0)
                    .collect();
                if !unmet.is_empty() {
                    return Err(self.refuse(SourceErrors(unmet)));
                }
                let version = table.version.clone();
                let table = Arc::new(table);
                let old = self.current.swap(table.clone());
                for hook in self.hooks.lock().unwrap_or_else(|p| p.into_inner()).iter() {
                    hook(&table);
                }
                crate::metrics::reload(ReloadResult::Success, Some(&old.version), Some(&version));
                tracing::info!(%version, sha256 = %hash, "routing table reloaded");
                let mut st = self.status.lock().unwrap_or_else(|p| p.into_inner());
                st.version = version;
                st.loaded_at = now_rfc3339();
                st.content_sha256 = hash;
                st.last_reload_error = None;
                st.reloads += 1;
                st.record(ReloadRecordOutcome::Installed, Vec::new());
                Ok(ReloadOutcome::Installed)
            }
            Some(Err(errors)) => Err(self.refuse(errors)),
        }
    }

    fn refuse(&self, errors: SourceErrors) -> SourceErrors {
        crate::metrics::reload(ReloadResult::Failure, None, None);
        tracing::error!(errors = %errors, "routing table reload refused; the previous table keeps serving");
        let mut st = self.status.lock().unwrap_or_else(|p| p.into_inner());
        let listed: Vec<String> = errors.0.iter().map(ToString::to_string).collect();
        st.record(ReloadRecordOutcome::Refused, listed.clone());
        st.last_reload_error = Some(ReloadError {
            at: now_rfc3339(),
            errors: listed,
        });
        st.failed_reloads += 1;
        errors
    }
}
