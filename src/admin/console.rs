//! The support console (docs/admin.md): one page and its script, compiled into the binary (no
//! build step, no CDN), served on `admin_listen` at `GET /` and `GET /console.js`.
//!
//! The page holds no data: it reads the admin JSON API with the session cookie and renders
//! it with DOM calls (never `innerHTML`, since ids and error texts come from clients), so it
//! is served without a token and asks for one when the API answers 401. Its headers keep
//! it to itself: a Content-Security-Policy without inline script or other origins, no
//! framing, no caching, no referrer.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const PAGE: &str = include_str!("console.html");
const SCRIPT: &str = include_str!("console.js");

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src 'self' data:; form-action 'self'; \
                   base-uri 'none'; frame-ancestors 'none'";

fn hardened(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_FRAME_OPTIONS, "DENY"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-store"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        body,
    )
        .into_response()
}

/// `GET /`: the console page.
pub async fn page() -> Response {
    hardened("text/html; charset=utf-8", PAGE)
}

/// `GET /console.js`: the page's script.
pub async fn script() -> Response {
    hardened("text/javascript; charset=utf-8", SCRIPT)
}
