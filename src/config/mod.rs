//! The router config, `config/router.yaml` (docs/config.md).
//!
//! Unknown keys are errors: a typo (`time_outs:`) must not silently disable a feature.
//! Paths inside the file (`routing_table`) are relative to the file itself, so a config and its
//! table can move together.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::source::{Seg, Source, SourceError, SourceErrors};

mod admin;
mod files;
mod http3;
mod policy;
mod proxies;
mod rate_limits;
mod traces;

pub use admin::{AdminSettings, MIN_TOKEN_CHARS};
pub use http3::Http3Settings;
pub use proxies::{Cidr, TrustedProxies};
pub use rate_limits::{LimitKey, OnStoreError, Rate, RateLimitRule, RateLimitStore};
pub use traces::{check_endpoint, OtlpProtocol, TracingSettings, DEFAULT_MAX_QUEUE_SPANS};

pub use policy::{
    CheckPolicy, HealthPolicy, Legacy, LegacyCache, LegacyProbe, Limits, RetryPolicy, Timeouts,
    UnderscoreFields, DEFAULT_BACKLOG,
};

/// The config file as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    listen: String,
    #[serde(default)]
    admin_listen: Option<String>,
    region: String,
    routing_table: String,
    /// Read here for its shape only (a list); each entry by its kind, in
    /// `crate::proxy::route`.
    #[serde(default)]
    routes: Vec<serde::de::IgnoredAny>,
    #[serde(default)]
    unrouted: Unrouted,
    #[serde(default)]
    timeouts: Timeouts,
    #[serde(default)]
    limits: Limits,
    #[serde(default)]
    preserve_host: bool,
    #[serde(default)]
    decision_headers: bool,
    #[serde(default)]
    reload: Reload,
    #[serde(default)]
    shutdown: Shutdown,
    #[serde(default)]
    overload: Overload,
    #[serde(default)]
    access_log: bool,
    #[serde(default)]
    log_format: LogFormat,
    #[serde(default)]
    health: HealthPolicy,
    #[serde(default)]
    health_check: Option<CheckPolicy>,
    #[serde(default)]
    retries: RetryPolicy,
    #[serde(default)]
    workers: usize,
    #[serde(default)]
    legacy: Legacy,
    #[serde(default)]
    legacy_cache: LegacyCache,
    #[serde(default)]
    legacy_probe: LegacyProbe,
    #[serde(default)]
    tls: Option<crate::tls::TlsSpec>,
    #[serde(default)]
    http3: Option<http3::Http3Settings>,
    #[serde(default)]
    admin: Option<admin::AdminSpec>,
    #[serde(default)]
    upgrade_socket: Option<String>,
    #[serde(default)]
    tracing: Option<traces::TracingSpec>,
    #[serde(default)]
    trusted_proxies: Option<Vec<String>>,
    #[serde(default)]
    rate_limits: Vec<rate_limits::RuleSpec>,
    #[serde(default)]
    store: Option<rate_limits::StoreSpec>,
}

/// How routing-table changes are picked up (docs/routing-table.md#hot-reload); `SIGHUP` and `POST /admin/reload`
/// always work.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Reload {
    /// Watch the table file's directory and reload on change.
    pub watch: bool,
    /// Quiet time after the last file event before reloading, in ms.
    pub debounce_ms: u64,
}

impl Default for Reload {
    fn default() -> Self {
        Reload {
            watch: true,
            debounce_ms: 200,
        }
    }
}

/// Graceful shutdown on `SIGTERM`/`SIGINT`.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Shutdown {
    /// Time between `/readyz` turning 503 and the listener closing, in ms, for load
    /// balancers to stop sending new connections.
    pub drain_delay_ms: u64,
    /// Longest wait for requests in flight once the listener is closed, in ms.
    pub grace_ms: u64,
    /// After an upgrade handed the sockets over, the longest the old process may finish its
    /// requests, streams and WebSockets, in ms (docs/upgrades.md); `grace_ms` when unset.
    pub drain_timeout_ms: Option<u64>,
}

impl Shutdown {
    /// `drain_timeout_ms`, or `grace_ms` when it is unset.
    pub fn drain_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.drain_timeout_ms.unwrap_or(self.grace_ms))
    }
}

impl Default for Shutdown {
    fn default() -> Self {
        Shutdown {
            drain_delay_ms: 0,
            grace_ms: 30_000,
            drain_timeout_ms: None,
        }
    }
}

/// The process's overload guard (docs/overload.md, `overload:`).
#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Overload {
    /// Above this resident memory, in MiB, every new exchange with a region is shed (503
    /// `overloaded`) until it is below again; `0` (the default): no bound.
    pub max_memory_mb: usize,
}

/// How log lines are written (to stderr).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// What to do with a request that carries no id (docs/config.md `unrouted`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Unrouted {
    /// Send it to the table's `default_region`.
    #[default]
    DefaultRegion,
    /// Answer 404 problem+json.
    Reject,
}

/// Keys a router.yaml may still carry from before their removal, each with why it went:
/// refused at their line and column with that reason rather than as an unknown key
/// (docs/config.md).
const REMOVED_KEYS: [(&str, &str); 1] = [(
    "http1_engine",
    "`http1_engine` was removed (issue 37): every HTTP/1.x connection is served by the \
     router's own engine (docs/data-path.md); delete the key",
)];

/// A validated router config.
#[derive(Debug)]
pub struct RouterConfig {
    /// The config file this came from.
    pub path: PathBuf,
    /// The public listener.
    pub listen: SocketAddr,
    /// The admin API listener (docs/admin.md), if any.
    pub admin_listen: Option<SocketAddr>,
    /// This edge's own region name (for `Via`, loop detection, metrics).
    pub region: String,
    /// The routing table file, resolved against the config file's directory.
    pub routing_table: PathBuf,
    /// Where ids are read from requests: `routes:` as written, compiled by the data path's
    /// route kinds (`crate::proxy::route`), at start and by `check`.
    pub routes: RouteEntries,
    /// Policy for requests without an id.
    pub unrouted: Unrouted,
    /// Upstream timeouts.
    pub timeouts: Timeouts,
    /// Request limits.
    pub limits: Limits,
    /// Keep the client's `Host` instead of the upstream's authority.
    pub preserve_host: bool,
    /// Tell upstreams the routing decision: `X-Iuid-Region`, and `X-Iuid-Move` when a move
    /// applied (docs/moves.md).
    pub decision_headers: bool,
    /// Table reload settings.
    pub reload: Reload,
    /// Graceful shutdown settings.
    pub shutdown: Shutdown,
    /// The process's overload guard (docs/overload.md).
    pub overload: Overload,
    /// Log one line per request (target `iuid_router::access`).
    pub access_log: bool,
    /// Text or JSON log lines.
    pub log_format: LogFormat,
    /// Outlier ejection.
    pub health: HealthPolicy,
    /// Active health checks, if configured.
    pub health_check: Option<CheckPolicy>,
    /// Retries and their budget.
    pub retries: RetryPolicy,
    /// Worker threads serving the data path, at least 1 (`workers: 0`, the default, is one
    /// per available core; see `crate::workers`).
    pub workers: usize,
    /// Requests for ids without routing bits: `default_region` or `probe` (docs/fanout.md).
    pub legacy: Legacy,
    /// The owner cache of `legacy: probe`.
    pub legacy_cache: LegacyCache,
    /// The probe budget of `legacy: probe`.
    pub legacy_probe: LegacyProbe,
    /// `admin:`: the admin API's token file, sessions and allowed hosts (docs/admin.md).
    pub admin: AdminSettings,
    /// HTTPS on `listen` (docs/tls-h2-grpc.md): certificate files resolved against the config's
    /// directory, each checked to load at start.
    pub tls: Option<crate::tls::TlsSettings>,
    /// `http3:` (docs/http3.md): QUIC on the TLS listener's port over UDP. `None`: off.
    pub http3: Option<Http3Settings>,
    /// `upgrade_socket`: the Unix socket a new process asks for the listening sockets on
    /// (`serve --upgrade`, docs/upgrades.md), resolved against the config's directory.
    pub upgrade_socket: Option<PathBuf>,
    /// `tracing:` (docs/traces.md): spans exported over OTLP. `None`: no tracing.
    pub tracing: Option<TracingSettings>,
    /// `trusted_proxies:` (docs/data-path.md "Header rules"): the peers whose
    /// `X-Forwarded-For` and `Forwarded` go on appended to; from any other, they are
    /// replaced. `None`: every peer's are appended to.
    pub trusted_proxies: Option<TrustedProxies>,
    /// `rate_limits:` (docs/rate-limits.md): the rules, in the file's order. Empty: no
    /// request is counted.
    pub rate_limits: Vec<RateLimitRule>,
    /// `store:`: the Redis the rules' counters are shared through. `None`: this edge's
    /// memory.
    pub store: Option<RateLimitStore>,
}

/// The `routes:` list as written: the config file (each entry is read from it by its kind,
/// so that errors keep their position) and how many entries it has.
#[derive(Debug, Clone)]
pub struct RouteEntries {
    /// The config file.
    pub source: Source,
    /// How many entries `routes:` has.
    pub len: usize,
}

impl RouteEntries {
    /// The entries of `source`'s `routes:` (none when the key is absent).
    ///
    /// Errors: the file is not YAML, or `routes:` is not a list.
    pub fn of(source: &Source) -> Result<RouteEntries, SourceError> {
        #[derive(Deserialize)]
        struct OnlyRoutes {
            #[serde(default)]
            routes: Vec<serde::de::IgnoredAny>,
        }
        let only: OnlyRoutes = source.parse()?;
        Ok(RouteEntries {
            source: source.clone(),
            len: only.routes.len(),
        })
    }
}

/// The schemes routes name, and where (see [`SchemeUses::check`]): routes that name a scheme
/// other than `iuid`. The routing table must declare each (checked at start, by `check`, and
/// before a reload installs).
#[derive(Debug, Clone, Default)]
pub struct SchemeUses {
    uses: Vec<SchemeUse>,
    table: PathBuf,
}

/// A route's `scheme:` naming a scheme the routing table must declare.
#[derive(Debug, Clone)]
pub struct SchemeUse {
    /// The scheme's name.
    pub scheme: String,
    /// A `fanout:` route orders by its ids' time: the scheme must carry one.
    pub needs_time: bool,
    /// Where the route names it (`router.yaml:line:column`), with an empty message.
    pub at: SourceError,
}

impl SchemeUses {
    /// The uses of one config's routes; `table` is the routing table's file, for messages.
    pub fn new(uses: Vec<SchemeUse>, table: PathBuf) -> SchemeUses {
        SchemeUses { uses, table }
    }

    /// Checks that the routing table declares every scheme the routes name, and that a
    /// `fanout:` route's scheme carries a time; `defined` is the table's scheme names (`iuid`
    /// included), `timeless` those without a time.
    ///
    /// Errors: one per route whose scheme is missing or timeless, at the route's `scheme:` in
    /// the config.
    pub fn check(&self, defined: &[&str], timeless: &[&str]) -> Result<(), SourceErrors> {
        let missing: Vec<SourceError> = self
            .uses
            .iter()
            .filter_map(|u| {
                let message = if !defined.contains(&u.scheme.as_str()) {
                    format!(
                        "scheme `{}` is not declared in the routing table {} (schemes: {})",
                        u.scheme,
                        self.table.display(),
                        defined.join(", ")
                    )
                } else if u.needs_time && timeless.contains(&u.scheme.as_str()) {
                    format!(
                        "a fanout route merges by id time, but scheme `{}` has no time field",
                        u.scheme
                    )
                } else {
                    return None;
                };
                Some(SourceError {
                    message,
                    ..u.at.clone()
                })
            })
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(SourceErrors(missing))
        }
    }
}

impl RouterConfig {
    /// The routing-table file the config at `path` names, read leniently: `check` validates
    /// the table even when the rest of the config has errors, so that one run shows them
    /// all. `None` if the file cannot be read or parsed, or names no table.
    pub fn table_path_of(path: &Path) -> Option<PathBuf> {
        let text = std::fs::read_to_string(path).ok()?;
        let value: serde_yaml::Value = serde_yaml::from_str(&text).ok()?;
        let table = value.get("routing_table")?.as_str()?;
        Some(path.parent().unwrap_or(Path::new(".")).join(table))
    }

    /// The `routes:` of the config at `path`, read leniently like [`Self::table_path_of`], so
    /// that `check` reports bad routes with the config's other errors. `None` if the file
    /// cannot be read or its `routes:` is not a list.
    pub fn routes_of(path: &Path) -> Option<RouteEntries> {
        RouteEntries::of(&Source::read(path).ok()?).ok()
    }

    /// Reads and validates the config at `path`; every error carries file:line:column.
    pub fn load(path: &Path) -> Result<RouterConfig, SourceErrors> {
        let source = Source::read(path).map_err(|e| SourceErrors(vec![e]))?;
        Self::from_source(&source)
    }

    /// Validates a config already read, then reads the files it names (the listener's
    /// certificates and client CA, the admin token) and reports those that do not load at
    /// their keys; every error of both steps in one list. Relative paths resolve against
    /// `source.path`.
    pub fn from_source(source: &Source) -> Result<RouterConfig, SourceErrors> {
        let file_errors = files::check(source);
        match (Self::validate(source), file_errors.is_empty()) {
            (Ok(config), true) => Ok(config),
            (Ok(_), false) => Err(SourceErrors(file_errors)),
            (Err(SourceErrors(mut errors)), _) => {
                errors.extend(file_errors);
                Err(SourceErrors(errors))
            }
        }
    }

    /// Validates a config already read without touching any other file (a pure function of
    /// the text and its path): shapes, ranges, addresses, and how the keys relate. The files
    /// it names are [`RouterConfig::from_source`]'s to read.
    pub fn validate(source: &Source) -> Result<RouterConfig, SourceErrors> {
        let removed: Vec<SourceError> = REMOVED_KEYS
            .iter()
            .map(|(key, why)| (vec![Seg::KeyName((*key).to_owned(), 0)], why))
            .filter(|(at, _)| crate::source::locate(&source.text, at).is_some())
            .map(|(at, why)| source.error_at(&at, *why))
            .collect();
        if !removed.is_empty() {
            return Err(SourceErrors(removed));
        }
        let file: ConfigFile = source.parse().map_err(|e| SourceErrors(vec![e]))?;
        let mut errors: Vec<SourceError> = Vec::new();
        let key = |k: &str| Seg::Key(k.to_owned());

        let mut addr = |field: &str, text: &str| match text.parse::<SocketAddr>() {
            Ok(a) => Some(a),
            Err(_) => {
                errors.push(source.error_at(
                    &[key(field)],
                    format!("`{text}` is not an address:port such as 0.0.0.0:8080"),
                ));
                None
            }
        };
        let listen = addr("listen", &file.listen);
        let admin_listen = file
            .admin_listen
            .as_deref()
            .and_then(|t| addr("admin_listen", t));

        if !file
            .region
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            || file.region.is_empty()
        {
            errors.push(source.error_at(
                &[key("region")],
                "region may only hold letters, digits, `-`, `_`, `.` (it goes into Via)",
            ));
        }
        if file.limits.max_hops == 0 {
            errors.push(source.error_at(
                &[key("limits"), key("max_hops")],
                "max_hops must be at least 1",
            ));
        }
        if file.limits.header_read_timeout_ms == 0 {
            errors.push(source.error_at(
                &[key("limits"), key("header_read_timeout_ms")],
                "header_read_timeout_ms must be above 0 ms",
            ));
        }
        if let Some(check) = &file.health_check {
            // Checks run off the data path, but more often than every 10 ms they would be
            // load on the upstreams, not a check of them; 0 was taken as 10 without a word.
            if check.interval_ms < 10 {
                errors.push(source.error_at(
                    &[key("health_check"), key("interval_ms")],
                    "interval_ms must be at least 10 ms",
                ));
            }
            if check.timeout_ms == 0 {
                errors.push(source.error_at(
                    &[key("health_check"), key("timeout_ms")],
                    "timeout_ms must be above 0 ms",
                ));
            }
        }
        if file.health.max_ejected_percent > 100 {
            errors.push(source.error_at(
                &[key("health"), key("max_ejected_percent")],
                "max_ejected_percent is a percentage: 0 to 100",
            ));
        }
        if file.limits.fanout_region_bytes == 0 {
            errors.push(source.error_at(
                &[key("limits"), key("fanout_region_bytes")],
                "fanout_region_bytes must be above 0",
            ));
        }
        errors.extend(policy::check_bounds(
            &file.limits,
            &file.legacy_probe,
            |at, m| {
                let at: Vec<Seg> = at.iter().map(|k| key(k)).collect();
                source.error_at(&at, m)
            },
        ));
        if file.timeouts.connect_ms == 0
            || file.timeouts.response_headers_ms == 0
            || file.timeouts.idle_ms == 0
        {
            errors.push(source.error_at(&[key("timeouts")], "timeouts must be above 0 ms"));
        }

        let routes = RouteEntries {
            source: source.clone(),
            len: file.routes.len(),
        };

        let base = source.path.parent().unwrap_or(Path::new("."));
        let routing_table = base.join(&file.routing_table);
        let upgrade_socket = match file.upgrade_socket.as_deref() {
            Some("") => {
                errors.push(source.error_at(
                    &[key("upgrade_socket")],
                    "upgrade_socket must be a path (or left out)",
                ));
                None
            }
            Some(path) => Some(base.join(path)),
            None => None,
        };
        let tls = file.tls.as_ref().map(|spec| spec.resolve(base));
        if let Some(http3) = &file.http3 {
            http3::check(http3, tls.is_some(), source, &mut errors);
        }
        let admin = admin::settings(file.admin.as_ref(), base, source, &mut errors);
        let tracing = file
            .tracing
            .as_ref()
            .map(|spec| traces::settings(spec, source, &mut errors));
        let trusted_proxies = file
            .trusted_proxies
            .as_deref()
            .map(|list| proxies::settings(list, source, &mut errors));
        let rate_limits = rate_limits::rules(&file.rate_limits, source, &mut errors);
        let store = file
            .store
            .as_ref()
            .map(|spec| rate_limits::store(spec, source, &mut errors));
        if let (Some(addr), None) = (admin_listen, &admin.token_file) {
            if !addr.ip().is_loopback() {
                errors.push(source.error_at(
                    &[key("admin_listen")],
                    format!(
                        "admin_listen {addr} is reachable from other hosts, and the admin API \
                         can reload the table: set admin.token_file (docs/admin.md), or listen on \
                         127.0.0.1"
                    ),
                ));
            }
        }
        if let Some(settings) = &tls {
            if settings.certificates.is_empty() {
                errors.push(source.error_at(
                    &[key("tls"), key("certificates")],
                    "tls needs at least one certificate",
                ));
            }
        }

        match listen {
            Some(listen) if errors.is_empty() => Ok(RouterConfig {
                path: source.path.clone(),
                listen,
                admin_listen,
                region: file.region,
                routing_table,
                routes,
                unrouted: file.unrouted,
                timeouts: file.timeouts,
                limits: file.limits,
                preserve_host: file.preserve_host,
                decision_headers: file.decision_headers,
                reload: file.reload,
                shutdown: file.shutdown,
                overload: file.overload,
                access_log: file.access_log,
                log_format: file.log_format,
                health: file.health,
                health_check: file.health_check,
                retries: file.retries,
                workers: crate::workers::resolve_count(file.workers),
                legacy: file.legacy,
                legacy_cache: file.legacy_cache,
                legacy_probe: file.legacy_probe,
                tls,
                http3: file.http3,
                admin,
                upgrade_socket,
                tracing,
                trusted_proxies,
                rate_limits,
                store,
            }),
            _ => Err(SourceErrors(errors)),
        }
    }
}
