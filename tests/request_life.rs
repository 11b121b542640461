//! One request, one life: whatever carried a request (the own engine's head path; the head
//! path bridged into the shared phases for an upgrade, an absolute-form target, a chunked
//! GraphQL body or a legacy probe; h2c; TLS h2; gRPC; HTTP/3) and whatever route kind found its id,
//! it leaves exactly one access log line (`iuid_router::access`), one increment of
//! `iuid_router_requests_total` and one server span (`request`, DEBUG, under
//! `iuid_router::proxy`, its `request_id` the client's `x-request-id`). Each attempt at an
//! upstream is an `attempt` span below that span: one per region a fan-out asks, one per
//! region a legacy id is probed in, one more for a retry.
//!
//! The router runs in this process, so its spans and events reach the process's global
//! `tracing` subscriber: `common::spans` installs one that keeps every span with its fields
//! and ancestry, and every access log event. Each case sends its own request id
//! (`life-<case>`) and finds its spans and its line by it. The request counter is the
//! process's too: the tests take one lock, so that each reads its request's exact delta.

mod common;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use common::lists::ListRegion;
use common::spans::{self, Captured};
use common::{client, free_port, iuid_for, url, ConfigYaml, Router, Upstream};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::ServerName;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::Level;

const REQUESTS: &str = "iuid_router_requests_total";

/// A legacy id (a UUIDv4, no routing bits).
const LEGACY: &str = "9b2e4c1a-7d3f-4e8b-a6c5-0f1e2d3c4b5a";

/// The tests of this file one at a time (the counter is process-wide); a tokio lock, which a
/// failed test does not poison. Installs the capture first.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    spans::install();
    SERIAL.lock().await
}

/// The request id case `case` sends.
fn rid(case: &str) -> String {
    format!("life-{case}")
}

/// Every route kind of this file, `legacy: probe`, nothing unrouted (a request no route
/// routes is a 404, not a silent success), the access log on.
fn config() -> ConfigYaml {
    common::every_route_kind()
}

/// Regions `eu`, `us`, `ap` (countries 3, 2, 1), one `common::Upstream` each.
async fn three() -> String {
    let (eu, us, ap) = (
        Upstream::start("eu").await,
        Upstream::start("us").await,
        Upstream::start("ap").await,
    );
    common::three_regions("life", &eu.url(), &us.url(), &ap.url())
}

/// An upstream answering every request with `status` and no body.
async fn answering(status: u16) -> String {
    let status = http::StatusCode::from_u16(status).expect("a status");
    url(common::serve(axum::Router::new().fallback(move || async move { status })).await)
}

/// What one request left behind.
struct Life {
    case: &'static str,
    /// How much `iuid_router_requests_total` went up.
    counted: f64,
    access_lines: usize,
    /// The `request` spans with its request id.
    requests: Vec<Captured>,
    /// The `attempt` spans below any of them.
    attempts: Vec<Captured>,
    /// The names of every span below them, for a failure's message.
    below: Vec<&'static str>,
}

/// Sends one request (`send` checks its answer) and gathers what it left: waits for its count
/// and its log line (a streamed answer is counted when done), then a while longer, so that a
/// second count or line would show too.
async fn observe(router: &Router, case: &'static str, send: impl Future<Output = ()>) -> Life {
    let id = rid(case);
    let before = router.metric(REQUESTS, &[]).await;
    send.await;
    common::eventually(Duration::from_secs(3), || async {
        router.metric(REQUESTS, &[]).await > before && !spans::access_lines(&id).is_empty()
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counted = router.metric(REQUESTS, &[]).await - before;
    let requests = spans::named_with_id("request", &id);
    // By sequence number: an attempt below two request spans (one inside the other) once.
    let mut attempts = BTreeMap::new();
    let mut below = Vec::new();
    for request in &requests {
        for attempt in spans::named_under("attempt", request.seq) {
            attempts.insert(attempt.seq, attempt);
        }
        below.extend(spans::names_under(request.seq));
    }
    Life {
        case,
        counted,
        access_lines: spans::access_lines(&id).len(),
        requests,
        attempts: attempts.into_values().collect(),
        below,
    }
}

impl Life {
    /// What is wrong with the one count, one line, one server span; and the attempt spans'
    /// level.
    fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if self.counted != 1.0 {
            problems.push(format!("{REQUESTS} went up by {}, not 1", self.counted));
        }
        if self.access_lines != 1 {
            problems.push(format!("{} access log lines, not 1", self.access_lines));
        }
        if self.requests.len() != 1 {
            problems.push(format!("{} `request` spans, not 1", self.requests.len()));
        }
        for s in &self.requests {
            if s.level != Level::DEBUG || !s.target.starts_with("iuid_router::proxy") {
                problems.push(format!("a request span at {} in {}", s.level, s.target));
            }
        }
        for s in &self.attempts {
            if s.level != Level::DEBUG {
                problems.push(format!("an attempt span at {}", s.level));
            }
        }
        problems
    }

    /// The attempt spans as (region, attempt), sorted.
    fn attempts(&self) -> Vec<(String, String)> {
        let mut got: Vec<(String, String)> = self
            .attempts
            .iter()
            .map(|s| (s.field("region").to_owned(), s.field("attempt").to_owned()))
            .collect();
        got.sort();
        got
    }

    /// One count, one line, one server span, and below it attempt spans (region, attempt)
    /// `want`, in any order.
    fn check(&self, want: &[(&str, u64)]) {
        let mut want: Vec<(String, String)> = want
            .iter()
            .map(|(region, n)| ((*region).to_owned(), n.to_string()))
            .collect();
        want.sort();
        self.assert(self.attempts() == want, &format!("{want:?}"));
    }

    /// As [`Life::check`], with the attempts' regions only (their numbers unchecked).
    fn check_regions(&self, want: &[&str]) {
        let mut regions: Vec<String> = self.attempts().into_iter().map(|(r, _)| r).collect();
        regions.sort();
        self.assert(regions == want, &format!("regions {want:?}"));
    }

    fn assert(&self, attempts_ok: bool, want: &str) {
        let mut problems = self.problems();
        if !attempts_ok {
            problems.push(format!(
                "attempt spans (region, attempt) {:?}, not {want}; spans below the request: {:?}",
                self.attempts(),
                self.below
            ));
        }
        assert!(
            problems.is_empty(),
            "{}: {}",
            self.case,
            problems.join("; ")
        );
    }
}

/// Sends `req` with the case's request id; it must be answered 200 (its body read whole).
async fn ok(case: &str, req: reqwest::RequestBuilder) {
    let resp = req
        .header("x-request-id", rid(case))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    let status = resp.status();
    let body = resp.text().await.unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_eq!(status, 200, "{case}: {body}");
}

/// Sends `request` raw (it says `Connection: close`); it must be answered 200.
async fn raw_ok(case: &str, router: &Router, request: String) {
    let answer = common::raw_http(router.addr, request.into_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{case}: {answer}");
}

/// A case in front of [`three`]: `request` (from `http` and the router) must be answered 200
/// by `ap`, in one attempt.
async fn ap_case(
    case: &'static str,
    http: reqwest::Client,
    request: impl FnOnce(&reqwest::Client, &Router) -> reqwest::RequestBuilder,
) {
    let _serial = serial().await;
    let router = Router::start(&config().yaml(), &three().await).await;
    let life = observe(&router, case, ok(case, request(&http, &router))).await;
    life.check(&[("ap", 0)]);
}

fn order_path() -> String {
    format!("/v1/orders/{}", iuid_for(1))
}

fn graphql_body() -> String {
    let query = format!("{{ node(id: \"{}\") {{ id }} }}", iuid_for(1));
    serde_json::json!({ "query": query }).to_string()
}

// ---- HTTP/1.1 on the head path ----------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn h1_path_route() {
    ap_case("h1-path", client(), |c, r| c.get(r.url(&order_path()))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn h1_header_route() {
    ap_case("h1-header", client(), |c, r| {
        c.get(r.url("/v1/things"))
            .header("x-entity-id", iuid_for(1))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn h1_graphql_route() {
    // reqwest sends a `String` body with its Content-Length.
    ap_case("h1-graphql", client(), |c, r| {
        c.post(r.url("/graphql"))
            .header("content-type", "application/json")
            .body(graphql_body())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn h1_query_route() {
    ap_case("h1-query", client(), |c, r| {
        c.get(r.url(&format!("/v1/rides?order_id={}", iuid_for(1))))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn h1_json_route() {
    ap_case("h1-json", client(), |c, r| {
        c.post(r.url("/v1/payments"))
            .header("content-type", "application/json")
            .body(serde_json::json!({ "order_id": iuid_for(1) }).to_string())
    })
    .await;
}

/// A fan-out asks every region: one attempt span per region, all below the one request span.
#[tokio::test(flavor = "multi_thread")]
async fn h1_fanout_route() {
    let _serial = serial().await;
    let case = "h1-fanout";
    let lists = [
        ListRegion::start("eu").await,
        ListRegion::start("us").await,
        ListRegion::start("ap").await,
    ];
    let table = common::three_regions("life", &lists[0].url(), &lists[1].url(), &lists[2].url());
    let router = Router::start(&config().yaml(), &table).await;
    let life = observe(
        &router,
        case,
        ok(case, client().get(router.url("/v1/list"))),
    )
    .await;
    let hits: Vec<usize> = lists
        .iter()
        .map(|l| l.hits.load(Ordering::SeqCst))
        .collect();
    assert_eq!(hits, [1, 1, 1], "{case}: every region asked once");
    life.check(&[("ap", 0), ("eu", 0), ("us", 0)]);
}

/// A retry is one more attempt span: the first upstream refuses the connection, the second
/// answers.
#[tokio::test(flavor = "multi_thread")]
async fn h1_retry_after_a_refused_connect() {
    let _serial = serial().await;
    let case = "h1-retry";
    let closed = free_port();
    let live = Upstream::start("live").await;
    // A fresh region's round-robin starts at its first upstream, the closed one.
    let table = common::lettered_table("life", &[&[url(closed), live.url()]]);
    let router = Router::start(&config().yaml(), &table).await;
    let refused = || router.metric("iuid_router_upstream_errors_total", &["kind=\"connect\""]);
    let before = refused().await;
    let life = observe(
        &router,
        case,
        ok(case, client().get(router.url(&order_path()))),
    )
    .await;
    // The set-up itself, whatever the spans say: one refused connect, then the live upstream.
    assert_eq!(refused().await - before, 1.0, "{case}: one refused connect");
    assert_eq!(live.count(), 1, "{case}: the live upstream answered");
    life.check(&[("a", 0), ("a", 1)]);
    let mut tried: Vec<(String, String)> = life
        .attempts
        .iter()
        .map(|s| {
            (
                s.field("attempt").to_owned(),
                s.field("upstream").to_owned(),
            )
        })
        .collect();
    tried.sort();
    assert_eq!(
        tried,
        [
            ("0".to_owned(), closed.to_string()),
            ("1".to_owned(), live.addr.to_string())
        ],
        "{case}: (attempt, upstream)"
    );
}

// ---- HTTP/1.1 bridged into the shared phases --------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn bridged_websocket_upgrade() {
    let _serial = serial().await;
    let case = "bridged-upgrade";
    let ws = url(common::ws_echo_upstream().await);
    let table = common::three_regions("life", &ws, &ws, &ws);
    let router = Router::start(&config().yaml(), &table).await;
    let life = observe(&router, case, async {
        let mut conn = TcpStream::connect(router.addr).await.expect("connect");
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nx-request-id: {}\r\n\r\n",
            order_path(),
            rid(case)
        );
        conn.write_all(request.as_bytes()).await.expect("write");
        let head = common::read_head(&mut conn).await.unwrap_or_default();
        assert!(head.starts_with("HTTP/1.1 101 "), "{case}: {head}");
        // Dropped here: the tunnel, and so the request, ends with the client.
    })
    .await;
    life.check(&[("ap", 0)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn bridged_absolute_form_target() {
    let _serial = serial().await;
    let case = "bridged-absolute";
    let router = Router::start(&config().yaml(), &three().await).await;
    let request = format!(
        "GET http://shop.example{} HTTP/1.1\r\nHost: shop.example\r\nx-request-id: {}\r\nConnection: close\r\n\r\n",
        order_path(),
        rid(case)
    );
    let life = observe(&router, case, raw_ok(case, &router, request)).await;
    life.check(&[("ap", 0)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn bridged_chunked_graphql_body() {
    let _serial = serial().await;
    let case = "bridged-chunked-graphql";
    let router = Router::start(&config().yaml(), &three().await).await;
    let body = graphql_body();
    let request = format!(
        "POST /graphql HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nx-request-id: {}\r\nConnection: close\r\n\r\n{:x}\r\n{body}\r\n0\r\n\r\n",
        rid(case),
        body.len()
    );
    let life = observe(&router, case, raw_ok(case, &router, request)).await;
    life.check(&[("ap", 0)]);
}

/// A legacy id: the default region `eu` answers 404, `us` has it (as tests/legacy.rs sets it
/// up, with two regions so that the probe asks exactly one other). Both attempts are below
/// the one request span.
#[tokio::test(flavor = "multi_thread")]
async fn bridged_legacy_probe() {
    let _serial = serial().await;
    let case = "bridged-legacy";
    let (eu, us) = (answering(404).await, answering(200).await);
    let table = format!(
        "version: life\nregions:\n  eu: {{ upstreams: [\"{eu}\"] }}\n  us: {{ upstreams: [\"{us}\"] }}\ncountries:\n  2: us\n  3: eu\ndefault_region: eu\n"
    );
    let router = Router::start(&config().yaml(), &table).await;
    let path = format!("/v1/orders/{LEGACY}");
    let life = observe(&router, case, ok(case, client().get(router.url(&path)))).await;
    life.check_regions(&["eu", "us"]);
}

// ---- HTTP/2 -----------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn h2c_prior_knowledge() {
    let h2c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("h2c client");
    ap_case("h2c", h2c, |c, r| c.get(r.url(&order_path()))).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_h2() {
    let _serial = serial().await;
    let case = "tls-h2";
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    common::make_certs(&certs, false, &["localhost"]);
    let tls = common::tls_lines(&certs);
    let router = Router::start(&config().extra(&tls).yaml(), &three().await).await;
    let connector =
        common::tls_connector(&certs.join("ca.pem"), rustls::DEFAULT_VERSIONS, &[b"h2"]);
    let life = observe(&router, case, async {
        let tcp = TcpStream::connect(router.addr).await.expect("connect");
        let name = ServerName::try_from("localhost".to_owned()).expect("server name");
        let tls = connector.connect(name, tcp).await.expect("TLS handshake");
        assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "{case}");
        let (mut h2, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                .await
                .expect("h2 handshake");
        tokio::spawn(conn);
        let target = format!("https://localhost:{}{}", router.addr.port(), order_path());
        let req = http::Request::get(target)
            .header("x-request-id", rid(case))
            .body(Empty::<Bytes>::new())
            .expect("request");
        let resp = h2.send_request(req).await.expect("answer");
        assert_eq!(resp.status(), 200, "{case}");
        resp.into_body().collect().await.expect("body");
    })
    .await;
    life.check(&[("ap", 0)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_route() {
    let _serial = serial().await;
    let case = "grpc";
    let (upstream, _) = common::grpc::upstream("ap-orders").await;
    let table = format!(
        "version: life\nregions:\n  ap: {{ upstreams: [\"{upstream}\"], protocol: h2 }}\ncountries:\n  1: ap\ndefault_region: ap\n"
    );
    let router = Router::start(&config().yaml(), &table).await;
    let life = observe(&router, case, async {
        let tcp = TcpStream::connect(router.addr).await.expect("connect");
        let (mut h2, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .expect("h2 handshake");
        tokio::spawn(conn);
        // Field 1 (a string) of the first message holds the id.
        let id = iuid_for(1);
        let message = [&[0x0a, id.len() as u8][..], id.as_bytes()].concat();
        let req = http::Request::post(router.url("/orders.v1.Orders/GetOrder"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("x-request-id", rid(case))
            .body(Full::new(common::grpc::frame(&message)))
            .expect("request");
        let resp = h2.send_request(req).await.expect("answer");
        assert_eq!(resp.status(), 200, "{case}");
        let body = resp.into_body().collect().await.expect("body");
        let status = body.trailers().and_then(|t| t.get("grpc-status")).cloned();
        assert_eq!(status, Some(http::HeaderValue::from_static("0")), "{case}");
    })
    .await;
    life.check(&[("ap", 0)]);
}

// ---- HTTP/3 (aioquic's client, tests/h3_py/client.py) -----------------------------------

/// The router with `tls:` and `http3: {}` over `table`; its certificates.
async fn h3_router(table: &str) -> (Router, tempfile::TempDir) {
    let certs = tempfile::tempdir().expect("certs");
    common::make_certs(certs.path(), false, &["localhost"]);
    let config = config()
        .extra(&common::tls_lines(certs.path()))
        .extra("http3: {}\n");
    (Router::start(&config.yaml(), table).await, certs)
}

/// Sends `request` (a client.py request step) over HTTP/3 with the case's request id; it
/// must be answered 200.
async fn h3_ok(
    case: &str,
    router: &Router,
    certs: &tempfile::TempDir,
    mut request: serde_json::Value,
) {
    request["headers"]["x-request-id"] = serde_json::json!(rid(case));
    let plan = common::h3::plan(
        router.addr.port(),
        certs.path(),
        serde_json::json!([request]),
    );
    let out = common::h3::run(plan).await;
    assert_eq!(out["results"][0]["status"], 200, "{case}: {out}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn h3_path_route() {
    let _serial = serial().await;
    let case = "h3-path";
    let (router, certs) = h3_router(&three().await).await;
    let request = serde_json::json!({"op": "request", "method": "GET", "path": order_path()});
    let before = router.metric(REQUESTS, &["protocol=\"h3\""]).await;
    let life = observe(&router, case, h3_ok(case, &router, &certs, request)).await;
    life.check(&[("ap", 0)]);
    let after = router.metric(REQUESTS, &["protocol=\"h3\""]).await;
    assert_eq!(after - before, 1.0, "{case}: counted as HTTP/3");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn h3_graphql_route() {
    let _serial = serial().await;
    let case = "h3-graphql";
    let (router, certs) = h3_router(&three().await).await;
    let request = serde_json::json!({"op": "request", "method": "POST", "path": "/graphql",
        "headers": {"content-type": "application/json"}, "body": graphql_body()});
    let life = observe(&router, case, h3_ok(case, &router, &certs, request)).await;
    life.check(&[("ap", 0)]);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn h3_fanout_route() {
    let _serial = serial().await;
    let case = "h3-fanout";
    let lists = [
        ListRegion::start("eu").await,
        ListRegion::start("us").await,
        ListRegion::start("ap").await,
    ];
    let table = common::three_regions("life", &lists[0].url(), &lists[1].url(), &lists[2].url());
    let (router, certs) = h3_router(&table).await;
    let request = serde_json::json!({"op": "request", "method": "GET", "path": "/v1/list"});
    let life = observe(&router, case, h3_ok(case, &router, &certs, request)).await;
    life.check(&[("ap", 0), ("eu", 0), ("us", 0)]);
}
