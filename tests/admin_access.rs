//! The admin API's access rules of docs/admin.md that a browser can be steered around, over real
//! sockets: cross-origin state changes and DNS rebinding against a tokenless loopback admin,
//! random server-side sessions that expire and end, and the throttle of wrong tokens.

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use common::{client, ConfigYaml, Router, Upstream};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "a-32-character-admin-token-00001";
const ROTATED: &str = "a-32-character-admin-token-00002";

/// A router on loopback; `admin` is the body of its `admin:` map, if any.
async fn start(admin: Option<&str>) -> (Router, Upstream) {
    let up = Upstream::start("eu").await;
    let dir = tempfile::tempdir().expect("tempdir");
    common::write(
        &dir,
        "routing-table.yaml",
        &common::lettered_table("access", &[&[up.url()]]),
    );
    common::write(&dir, "admin-token", &format!("{TOKEN}\n"));
    let mut config = ConfigYaml::new().route_path("/v1/orders/{id}").watch(false);
    if let Some(admin) = admin {
        config = config.extra(&format!("admin: {{ {admin} }}"));
    }
    (Router::start_in(dir, &config.yaml()).await, up)
}

/// A response read off a raw connection.
struct Raw {
    status: u16,
    head: String,
    body: String,
}

/// Sends `method path` to `addr` with exactly the `headers` given (no `Host` unless given),
/// on its own connection.
async fn raw(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> Raw {
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if method == "POST" {
        req.push_str("Content-Length: 0\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    let mut conn = TcpStream::connect(addr).await.expect("connect");
    conn.write_all(req.as_bytes()).await.expect("send");
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut buf))
        .await
        .expect("an answer in time")
        .expect("read");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    Raw {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

fn problem_type(r: &Raw) -> String {
    assert!(
        r.head.contains("content-type: application/problem+json"),
        "{}",
        r.head
    );
    let v: serde_json::Value = serde_json::from_str(&r.body).expect("problem json");
    v["type"].as_str().expect("type").to_owned()
}

/// Issue 25 item 6: without a token, a POST from another origin, or `null`, was answered
/// 200 and reloaded the table. docs/admin.md: 403 whatever the credentials.
#[tokio::test]
async fn a_tokenless_admin_refuses_state_changes_from_other_origins() {
    let (router, _up) = start(None).await;
    let host = router.admin.to_string();
    let own = format!("http://{host}");
    let other_scheme = format!("https://{host}");
    let other_port = format!("http://127.0.0.1:{}", router.admin.port() ^ 1);
    for origin in [
        "http://evil.example",
        "null",
        &other_scheme,
        &other_port,
        "http://localhost",
    ] {
        let r = raw(
            router.admin,
            "POST",
            "/admin/reload",
            &[("Host", &host), ("Origin", origin)],
        )
        .await;
        assert_eq!(r.status, 403, "Origin {origin}: {}", r.body);
        assert_eq!(problem_type(&r), "urn:iuid-router:problem:foreign-origin");
    }
    // The console's own page and a client that is no browser (no Origin) still reload.
    for headers in [
        vec![("Host", host.as_str()), ("Origin", own.as_str())],
        vec![("Host", host.as_str())],
    ] {
        let r = raw(router.admin, "POST", "/admin/reload", &headers).await;
        assert_eq!(r.status, 200, "{headers:?}: {}", r.body);
    }
}

/// Issue 25 item 9: a page on `rebind.evil.example` whose name resolves to 127.0.0.1 is the
/// same origin as itself: without a `Host` check it read the table and reloaded it. A
/// tokenless admin answers only to loopback names and `admin.allowed_hosts`.
#[tokio::test]
async fn a_tokenless_admin_answers_only_to_loopback_and_allowed_hosts() {
    let (router, _up) = start(None).await;
    let port = router.admin.port();
    let rebound = format!("rebind.evil.example:{port}");
    let rebound_origin = format!("http://{rebound}");
    let r = raw(
        router.admin,
        "GET",
        "/admin/routing-table",
        &[("Host", &rebound)],
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert_eq!(problem_type(&r), "urn:iuid-router:problem:host-not-allowed");
    for path in ["/", "/console.js", "/metrics", "/admin/upstreams"] {
        let r = raw(
            router.admin,
            "GET",
            path,
            &[("Host", "rebind.evil.example")],
        )
        .await;
        assert_eq!(r.status, 403, "{path}");
    }
    let r = raw(
        router.admin,
        "POST",
        "/admin/reload",
        &[("Host", &rebound), ("Origin", &rebound_origin)],
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.body);
    let r = raw(router.admin, "GET", "/admin/routing-table", &[]).await;
    assert_eq!(r.status, 403, "no Host at all: {}", r.body);
    // Probes answer whatever the Host; their answer is no secret.
    let r = raw(router.admin, "GET", "/healthz", &[("Host", &rebound)]).await;
    assert_eq!(r.status, 200);
    for good in [
        format!("127.0.0.1:{port}"),
        "127.0.0.1".to_owned(),
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
    ] {
        let r = raw(
            router.admin,
            "GET",
            "/admin/routing-table",
            &[("Host", &good)],
        )
        .await;
        assert_eq!(r.status, 200, "Host {good}: {}", r.body);
    }
    let metrics = router.metrics().await;
    assert!(
        metrics.contains("iuid_router_admin_refusals_total{reason=\"host_not_allowed\"}"),
        "counted"
    );

    // A name the operator lists (e.g. a tunnel's) is served, and is its own origin.
    let (listed, _up) = start(Some("allowed_hosts: [Console.Internal]")).await;
    let port = listed.admin.port();
    let host = format!("console.internal:{port}");
    let origin = format!("http://{host}");
    let r = raw(
        listed.admin,
        "GET",
        "/admin/routing-table",
        &[("Host", &host)],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = raw(
        listed.admin,
        "POST",
        "/admin/reload",
        &[("Host", &host), ("Origin", &origin)],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = raw(
        listed.admin,
        "GET",
        "/admin/routing-table",
        &[("Host", &rebound)],
    )
    .await;
    assert_eq!(r.status, 403);
}

async fn login(router: &Router) -> String {
    let resp = client()
        .post(router.admin_url("/admin/login"))
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .expect("login");
    assert_eq!(resp.status(), 303);
    resp.headers()["set-cookie"]
        .to_str()
        .expect("ascii")
        .to_owned()
}

async fn with_cookie(router: &Router, set_cookie: &str) -> u16 {
    let pair = set_cookie.split(';').next().expect("pair");
    client()
        .get(router.admin_url("/admin/routing-table"))
        .header("cookie", pair)
        .send()
        .await
        .expect("request")
        .status()
        .as_u16()
}

/// Issue 25 item 10: the cookie was SHA-256 of the token — the same for every login, never
/// expiring, still valid after logout. Now each login opens a random session that ends at
/// its `Max-Age`, at logout, and when the token changes.
#[tokio::test]
async fn sessions_are_random_expire_and_end_at_logout_and_token_rotation() {
    let (router, _up) = start(Some("token_file: admin-token")).await;
    let (first, second) = (login(&router).await, login(&router).await);
    assert_ne!(first, second, "every login its own session");
    let hash: String = Sha256::digest(TOKEN.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    for cookie in [&first, &second] {
        assert!(
            !cookie.contains(&hash) && !cookie.contains(TOKEN),
            "{cookie}"
        );
        assert!(
            cookie.contains("Max-Age=43200"),
            "12 h by default: {cookie}"
        );
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
        assert_eq!(with_cookie(&router, cookie).await, 200);
    }
    // A made-up session is refused like none.
    let forged = format!("iuid_router_admin={hash}");
    assert_eq!(with_cookie(&router, &forged).await, 401);

    let pair = first.split(';').next().expect("pair");
    let out = client()
        .post(router.admin_url("/admin/logout"))
        .header("cookie", pair)
        .send()
        .await
        .expect("logout");
    assert_eq!(out.status(), 204);
    assert_eq!(with_cookie(&router, &first).await, 401, "ended at logout");
    assert_eq!(with_cookie(&router, &second).await, 200, "only that one");

    std::fs::write(
        router.dir.path().join("admin-token"),
        format!("{ROTATED}\n"),
    )
    .expect("write");
    assert_eq!(
        with_cookie(&router, &second).await,
        401,
        "ended by the new token"
    );
    std::fs::write(router.dir.path().join("admin-token"), format!("{TOKEN}\n")).expect("write");
    assert_eq!(
        with_cookie(&router, &second).await,
        401,
        "and stays ended when the old token comes back"
    );

    let (short, _up) = start(Some("token_file: admin-token, session_max_age_s: 1")).await;
    let cookie = login(&short).await;
    assert!(cookie.contains("Max-Age=1"), "{cookie}");
    assert_eq!(with_cookie(&short, &cookie).await, 200);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        with_cookie(&short, &cookie).await,
        401,
        "expired server-side too"
    );
}

fn from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(ip.parse::<IpAddr>().expect("ip"))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// Issue 25 item 10: 200 wrong guesses in 0.1 s were all answered. Now, after 5 wrong
/// tokens from an address, 429 with `Retry-After`, a right token included, until the wait
/// is over; other addresses are not held up.
#[tokio::test]
async fn wrong_tokens_are_throttled_per_client_address() {
    let (router, _up) = start(Some("token_file: admin-token")).await;
    let url = router.admin_url("/admin/routing-table");
    let guesser = from("127.0.0.1");
    let started = Instant::now();
    let guesses = (0..200).map(|i| {
        let req = guesser
            .get(&url)
            .header("authorization", format!("Bearer guess-{i:027}"));
        async move { req.send().await.expect("guess") }
    });
    let answers = futures_util::future::join_all(guesses).await;
    let elapsed = started.elapsed();
    let refused: Vec<&reqwest::Response> = answers.iter().filter(|r| r.status() == 429).collect();
    let looked_at = answers.iter().filter(|r| r.status() == 401).count();
    assert_eq!(refused.len() + looked_at, 200);
    // 5 free, then one more each time the wait (1 s, 2 s, …) is over.
    let allowed = 5
        + usize::from(elapsed >= Duration::from_secs(1))
        + usize::from(elapsed >= Duration::from_secs(3));
    assert!(
        looked_at <= allowed,
        "{looked_at} guesses looked at in {elapsed:?}"
    );
    for r in &refused {
        let wait: u64 = r.headers()["retry-after"]
            .to_str()
            .expect("ascii")
            .parse()
            .expect("seconds");
        assert!((1..=300).contains(&wait), "{wait}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
    }
    let right = format!("Bearer {TOKEN}");
    let held = guesser
        .get(&url)
        .header("authorization", &right)
        .send()
        .await
        .expect("req");
    assert_eq!(held.status(), 429, "no oracle while held");
    let wait: u64 = held.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("s");
    let login = guesser
        .post(router.admin_url("/admin/login"))
        .body(format!("token={TOKEN}"))
        .send()
        .await
        .expect("login");
    assert_eq!(login.status(), 429, "the login form is held too");

    // Another address is not held up, and its own wrong logins count alike.
    let other = from("127.0.0.2");
    let ok = other
        .get(&url)
        .header("authorization", &right)
        .send()
        .await
        .expect("req");
    assert_eq!(ok.status(), 200);
    let mut statuses = Vec::new();
    for _ in 0..7 {
        let r = other
            .post(router.admin_url("/admin/login"))
            .body("token=wrong")
            .send()
            .await
            .expect("login");
        statuses.push(r.status().as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 401, 401, 429, 429]);

    // Once the wait is over, the right token opens again, and clears the count.
    tokio::time::sleep(Duration::from_secs(wait)).await;
    let ok = guesser
        .get(&url)
        .header("authorization", &right)
        .send()
        .await
        .expect("req");
    assert_eq!(ok.status(), 200);
    let again = guesser
        .get(&url)
        .header("authorization", "Bearer wrong")
        .send()
        .await
        .expect("req");
    assert_eq!(again.status(), 401);

    let metrics = guesser
        .get(router.admin_url("/metrics"))
        .header("authorization", &right)
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    assert!(metrics.contains("iuid_router_admin_refusals_total{reason=\"throttled\"}"));
}

/// `check` refuses, at file:line:column, a short token and bad `admin:` values.
#[test]
fn check_refuses_weak_or_bad_admin_settings() {
    for (admin, token, says) in [
        (
            "token_file: admin-token",
            "s3cret-admin-token",
            "at least 32",
        ),
        (
            "token_file: admin-token, session_max_age_s: 0",
            TOKEN,
            "session_max_age_s",
        ),
        (
            "token_file: admin-token, session_max_age_s: 99999999",
            TOKEN,
            "session_max_age_s",
        ),
        (
            "allowed_hosts: [\"http://console.internal:80\"]",
            TOKEN,
            "not a host name",
        ),
        ("allowed_hosts: [\"*.internal\"]", TOKEN, "not a host name"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        common::write(
            &dir,
            "routing-table.yaml",
            &common::lettered_table("check", &[&["http://127.0.0.1:1".to_owned()]]),
        );
        common::write(&dir, "admin-token", &format!("{token}\n"));
        let config = ConfigYaml::new()
            .extra(&format!("admin: {{ {admin} }}"))
            .yaml();
        let path = common::write(&dir, "router.yaml", &config);
        let checked = common::check(&path);
        let err = checked.output;
        assert_eq!(checked.code, Some(1), "{admin}: {err}");
        assert!(
            err.contains(says) && err.contains("router.yaml:"),
            "{admin}: {err}"
        );
    }
}
