//! Access to the admin API (SPEC §13): with `admin.token_file`, every admin route but
//! `/healthz` and `/readyz` needs `Authorization: Bearer <token>` or the session cookie that
//! `POST /admin/login` sets; a state-changing request from another origin is refused.
//!
//! - The token file is read on every check (admin requests are rare), so a new token takes
//!   effect at once, without a restart.
//! - Comparisons are constant-time, so the response time says nothing of how much of a guess
//!   was right.
//! - The cookie holds a SHA-256 of the token, not the token: `HttpOnly` (page scripts cannot
//!   read it), `SameSite=Strict` (other sites' pages cannot send it), and it stops working
//!   when the token changes.
//! - A `POST` whose `Origin` is another origin, or `null`, is 403 whatever its credentials:
//!   a browser holding the cookie must not be steered into reloading the table.

use std::path::PathBuf;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::problem::Problem;

/// The session cookie's name.
pub const COOKIE: &str = "iuid_router_admin";

/// Routes open without a token: load balancers and kubelets probe the first two; the
/// console's page and script hold no data and ask for the token themselves.
const OPEN: [&str; 4] = ["/healthz", "/readyz", "/", "/console.js"];

/// The token, read from its file now (trimmed); `None` if unreadable or empty.
async fn token(path: &std::path::Path) -> Option<String> {
    let path = path.to_path_buf();
    let text = tokio::task::spawn_blocking(move || std::fs::read_to_string(path))
        .await
        .ok()?
        .ok()?;
    let token = text.trim().to_owned();
    (!token.is_empty()).then_some(token)
}

/// `a == b` in time that depends on their lengths only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The session cookie's value for `token`.
pub fn session(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
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

/// Whether a state-changing request comes from another origin than the admin API's own
/// (`Origin` absent — a non-browser client — is allowed).
fn foreign_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let own = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    match (own, host) {
        (Some(own), Some(host)) => !own.eq_ignore_ascii_case(host),
        _ => true,
    }
}

/// A refusal, counted, through the one problem+json renderer.
fn refusal(problem: Problem) -> Response {
    crate::metrics::admin_refusal(match problem {
        Problem::ForeignOrigin => "foreign_origin",
        _ => "unauthorized",
    });
    problem.into_response().map(axum::body::Body::new)
}

/// The middleware: passes open routes, refuses foreign-origin state changes, then checks
/// the bearer token or the session cookie against the token file.
pub async fn require(
    State(token_file): State<Option<PathBuf>>,
    req: Request,
    next: Next,
) -> Response {
    let Some(path) = token_file else {
        return next.run(req).await;
    };
    if OPEN.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let changes = !matches!(*req.method(), Method::GET | Method::HEAD);
    if changes && foreign_origin(req.headers()) {
        return refusal(Problem::ForeignOrigin);
    }
    let Some(token) = token(&path).await else {
        tracing::error!(file = %path.display(), "the admin token file is unreadable or empty; refusing every admin request");
        return refusal(Problem::Unauthorized("the admin token is not available"));
    };
    let by_bearer = bearer(req.headers()).is_some_and(|b| constant_time_eq(b, token.as_bytes()));
    let by_cookie = cookie(req.headers())
        .is_some_and(|c| constant_time_eq(c.as_bytes(), session(&token).as_bytes()));
    if by_bearer || by_cookie || req.uri().path() == "/admin/login" {
        return next.run(req).await;
    }
    refusal(Problem::Unauthorized(
        "send Authorization: Bearer <token> (admin.token_file), or log in at POST /admin/login",
    ))
}

/// `POST /admin/login` with the token as the body: sets the session cookie (303 to `/`), or
/// 401 for a wrong token.
pub async fn login(State(token_file): State<Option<PathBuf>>, body: String) -> Response {
    let Some(path) = token_file else {
        return (
            StatusCode::NOT_FOUND,
            "no admin.token_file: nothing to log in to\n",
        )
            .into_response();
    };
    let given = body
        .trim()
        .strip_prefix("token=")
        .unwrap_or(body.trim())
        .to_owned();
    match token(&path).await {
        Some(token) if constant_time_eq(given.as_bytes(), token.as_bytes()) => {
            let cookie = format!(
                "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/",
                session(&token)
            );
            let mut resp = (StatusCode::SEE_OTHER, "").into_response();
            if let Ok(v) = HeaderValue::from_str(&cookie) {
                resp.headers_mut().insert(header::SET_COOKIE, v);
            }
            resp.headers_mut()
                .insert(header::LOCATION, HeaderValue::from_static("/"));
            resp
        }
        _ => refusal(Problem::Unauthorized("wrong token")),
    }
}

/// `POST /admin/logout`: expires the session cookie (204).
pub async fn logout() -> Response {
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
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:9901"));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:9901"),
        );
        assert!(!foreign_origin(&h));
        h.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert!(foreign_origin(&h));
        h.insert(header::ORIGIN, HeaderValue::from_static("null"));
        assert!(foreign_origin(&h));
    }
}
