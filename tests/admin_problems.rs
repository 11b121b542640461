//! The admin API's refusals are problem+json like every other (docs/admin.md, issue 63): an
//! unknown path, `/admin/tls` without `tls:`, `/admin/login` without a token file; and
//! `/admin/tls`'s `loaded_at` is in milliseconds like every admin timestamp. Over real sockets.

mod common;

use common::{client, ConfigYaml, Router, Upstream};
use serde_json::Value;

const TOKEN: &str = "s3cret-admin-token-of-32-chars-xx";

/// A router over one upstream; `extra` config lines, files of `files` beside its config.
async fn router(extra: &str, files: &[(&str, String)]) -> (Router, Upstream) {
    let up = Upstream::start("eu").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let table = common::lettered_table("problems", &[&[up.url()]]);
    common::write(&dir, "routing-table.yaml", &table);
    for (name, text) in files {
        common::write(&dir, name, text);
    }
    let mut config = ConfigYaml::new().route_path("/v1/orders/{id}").watch(false);
    if !extra.is_empty() {
        config = config.extra(extra);
    }
    (Router::start_in(dir, &config.yaml()).await, up)
}

/// The answer's status and its problem+json body; panics if it is not problem+json.
async fn problem(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let content_type = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = resp.text().await.expect("body");
    assert_eq!(
        content_type, "application/problem+json",
        "status {status}, body {body:?}"
    );
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body:?}"));
    assert_eq!(v["status"], status, "{v}");
    (status, v)
}

fn is_type(v: &Value, slug: &str) -> bool {
    v["type"] == format!("urn:iuid-router:problem:{slug}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_admin_path_is_404_problem_json() {
    let (router, _up) = router("", &[]).await;
    for (method, path) in [
        ("GET", "/admin/nope"),
        ("GET", "/nope"),
        ("POST", "/admin/nope"),
        ("GET", "/admin/routing-table/nope"),
    ] {
        let resp = client()
            .request(method.parse().expect("method"), router.admin_url(path))
            .send()
            .await
            .expect("admin");
        let (status, v) = problem(resp).await;
        assert_eq!(status, 404, "{method} {path}: {v}");
        assert!(is_type(&v, "not-found"), "{method} {path}: {v}");
        assert!(v["detail"].as_str().is_some_and(|d| !d.is_empty()), "{v}");
    }
    // Known routes still answer.
    let resp = client()
        .get(router.admin_url("/admin/routing-table"))
        .send()
        .await
        .expect("admin");
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_admin_path_needs_the_token_first() {
    let (router, _up) = router(
        "admin: { token_file: admin-token }",
        &[("admin-token", format!("{TOKEN}\n"))],
    )
    .await;
    // No token: 401 as for any protected route; the path's existence is not revealed.
    let resp = client()
        .get(router.admin_url("/admin/nope"))
        .send()
        .await
        .expect("admin");
    assert!(resp.headers().contains_key("www-authenticate"));
    let (status, v) = problem(resp).await;
    assert_eq!(status, 401, "{v}");
    assert!(is_type(&v, "unauthorized"), "{v}");
    // With the token: 404 not-found.
    let resp = client()
        .get(router.admin_url("/admin/nope"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("admin");
    let (status, v) = problem(resp).await;
    assert_eq!(status, 404, "{v}");
    assert!(is_type(&v, "not-found"), "{v}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_login_when_off_are_404_problem_json() {
    let (router, _up) = router("", &[]).await;
    let resp = client()
        .get(router.admin_url("/admin/tls"))
        .send()
        .await
        .expect("admin");
    let (status, v) = problem(resp).await;
    assert_eq!(status, 404, "{v}");
    assert!(is_type(&v, "not-found"), "{v}");
    assert!(
        v["detail"].as_str().unwrap_or_default().contains("tls"),
        "{v}"
    );

    let resp = client()
        .post(router.admin_url("/admin/login"))
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .expect("admin");
    assert!(!resp.headers().contains_key("set-cookie"));
    let (status, v) = problem(resp).await;
    assert_eq!(status, 404, "{v}");
    assert!(is_type(&v, "not-found"), "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("token_file"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_loaded_at_is_in_milliseconds() {
    let certs = tempfile::tempdir().expect("tempdir");
    common::make_certs(certs.path(), false, &["localhost"]);
    let before = time::OffsetDateTime::now_utc();
    let (router, _up) = router(&common::tls_lines(certs.path()), &[]).await;
    let after = time::OffsetDateTime::now_utc();
    let resp = client()
        .get(router.admin_url("/admin/tls"))
        .send()
        .await
        .expect("admin");
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.expect("json");
    let text = v["loaded_at"].as_str().expect("loaded_at");
    let loaded = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|e| panic!("loaded_at {text} is not RFC 3339: {e}"));
    assert_eq!(
        loaded.nanosecond() % 1_000_000,
        0,
        "loaded_at {text} is in milliseconds"
    );
    // At most three fractional digits, as `/admin/routing-table`'s `loaded_at`.
    let fraction = text
        .split_once('.')
        .map_or("", |(_, f)| f.trim_end_matches('Z'));
    assert!(fraction.len() <= 3, "loaded_at {text}");
    let ms = time::Duration::milliseconds(1);
    assert!(
        loaded >= before - ms && loaded <= after + ms,
        "loaded_at {text} between {before} and {after}"
    );
}
