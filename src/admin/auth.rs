//! Access to the admin API (docs/admin.md).
//!
//! With `admin.token_file`, every admin route but `/healthz`, `/readyz` and the console's
//! page needs `Authorization: Bearer <token>` or the session cookie that `POST /admin/login`
//! sets:
//! - The token file is read on every check (admin requests are rare), so a new token takes
//!   effect at once, without a restart — and ends every session opened with the old one.
//! - A session is 256 random bits, kept server-side (as a SHA-256) until its `Max-Age`
//!   (`admin.session_max_age_s`, default 12 h) or logout; the cookie is `HttpOnly` (page
//!   scripts cannot read it) and `SameSite=Strict` (other sites' pages cannot send it).
//! - Wrong tokens, at login or as `Bearer`, are throttled per client address: after 5, 429
//!   with `Retry-After`, the wait doubling with each further one (`sessions`).
//! - Comparisons are constant-time, so the response time says nothing of how much of a guess
//!   was right.
//!
//! Without a token the admin API listens on loopback only (the config refuses otherwise), so
//! a web page in the operator's browser is the one way in, by DNS rebinding or a cross-site
//! form: the API then answers only to `Host` 127.0.0.1, localhost, \[::1\] or a name of
//! `admin.allowed_hosts`.
//!
//! Either way, a state-changing request whose `Origin` is not the API's own — scheme, host and
//! port (RFC 6454 §5) — or is `null`, is 403 whatever its credentials.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Extension, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::sessions::{digest, Digest32, Sessions, Throttle};
use crate::config::{AdminSettings, MIN_TOKEN_CHARS};
use crate::problem::Problem;

/// The session cookie's name.
pub const COOKIE: &str = "iuid_router_admin";

/// Routes open without a token: load balancers and kubelets probe the first two; the
/// console's page and script hold no data and ask for the token themselves.
const OPEN: [&str; 4] = ["/healthz", "/readyz", "/", "/console.js"];

/// Routes a tokenless admin serves whatever the `Host`: probes, whose answer is no secret.
const PROBES: [&str; 2] = ["/healthz", "/readyz"];

/// The `Host` names a tokenless admin always answers to (any port).
const LOOPBACK_HOSTS: [&str; 3] = ["127.0.0.1", "localhost", "[::1]"];

/// The admin API's access state: its settings, the live sessions and the throttle.
#[derive(Debug)]
pub struct Access {
    settings: AdminSettings,
    sessions: Mutex<Sessions>,
    throttle: Mutex<Throttle>,
}

/// The client's address, as the middleware found it, for the login handler.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub IpAddr);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Access {
    /// The access state for `settings`, with no session yet.
    pub fn new(settings: AdminSettings) -> Arc<Access> {
        Arc::new(Access {
            settings,
            sessions: Mutex::default(),
            throttle: Mutex::default(),
        })
    }

    fn max_age(&self) -> Duration {
        Duration::from_secs(self.settings.session_max_age_s)
    }

    /// Whether a tokenless admin answers to `host` (a `Host` value, with or without port).
    fn known_host(&self, host: &str) -> bool {
        let name = host_name(host);
        !name.is_empty()
            && (LOOPBACK_HOSTS.iter().any(|k| k.eq_ignore_ascii_case(name))
                || self
                    .settings
                    .allowed_hosts
                    .iter()
                    .any(|k| k.eq_ignore_ascii_case(name)))
    }
}

/// `host` without its `:port`; an IPv6 literal keeps its brackets.
fn host_name(host: &str) -> &str {
    let end = match host.rfind(':') {
        Some(i)
            if !host[i..].contains(']') && host[i + 1..].bytes().all(|b| b.is_ascii_digit()) =>
        {
            i
        }
        _ => host.len(),
    };
    if host.starts_with('[') && !host[..end].ends_with(']') {
        // `[::1` or a bare IPv6 address: not a valid Host.
        return "";
    }
    &host[..end]
}

/// The token, read from its file now (trimmed); `None` if unreadable, empty or shorter than
/// [`MIN_TOKEN_CHARS`] (as `check` refuses, the file may have changed since).
async fn token(path: &std::path::Path) -> Option<String> {
    let path = path.to_path_buf();
    let text = tokio::task::spawn_blocking(move || std::fs::read_to_string(path))
        .await
        .ok()?
        .ok()?;
    let token = text.trim().to_owned();
    (token.chars().count() >= MIN_TOKEN_CHARS).then_some(token)
}

/// `a == b` in time that depends on their lengths only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A new session id: 32 bytes of the TLS stack's CSPRNG, in hex (64 characters).
fn new_session_id() -> Option<String> {
    let mut bytes = [0u8; 32];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .ok()?;
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let scheme = value.get(..7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| value[7..].trim_ascii())
}

fn cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == COOKIE).then_some(value)
        })
}

/// The request's `Host`, or its URI's authority (HTTP/2 `:authority`).
fn request_host(req: &Request) -> Option<&str> {
    match req.headers().get(header::HOST) {
        Some(v) => v.to_str().ok(),
        None => req.uri().authority().map(|a| a.as_str()),
    }
}

/// Whether a request's `Origin` is another origin than the admin API's own, which is
/// `http://` and the request's `host` (RFC 6454 §5: scheme, host and port; the API is
/// served over plain HTTP). `Origin` absent — a non-browser client — is not foreign; `null`
/// is.
fn foreign_origin(headers: &HeaderMap, host: Option<&str>) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return false;
    };
    let origin = origin.as_bytes();
    let (Some(scheme), Some(host)) = (origin.get(..7), host) else {
        return true;
    };
    !(scheme.eq_ignore_ascii_case(b"http://") && origin[7..].eq_ignore_ascii_case(host.as_bytes()))
}

/// A refusal, counted by reason, through the one problem+json renderer.
fn refusal(problem: Problem) -> Response {
    use crate::metrics::AdminRefusal;
    crate::metrics::admin_refusal(match problem {
        Problem::ForeignOrigin => AdminRefusal::ForeignOrigin,
        Problem::HostNotAllowed => AdminRefusal::HostNotAllowed,
        Problem::TooManyAttempts { .. } => AdminRefusal::Throttled,
        _ => AdminRefusal::Unauthorized,
    });
    problem.into_response().map(axum::body::Body::new)
}

/// The middleware: checks `Host` (tokenless) and `Origin`, then the session cookie or the
/// bearer token; `/admin/login` checks its body itself.
pub async fn require(State(access): State<Arc<Access>>, mut req: Request, next: Next) -> Response {
    let addr = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
    req.extensions_mut().insert(ClientAddr(addr));
    let path = req.uri().path();
    let changes = !matches!(*req.method(), Method::GET | Method::HEAD);
    let Some(file) = &access.settings.token_file else {
        if !PROBES.contains(&path) && !request_host(&req).is_some_and(|h| access.known_host(h)) {
            return refusal(Problem::HostNotAllowed);
        }
        if changes && foreign_origin(req.headers(), request_host(&req)) {
            return refusal(Problem::ForeignOrigin);
        }
        return next.run(req).await;
    };
    if OPEN.contains(&path) {
        return next.run(req).await;
    }
    if changes && foreign_origin(req.headers(), request_host(&req)) {
        return refusal(Problem::ForeignOrigin);
    }
    if path == "/admin/login" {
        return next.run(req).await;
    }
    let Some(token) = token(file).await else {
        tracing::error!(file = %file.display(), "the admin token file is unreadable, empty or shorter than {MIN_TOKEN_CHARS} characters; refusing every admin request");
        return refusal(Problem::Unauthorized("the admin token is not available"));
    };
    let now = Instant::now();
    let session = cookie(req.headers()).map(|c| digest(c.as_bytes()));
    if let Some(id) = &session {
        if lock(&access.sessions).check(id, &digest(token.as_bytes()), now) {
            return next.run(req).await;
        }
    }
    let Some(given) = bearer(req.headers()) else {
        return refusal(Problem::Unauthorized(if session.is_some() {
            "the session has ended (expired, logged out, or the token changed): log in again"
        } else {
            "send Authorization: Bearer <token> (admin.token_file), or log in at POST /admin/login"
        }));
    };
    if let Err(refused) = attempt(&access, addr, given, &token, now) {
        return refusal(refused);
    }
    next.run(req).await
}

/// One try of a token from `addr`, throttled: `Err` is the refusal (429 or 401) to answer.
fn attempt(
    access: &Access,
    addr: IpAddr,
    given: &[u8],
    token: &str,
    now: Instant,
) -> Result<(), Problem> {
    let mut throttle = lock(&access.throttle);
    if let Some(retry_after) = throttle.wait(addr, now) {
        drop(throttle);
        return Err(Problem::TooManyAttempts { retry_after });
    }
    if constant_time_eq(given, token.as_bytes()) {
        throttle.succeed(addr);
        Ok(())
    } else {
        throttle.fail(addr, now);
        drop(throttle);
        tracing::warn!(client = %addr, "wrong admin token");
        Err(Problem::Unauthorized("wrong token"))
    }
}

/// `POST /admin/login` with the token as the body (`token=` optional): opens a session and
/// sets its cookie (303 to `/`); 401 for a wrong token, 429 (`Retry-After`) while the
/// address is throttled; 404 `not-found` without a token file.
pub async fn login(
    State(access): State<Arc<Access>>,
    Extension(ClientAddr(addr)): Extension<ClientAddr>,
    body: String,
) -> Response {
    let Some(file) = &access.settings.token_file else {
        return Problem::NotFound("no admin.token_file: nothing to log in to")
            .into_response()
            .map(axum::body::Body::new);
    };
    let given = body.trim();
    let given = given.strip_prefix("token=").unwrap_or(given);
    let Some(token) = token(file).await else {
        return refusal(Problem::Unauthorized("the admin token is not available"));
    };
    let now = Instant::now();
    if let Err(refused) = attempt(&access, addr, given.as_bytes(), &token, now) {
        return refusal(refused);
    }
    let Some(id) = new_session_id() else {
        tracing::error!("no random bytes for a session id");
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "no session could be opened\n",
        )
            .into_response();
    };
    let token: Digest32 = digest(token.as_bytes());
    lock(&access.sessions).open(digest(id.as_bytes()), &token, now, access.max_age());
    let cookie = format!(
        "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
        access.settings.session_max_age_s
    );
    let mut resp = (StatusCode::SEE_OTHER, "").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        resp.headers_mut().insert(header::SET_COOKIE, v);
    }
    resp.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static("/"));
    resp
}

/// `POST /admin/logout`: ends the session server-side and expires its cookie (204).
pub async fn logout(State(access): State<Arc<Access>>, headers: HeaderMap) -> Response {
    if let Some(c) = cookie(&headers) {
        lock(&access.sessions).close(&digest(c.as_bytes()));
    }
    let mut resp = StatusCode::NO_CONTENT.into_response();
    resp.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static(
            "iuid_router_admin=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0",
        ),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comparisons_and_headers() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer  s3cret "),
        );
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; iuid_router_admin=xyz"),
        );
        assert_eq!(bearer(&h), Some(&b"s3cret"[..]));
        assert_eq!(cookie(&h), Some("xyz"));
        let host = Some("127.0.0.1:9901");
        assert!(!foreign_origin(&h, host), "no Origin: not a browser");
        for (origin, foreign) in [
            ("http://127.0.0.1:9901", false),
            ("HTTP://127.0.0.1:9901", false),
            ("https://127.0.0.1:9901", true),
            ("http://127.0.0.1:9902", true),
            ("http://127.0.0.1", true),
            ("https://evil.example", true),
            ("null", true),
        ] {
            h.insert(header::ORIGIN, HeaderValue::from_static(origin));
            assert_eq!(foreign_origin(&h, host), foreign, "{origin}");
        }
        assert!(foreign_origin(&h, None));
    }

    #[test]
    fn hosts_a_tokenless_admin_answers_to() {
        let access = Access::new(AdminSettings {
            allowed_hosts: vec!["console.internal".to_owned()],
            ..AdminSettings::default()
        });
        for ok in [
            "127.0.0.1",
            "127.0.0.1:9901",
            "localhost:1",
            "LOCALHOST",
            "[::1]",
            "[::1]:9901",
            "console.internal:80",
        ] {
            assert!(access.known_host(ok), "{ok}");
        }
        for bad in [
            "rebind.evil.example",
            "rebind.evil.example:9901",
            "127.0.0.2",
            "::1",
            "[::1",
            "localhost.evil.example",
            "evil@127.0.0.1",
            "127.0.0.1:80x",
            "",
        ] {
            assert!(!access.known_host(bad), "{bad}");
        }
    }
}
