//! Admin API access (docs/admin.md) over real sockets: the bearer token, the console's session
//! cookie, cross-origin refusals, and the refusal to start reachable and open.

mod common;

use std::process::Command;

use common::{client, iuid_for, ConfigYaml, Router, Upstream};

const TOKEN: &str = "s3cret-admin-token-of-32-chars-xx";

async fn router() -> (Router, Upstream) {
    let up = Upstream::start("eu").await;
    let dir = tempfile::tempdir().expect("tempdir");
    common::write(
        &dir,
        "routing-table.yaml",
        &common::lettered_table("auth", &[&[up.url()]]),
    );
    common::write(&dir, "admin-token", &format!("{TOKEN}\n"));
    let config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .watch(false)
        .extra("admin: { token_file: admin-token }")
        .yaml();
    (Router::start_in(dir, &config).await, up)
}

/// Every admin route but `/healthz` and `/readyz`, with its method.
fn protected() -> Vec<(&'static str, String)> {
    vec![
        ("GET", "/metrics".to_owned()),
        ("GET", "/admin/routing-table".to_owned()),
        ("GET", format!("/admin/resolve/{}", iuid_for(1))),
        ("GET", "/admin/tls".to_owned()),
        ("GET", "/admin/upstreams".to_owned()),
        ("GET", format!("/admin/decode/{}", iuid_for(1))),
        ("GET", "/admin/routing-table/summary".to_owned()),
        ("GET", "/admin/rates".to_owned()),
        ("POST", "/admin/reload".to_owned()),
        ("POST", "/admin/logout".to_owned()),
    ]
}

async fn send(
    router: &Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = match method {
        "POST" => client().post(router.admin_url(path)),
        _ => client().get(router.admin_url(path)),
    };
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.expect("admin request")
}

#[tokio::test]
async fn every_protected_route_needs_the_token() {
    let (router, _up) = router().await;
    for open in ["/healthz", "/readyz"] {
        assert_eq!(
            send(&router, "GET", open, &[]).await.status(),
            200,
            "{open}"
        );
    }
    let bearer = format!("Bearer {TOKEN}");
    for (method, path) in protected() {
        let resp = send(&router, method, &path, &[]).await;
        assert_eq!(resp.status(), 401, "{method} {path}");
        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        let wrong = send(&router, method, &path, &[("authorization", "Bearer guess")]).await;
        assert_eq!(wrong.status(), 401, "{method} {path} with a wrong token");
        let ok = send(&router, method, &path, &[("authorization", &bearer)]).await;
        // /admin/tls is 404 without `tls:`, past the check; logout answers 204.
        let want = match path.as_str() {
            "/admin/tls" => 404,
            "/admin/logout" => 204,
            _ => 200,
        };
        assert_eq!(ok.status(), want, "{method} {path} with the token");
    }
    // Two refusals a route (none and a wrong token), counted for alerting. The recorder is
    // the process's, shared with the other tests here: at least these.
    let metrics = send(&router, "GET", "/metrics", &[("authorization", &bearer)])
        .await
        .text()
        .await
        .expect("metrics");
    let counted: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("iuid_router_admin_refusals_total{reason=\"unauthorized\"} "))
        .and_then(|v| v.parse().ok())
        .expect("the refusal counter");
    assert!(counted >= 2.0 * protected().len() as f64, "{counted}");
}

#[tokio::test]
async fn login_sets_a_strict_http_only_cookie_that_opens_the_api() {
    let (router, _up) = router().await;
    let wrong = client()
        .post(router.admin_url("/admin/login"))
        .body("token=nope")
        .send()
        .await
        .expect("login");
    assert_eq!(wrong.status(), 401);
    let resp = client()
        .post(router.admin_url("/admin/login"))
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .expect("login");
    assert_eq!(resp.status(), 303);
    let cookie = resp.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(
        !cookie.contains(TOKEN),
        "the cookie does not carry the token itself"
    );
    let pair = cookie.split(';').next().expect("pair").to_owned();
    let ok = send(&router, "GET", "/admin/routing-table", &[("cookie", &pair)]).await;
    assert_eq!(ok.status(), 200);
}

/// The console's page and script hold no data: served without a token, locked down by
/// their headers; the page then asks for the token.
#[tokio::test]
async fn the_console_page_is_open_and_locked_down() {
    let (router, _up) = router().await;
    for (path, kind) in [("/", "text/html"), ("/console.js", "text/javascript")] {
        let resp = send(&router, "GET", path, &[]).await;
        assert_eq!(resp.status(), 200, "{path}");
        let h = resp.headers();
        assert!(h["content-type"].to_str().expect("ascii").starts_with(kind));
        let csp = h["content-security-policy"].to_str().expect("ascii");
        assert!(
            csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"),
            "{csp}"
        );
        assert_eq!(h["x-frame-options"], "DENY");
        assert_eq!(h["cache-control"], "no-store");
    }
    let page = send(&router, "GET", "/", &[])
        .await
        .text()
        .await
        .expect("page");
    assert!(page.contains("id=\"login-form\"") && page.contains("src=\"/console.js\""));
    assert!(
        !page.contains("<script>"),
        "no inline script: the CSP forbids it"
    );
}

#[tokio::test]
async fn logout_expires_the_cookie() {
    let (router, _up) = router().await;
    let resp = send(
        &router,
        "POST",
        "/admin/logout",
        &[("authorization", &format!("Bearer {TOKEN}"))],
    )
    .await;
    assert_eq!(resp.status(), 204);
    let cookie = resp.headers()["set-cookie"].to_str().expect("ascii");
    assert!(
        cookie.starts_with("iuid_router_admin=;") && cookie.contains("Max-Age=0"),
        "{cookie}"
    );
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
}

#[tokio::test]
async fn a_cross_origin_state_change_is_refused() {
    let (router, _up) = router().await;
    let bearer = format!("Bearer {TOKEN}");
    let own = format!("http://{}", router.admin);
    for path in ["/admin/reload", "/admin/login", "/admin/logout"] {
        for origin in ["https://evil.example", "null"] {
            let resp = send(
                &router,
                "POST",
                path,
                &[("authorization", &bearer), ("origin", origin)],
            )
            .await;
            assert_eq!(resp.status(), 403, "{path} from {origin}");
        }
    }
    let same = send(
        &router,
        "POST",
        "/admin/reload",
        &[("authorization", &bearer), ("origin", &own)],
    )
    .await;
    assert_eq!(same.status(), 200);
}

#[tokio::test]
async fn a_new_token_in_the_file_takes_effect_at_once() {
    let (router, _up) = router().await;
    let rotated = "rotated-admin-token-of-32-chars-x";
    std::fs::write(
        router.dir.path().join("admin-token"),
        format!("{rotated}\n"),
    )
    .expect("write");
    let old = send(
        &router,
        "GET",
        "/metrics",
        &[("authorization", &format!("Bearer {TOKEN}"))],
    )
    .await;
    assert_eq!(old.status(), 401);
    let new = send(
        &router,
        "GET",
        "/metrics",
        &[("authorization", &format!("Bearer {rotated}"))],
    )
    .await;
    assert_eq!(new.status(), 200);
}

/// `admin_listen` on a non-loopback address without a token: `check` and `serve` refuse,
/// exit 1, naming `admin.token_file`.
#[test]
fn an_admin_api_reachable_from_other_hosts_needs_a_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    common::write(
        &dir,
        "routing-table.yaml",
        &common::lettered_table("auth", &[&["http://127.0.0.1:1".to_owned()]]),
    );
    let port = common::free_port().port();
    let config = ConfigYaml::new()
        .listen(common::free_port())
        .extra(&format!("admin_listen: 0.0.0.0:{port}"))
        .yaml();
    let path = common::write(&dir, "router.yaml", &config);
    for command in ["check", "serve"] {
        let out = Command::new(env!("CARGO_BIN_EXE_iuid-router"))
            .args([command, "--config", path.to_str().expect("utf8")])
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(1), "{command}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("admin.token_file") && err.contains("router.yaml:"),
            "{command}: {err}"
        );
    }
}
