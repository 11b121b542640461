//! The admin API (docs/admin.md), served on `admin_listen` only, never on the public listener.
//!
//! | route | answers |
//! |---|---|
//! | `GET /healthz` | 200 while the process runs |
//! | `GET /readyz` | 200 once a table is loaded; 503 once shutdown has begun |
//! | `GET /metrics` | Prometheus text format 0.0.4 |
//! | `GET /admin/routing-table` | version, loaded_at, source, content_sha256, last reload error |
//! | `GET /admin/resolve/{id}?scheme=NAME` | the `resolve` command's JSON (scheme default `iuid`); problem+json 400/404 |
//! | `POST /admin/reload` | 200 with the new status, or 422 problem+json with every error |
//! | `GET /admin/upstreams` | every region's upstreams with their health (docs/admin.md) |
//! | `GET /admin/regions` | each region's health share, its failover and the share of reads failing over (docs/failover.md) |
//! | `GET /admin/decode/{id}` | the id read in every scheme, with its region or why not |
//! | `GET /admin/routing-table/summary` | the table at a glance: regions, countries, services, schemes, overrides |
//! | `GET /admin/rates` | requests and 5xx per region over the last minute |
//! | `GET /admin/rate-limits` | the `rate_limits:` rules, their keys in memory, refusals, most-refused keys, the store |
//! | `GET /admin/moves` | each move between regions: match, from, to, phase, since, writes held, mirror outcomes |
//! | `GET /` | the support console, a page that reads the routes above (`console`) |
//! | `POST /admin/login` | the console's login: opens a session, sets its cookie (`auth`) |
//! | `POST /admin/logout` | ends the session, clears its cookie |
//! | `GET /admin/tls` | the listener's certificates (file, names, SHA-256) and their reloads; 404 without `tls:` |
//! | anything else | 404 problem+json `not-found`, after the same access checks |

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

pub mod auth;
mod console;
pub mod rates;
pub mod sessions;

use crate::inspect::{self, InspectError};
use crate::problem::Problem;
use crate::table::{LiveTable, ReloadOutcome, ResolveError};

/// What the admin handlers share.
#[derive(Clone, Debug)]
pub struct AdminState {
    /// The serving table and its reloads.
    pub table: Arc<LiveTable>,
    /// Set when shutdown begins; `/readyz` then answers 503.
    pub draining: Arc<AtomicBool>,
    /// The listener's certificates, with `tls:`.
    pub tls: Option<Arc<crate::tls::Certificates>>,
    /// `admin:`: with a token file every route but `/healthz` and `/readyz` needs its token;
    /// without one, only loopback and allowed `Host` names are served (`auth`).
    pub admin: crate::config::AdminSettings,
    /// The regions' runtime, for `/admin/upstreams`.
    pub regions: Option<Arc<crate::upstream::regions::Regions>>,
    /// Per-region rates, sampled from `regions`.
    pub rates: Option<Arc<rates::Rates>>,
    /// `rate_limits:`, for `/admin/rate-limits` (none configured: `None`).
    pub rate_limits: Option<Arc<crate::ratelimit::RateLimits>>,
    /// Owners learned at run time (legacy probes, `421` hints), for `/admin/resolve`.
    pub owners: Option<Arc<crate::upstream::owners::Owners>>,
}

/// The admin API's routes.
pub fn router(state: AdminState) -> Router {
    let access = auth::Access::new(state.admin.clone());
    let login = Router::new()
        .route("/admin/login", post(auth::login))
        .route("/admin/logout", post(auth::logout))
        .with_state(access.clone());
    Router::new()
        .route("/", get(console::page))
        .route("/console.js", get(console::script))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/admin/routing-table", get(routing_table))
        .route("/admin/routing-table/summary", get(table_summary))
        .route("/admin/rates", get(region_rates))
        .route("/admin/rate-limits", get(rate_limits))
        .route("/admin/moves", get(moves))
        .route("/admin/resolve/{id}", get(resolve))
        .route("/admin/reload", post(reload))
        .route("/admin/tls", get(tls_status))
        .route("/admin/upstreams", get(upstreams))
        .route("/admin/regions", get(regions_health))
        .route("/admin/decode/{id}", get(decode_all))
        .with_state(state)
        .merge(login)
        .fallback(unknown_route)
        .layer(axum::middleware::from_fn_with_state(access, auth::require))
}

async fn readyz(State(s): State<AdminState>) -> Response {
    if s.draining.load(Ordering::Relaxed) {
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n").into_response()
    } else {
        (StatusCode::OK, "ready\n").into_response()
    }
}

async fn metrics() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        crate::metrics::handle().render(),
    )
        .into_response()
}

async fn routing_table(State(s): State<AdminState>) -> Response {
    Json(s.table.status()).into_response()
}

async fn table_summary(State(s): State<AdminState>) -> Response {
    Json(s.table.current().summary()).into_response()
}

/// Requests and 5xx per region over the last minute (docs/admin.md).
async fn region_rates(State(s): State<AdminState>) -> Response {
    let list = match (&s.rates, &s.regions) {
        (Some(rates), Some(regions)) => rates.report(regions, crate::clock::now_ms()),
        _ => Vec::new(),
    };
    Json(json!({ "window_s": rates::WINDOW.as_secs(), "regions": list })).into_response()
}

/// The rate limits: each rule, its keys held, its refusals and the keys refused most this
/// minute, and the store (docs/admin.md `GET /admin/rate-limits`).
async fn rate_limits(State(s): State<AdminState>) -> Response {
    match &s.rate_limits {
        Some(limits) => Json(limits.snapshot()).into_response(),
        None => Json(json!({ "store": { "kind": "memory" }, "rules": [] })).into_response(),
    }
}

/// Each move between regions with its phase on this edge, since when, the writes it holds
/// and its mirror's outcomes (docs/admin.md `GET /admin/moves`, docs/moves.md).
async fn moves(State(s): State<AdminState>) -> Response {
    let Some(regions) = &s.regions else {
        return Json(json!({ "moves": [] })).into_response();
    };
    let routing = regions.current();
    let list: Vec<serde_json::Value> = routing
        .table
        .moves
        .iter()
        .enumerate()
        .filter_map(|(i, spec)| {
            let state = routing.move_state(i)?;
            let [same, differs, failed, dropped] = state.metrics.mirrored_counts();
            let [released, timed_out, refused] = state.metrics.held_counts();
            let mut v = json!(spec);
            v["phase"] = json!(state.phase().unwrap_or(spec.phase));
            v["since"] = json!(crate::table::rfc3339_ms(state.since_ms()));
            v["held_now"] = json!(state.held_now());
            v["writes_to_from"] = json!(state.writes_to_from());
            v["mirrored"] = json!({
                "same": same, "differs": differs, "failed": failed, "dropped": dropped,
            });
            v["held"] = json!({
                "released": released, "timed_out": timed_out, "refused": refused,
            });
            Some(v)
        })
        .collect();
    Json(json!({ "table_version": routing.table.version, "moves": list })).into_response()
}

/// Every upstream of every region with its health (docs/admin.md `GET /admin/upstreams`).
async fn upstreams(State(s): State<AdminState>) -> Response {
    let Some(regions) = &s.regions else {
        return Json(json!({ "regions": [] })).into_response();
    };
    let routing = regions.current();
    let now = crate::clock::now_ms();
    let list: Vec<serde_json::Value> = routing
        .all()
        .map(|(_, region)| {
            let upstreams: Vec<serde_json::Value> = region
                .upstreams
                .iter()
                .map(|u| {
                    let mut v = u.state.health.report(now);
                    v["authority"] = json!(u.authority.as_str());
                    v["protocol"] = json!(u.state.protocol);
                    v
                })
                .collect();
            json!({ "name": region.name, "upstreams": upstreams })
        })
        .collect();
    Json(json!({ "table_version": routing.table.version, "regions": list })).into_response()
}

/// Each region's health share and failover (docs/admin.md `GET /admin/regions`,
/// docs/failover.md): the share of its reads kept and failing over now, and where to.
async fn regions_health(State(s): State<AdminState>) -> Response {
    let Some(regions) = &s.regions else {
        return Json(json!({ "regions": [] })).into_response();
    };
    let routing = regions.current();
    let now = crate::clock::now_ms();
    let list: Vec<serde_json::Value> = routing
        .all()
        .map(|(_, region)| {
            let share = region.health_share(now);
            let in_rotation = region
                .upstreams
                .iter()
                .filter(|u| u.state.health.in_rotation(now))
                .count();
            let failover = region.failover.map(|f| {
                let kept = f.kept(share);
                json!({
                    "region": routing.region(f.region).name,
                    "serves": f.serves,
                    "overprovisioning": f.overprovisioning,
                    "kept": kept,
                    "failing_over": 1.0 - kept,
                })
            });
            json!({
                "name": region.name,
                "health_share": share,
                "upstreams": region.upstreams.len(),
                "in_rotation": in_rotation,
                "failover": failover,
            })
        })
        .collect();
    Json(json!({ "table_version": routing.table.version, "regions": list })).into_response()
}

/// What an id is in every scheme (docs/admin.md `GET /admin/decode/{id}`): for each scheme of the
/// serving table (`iuid` first), its reading and where it goes, or why it is not one.
async fn decode_all(State(s): State<AdminState>, Path(id): Path<String>) -> Response {
    let table = s.table.current();
    let readings: Vec<serde_json::Value> = table
        .scheme_names()
        .into_iter()
        .map(|scheme| match inspect::resolve_text(scheme, &id, &table) {
            Ok(mut resolved) => {
                if let Some(learned) = learned_owner(&s, &table, scheme, &id) {
                    resolved["learned_owner"] = learned;
                }
                json!({ "scheme": scheme, "valid": true, "reading": resolved })
            }
            Err(InspectError::Resolve(e)) => {
                let decoded = inspect::decode_text(scheme, &id, Some(&table)).ok();
                json!({ "scheme": scheme, "valid": true, "reading": decoded, "unowned": e.to_string() })
            }
            Err(e) => json!({ "scheme": scheme, "valid": false, "error": e.to_string() }),
        })
        .collect();
    Json(json!({ "id": id, "table_version": table.version, "readings": readings })).into_response()
}

async fn tls_status(State(s): State<AdminState>) -> Response {
    match &s.tls {
        Some(certs) => Json(certs.status()).into_response(),
        None => problem(Problem::NotFound("the listener has no `tls:` section")),
    }
}

/// Any path no route serves: 404 problem+json, past the same access checks as the routes
/// (an unknown path is no way around the token).
async fn unknown_route() -> Response {
    problem(Problem::NotFound(
        "no admin route has this path (docs/admin.md)",
    ))
}

/// A problem+json response of the one renderer the data path uses too.
fn problem(p: Problem) -> Response {
    p.into_response().map(axum::body::Body::new)
}

/// `?scheme=NAME` of `/admin/resolve/{id}` (default `iuid`).
#[derive(Debug, serde::Deserialize)]
struct SchemeQuery {
    scheme: Option<String>,
}

async fn resolve(
    State(s): State<AdminState>,
    Path(id): Path<String>,
    Query(q): Query<SchemeQuery>,
) -> Response {
    let scheme = q.scheme.as_deref().unwrap_or(crate::scheme::IUID);
    let unresolved = |e| problem(Problem::unresolved(e, None, id.as_bytes()));
    let table = s.table.current();
    match inspect::resolve_text(scheme, &id, &table) {
        Ok(mut v) => {
            if let Some(learned) = learned_owner(&s, &table, scheme, &id) {
                v["learned_owner"] = learned;
            }
            Json(v).into_response()
        }
        Err(InspectError::Parse(e)) => unresolved(ResolveError::Malformed(e)),
        Err(InspectError::Resolve(e)) => unresolved(e),
        Err(InspectError::UnknownScheme(name)) => unresolved(ResolveError::UnknownScheme(name)),
    }
}

/// An owner learned at run time for `id`, which the data path follows over the table's
/// answer: `{"region", "source": "hint" | "legacy_probe"}` (docs/failover.md).
fn learned_owner(
    s: &AdminState,
    table: &crate::table::RoutingTable,
    scheme: &str,
    id: &str,
) -> Option<serde_json::Value> {
    let owners = s.owners.as_ref()?;
    let (key, _) = table.resolve_text(scheme, id.trim().as_bytes()).ok()?;
    if let Some(region) = owners.hinted(key.fingerprint()) {
        return Some(json!({ "region": &*region, "source": "hint" }));
    }
    match owners.lookup(&key.to_string()) {
        crate::upstream::owners::Known::Owner(region) => {
            Some(json!({ "region": &*region, "source": "legacy_probe" }))
        }
        _ => None,
    }
}

async fn reload(State(s): State<AdminState>) -> Response {
    match s.table.reload().await {
        Ok(outcome) => {
            let mut body = json!(s.table.status());
            body["outcome"] = json!(match outcome {
                ReloadOutcome::Installed => "installed",
                ReloadOutcome::Unchanged => "unchanged",
            });
            Json(body).into_response()
        }
        Err(errors) => problem(Problem::InvalidTable {
            serving: s.table.current().version.clone(),
            errors: errors.0.iter().map(ToString::to_string).collect(),
        }),
    }
}
