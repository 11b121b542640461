//! Failover per region (`regions.<name>.failover`, docs/failover.md) over real sockets, on
//! every protocol a request arrives by: HTTP/1.1 on the own engine's head path and bridged to
//! the shared phases (an absolute-form target), h2c prior knowledge, TLS h2, HTTP/3 (aioquic,
//! ignored unless .ci/run installed it) and gRPC.
//!
//! The world: region `a` (country 1) is up, region `b` (country 2) fails over to `a`. A dead
//! upstream is a loopback port where nothing listens (connect refused). What is shown:
//!
//! - A read of a `b` entity while `b` is dark is served by `a`, marked `X-Iuid-Failover: b`
//!   upstream and on the answer, both while `b`'s upstreams still refuse connections (the
//!   read is retried on `a` within the request) and once they are ejected (the health share
//!   sends it there at once). A write under `serves: reads` never reaches `a`: 503
//!   `region-unavailable` with `Retry-After` (gRPC: 14 UNAVAILABLE with
//!   `grpc-retry-pushback-ms`, unless its route says `reads: true`); GraphQL reads a query
//!   as a read and a mutation as a write.
//! - `serves: all` moves writes too.
//! - With half of `b`'s upstreams failing their active checks, `b` keeps
//!   `min(1, 0.5 × 1.4) = 70 %` of its reads (measured over 2,000 reads, ±5 %).
//! - A read reset by a dying upstream, or refused by a dead one the share still counts, is
//!   retried on `a` (not answered 502), within the retry budget.
//! - A client's own `X-Iuid-Failover` / `X-Iuid-Owner` never reach an upstream nor change
//!   routing; a trusted peer's `X-Iuid-Failover` is kept and its read never moves again.
//! - Once `b`'s upstreams are back, its reads return to it: within a check interval with
//!   `health_check`, at the ejection's end without.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::Request;
use bytes::Bytes;
use common::{iuid_for, ConfigYaml, Received, Router, Upstream};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};

const UNAVAILABLE: &str = "urn:iuid-router:problem:region-unavailable";

/// How a request reaches the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    /// HTTP/1.1 on the own engine's head path (origin-form target).
    H1,
    /// HTTP/1.1 handed to the shared phases: an absolute-form target.
    H1Bridged,
    /// HTTP/2 prior knowledge over plain TCP.
    H2c,
    /// HTTP/2 over TLS (ALPN `h2`).
    TlsH2,
    /// HTTP/3 over QUIC, aioquic's client.
    H3,
}

/// The protocols over TCP (HTTP/3 needs aioquic: its tests are ignored unless .ci/run).
const TCP: [Proto; 4] = [Proto::H1, Proto::H1Bridged, Proto::H2c, Proto::TlsH2];

/// The path of the order of `country` (1: region `a`, 2: region `b`).
fn order(country: u8) -> String {
    format!("/v1/orders/{}", iuid_for(country))
}

/// An upstream URL where nothing listens: connect refused.
fn dead() -> String {
    common::url(common::free_port())
}

/// The table: `a` (country 1, the default) on `a`, `b` (country 2) on `b` failing over to `a`
/// with `failover`'s other keys (`, serves: all`); `keys` go into both regions' maps
/// (`, protocol: h2`).
fn table(a: &[String], b: &[String], failover: &str, keys: &str) -> String {
    let list = |urls: &[String]| {
        urls.iter()
            .map(|u| format!("\"{u}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "version: failover\nregions:\n  a: {{ upstreams: [{}]{keys} }}\n  b: {{ upstreams: [{}], failover: {{ region: a{failover} }}{keys} }}\ncountries:\n  1: a\n  2: b\ndefault_region: a\n",
        list(a),
        list(b)
    )
}

/// Outlier ejection at the first failure, for a minute, of every upstream of a region.
const EJECT_AT_ONCE: &str =
    "health: { eject_after: 1, ejection_ms: 60000, max_ejected_percent: 100 }\n";

/// No ejection in these tests' lifetime: every request meets the dying upstream.
const NEVER_EJECT: &str = "health: { eject_after: 1000000 }\n";

/// Retries never refused by the budget while a test sends its few requests.
const RETRIES: &str = "retries: { max_retries: 2, budget_percent: 100, min_per_second: 1000 }\n";

/// An answer as the client read it.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(|v| v.to_str().expect("ascii"))
    }

    /// The upstream that answered (`x-upstream`), `-` for none.
    fn by(&self) -> &str {
        self.header("x-upstream").unwrap_or("-")
    }

    /// The answer's `X-Iuid-Failover`.
    fn failover(&self) -> Option<&str> {
        self.header("x-iuid-failover")
    }
}

/// A router in front of the upstreams of `table`, with TLS (and HTTP/3) when `proto` needs
/// them.
struct World {
    router: Router,
    certs: Option<tempfile::TempDir>,
}

impl World {
    async fn start(proto: Proto, config: ConfigYaml, table: &str) -> World {
        let mut config = config;
        let certs = match proto {
            Proto::TlsH2 | Proto::H3 => {
                let certs = tempfile::tempdir().expect("certs");
                common::make_certs(certs.path(), false, &["localhost"]);
                config = config.extra(&common::tls_lines(certs.path()));
                if proto == Proto::H3 {
                    config = config.extra("http3: {}\n");
                }
                Some(certs)
            }
            _ => None,
        };
        let router = Router::start(&config.yaml(), table).await;
        World { router, certs }
    }

    fn certs(&self) -> &Path {
        self.certs.as_ref().map_or(Path::new("."), |c| c.path())
    }

    fn h2_url(&self, proto: Proto, path: &str) -> String {
        match proto {
            Proto::TlsH2 => format!("https://localhost:{}{path}", self.router.addr.port()),
            _ => self.router.url(path),
        }
    }

    /// Sends `req` over a new HTTP/2 connection (prior knowledge, or TLS with ALPN `h2`).
    async fn h2(
        &self,
        proto: Proto,
        req: http::Request<Full<Bytes>>,
    ) -> http::Response<hyper::body::Incoming> {
        let mut sender = match proto {
            Proto::TlsH2 => {
                let tls = common::tls_to_localhost(self.router.addr, self.certs(), b"h2").await;
                let (sender, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                        .await
                        .expect("h2 handshake");
                tokio::spawn(conn);
                sender
            }
            _ => {
                let tcp = tokio::net::TcpStream::connect(self.router.addr)
                    .await
                    .expect("connect");
                let (sender, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                        .await
                        .expect("h2 handshake");
                tokio::spawn(conn);
                sender
            }
        };
        sender.send_request(req).await.expect("answer")
    }

    /// One request of `method` to `path` with `fields` and `body` over `proto`.
    async fn send(
        &self,
        proto: Proto,
        method: &str,
        path: &str,
        fields: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        match proto {
            Proto::H1 | Proto::H1Bridged => {
                let target = match proto {
                    Proto::H1 => path.to_owned(),
                    _ => format!("http://shop.example{path}"),
                };
                let mut request = format!(
                    "{method} {target} HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\nContent-Length: {}\r\n",
                    body.len()
                );
                for (name, value) in fields {
                    request += &format!("{name}: {value}\r\n");
                }
                request += "\r\n";
                request += body;
                let answer = common::raw_http(self.router.addr, request.into_bytes()).await;
                parse_h1(&answer)
                    .unwrap_or_else(|| panic!("{proto:?} {method} {path}: no answer: {answer:?}"))
            }
            Proto::H2c | Proto::TlsH2 => {
                let req = fields
                    .iter()
                    .fold(
                        http::Request::builder()
                            .method(method)
                            .uri(self.h2_url(proto, path)),
                        |r, (n, v)| r.header(*n, *v),
                    )
                    .body(Full::new(Bytes::from(body.to_owned())))
                    .expect("request");
                let resp = self.h2(proto, req).await;
                let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
                let body = resp.into_body().collect().await.expect("body").to_bytes();
                Answer {
                    status,
                    headers,
                    body: String::from_utf8_lossy(&body).into_owned(),
                }
            }
            Proto::H3 => {
                let headers: serde_json::Map<String, serde_json::Value> = fields
                    .iter()
                    .map(|(n, v)| ((*n).to_owned(), serde_json::json!(v)))
                    .collect();
                let mut step = serde_json::json!({"op": "request", "method": method,
                    "path": path, "headers": headers});
                if !body.is_empty() {
                    step["body"] = serde_json::json!(body);
                }
                let plan = common::h3::plan(
                    self.router.addr.port(),
                    self.certs(),
                    serde_json::json!([step]),
                );
                let out = common::h3::run(plan).await;
                let result = &out["results"][0];
                let status = result["status"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("H3 {method} {path}: {out}"));
                let mut headers = http::HeaderMap::new();
                for (name, value) in result["headers"].as_object().into_iter().flatten() {
                    headers.append(
                        http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
                        http::HeaderValue::from_str(value.as_str().unwrap_or_default())
                            .expect("value"),
                    );
                }
                Answer {
                    status: status as u16,
                    headers,
                    body: result["body"].as_str().unwrap_or_default().to_owned(),
                }
            }
        }
    }
}

/// An HTTP/1.1 answer read to the connection's close: its status, fields and body (a chunked
/// one decoded).
fn parse_h1(answer: &str) -> Option<Answer> {
    let (head, body) = answer.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.get(9..12)?.parse().ok()?;
    let mut headers = http::HeaderMap::new();
    for line in lines {
        let (name, value) = line.split_once(':')?;
        headers.append(
            http::HeaderName::from_bytes(name.trim().as_bytes()).ok()?,
            http::HeaderValue::from_str(value.trim()).ok()?,
        );
    }
    let chunked = headers
        .get("transfer-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"chunked"));
    let body = if chunked {
        let mut out = String::new();
        let mut rest = body;
        while let Some((size, tail)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
            if n == 0 {
                break;
            }
            out += tail.get(..n)?;
            rest = tail.get(n + 2..)?;
        }
        out
    } else {
        body.to_owned()
    };
    Some(Answer {
        status,
        headers,
        body,
    })
}

/// A read of a `b` entity answered by `a`'s upstream, marked on the answer.
fn assert_failed_over(proto: Proto, what: &str, answer: &Answer) {
    assert_eq!(
        (answer.status, answer.by(), answer.failover()),
        (200, "a", Some("b")),
        "{proto:?} {what}: {answer:?}"
    );
}

/// 503 `region-unavailable` with a `Retry-After` of at least a second.
fn assert_unavailable(proto: Proto, what: &str, answer: &Answer) {
    assert_eq!(answer.status, 503, "{proto:?} {what}: {answer:?}");
    assert!(
        answer.body.contains(UNAVAILABLE),
        "{proto:?} {what}: {answer:?}"
    );
    let retry_after: u64 = answer
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{proto:?} {what}: a Retry-After in seconds: {answer:?}"));
    assert!(retry_after >= 1, "{proto:?} {what}: {answer:?}");
    assert_eq!(answer.failover(), None, "{proto:?} {what}: {answer:?}");
}

/// What `upstream` received, but the active checks' `GET /healthz`.
fn requests(upstream: &Upstream) -> Vec<Received> {
    upstream
        .received
        .lock()
        .expect("log")
        .iter()
        .filter(|r| r.target != "/healthz")
        .cloned()
        .collect()
}

fn marked(r: &Received) -> Option<&str> {
    r.headers
        .get("x-iuid-failover")
        .map(|v| v.to_str().expect("ascii"))
}

/// Each upstream of `region` as `/admin/upstreams` reports it: (authority, state).
async fn states(router: &Router, region: &str) -> Vec<(String, String)> {
    let report = common::get_json(&router.admin_url("/admin/upstreams")).await;
    let regions = report["regions"].as_array().expect("regions");
    let found = regions
        .iter()
        .find(|r| r["name"] == region)
        .unwrap_or_else(|| panic!("no region {region}: {report}"));
    found["upstreams"]
        .as_array()
        .expect("upstreams")
        .iter()
        .map(|u| {
            (
                u["authority"].as_str().unwrap_or_default().to_owned(),
                u["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// Waits (10 s at most) until every upstream of `region` at an authority in `of` (all of them
/// when empty) is in `state`.
async fn wait_state(router: &Router, region: &str, of: &[SocketAddr], state: &str) {
    let of: Vec<String> = of.iter().map(|a| a.to_string()).collect();
    let reached = common::eventually(Duration::from_secs(10), || {
        let of = &of;
        async move {
            states(router, region)
                .await
                .iter()
                .filter(|(authority, _)| of.is_empty() || of.contains(authority))
                .all(|(_, s)| s == state)
        }
    })
    .await;
    assert!(
        reached.is_some(),
        "region {region}'s upstreams {of:?} did not become {state}: {:?}",
        states(router, region).await
    );
}

/// Sends `request` until every upstream of `b` is ejected (10 s at most): once one is, the
/// health share may move a request before it meets the other.
async fn until_ejected<F, Fut>(router: &Router, mut request: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let ejected = common::eventually(Duration::from_secs(10), || {
        let sent = request();
        async move {
            sent.await;
            states(router, "b")
                .await
                .iter()
                .all(|(_, s)| s == "ejected")
        }
    })
    .await;
    assert!(
        ejected.is_some(),
        "b's upstreams were not ejected: {:?}",
        states(router, "b").await
    );
}

// ---- A dark region over every protocol -------------------------------------------------------

/// `b` on two dead upstreams: a read of a `b` entity is served by `a`, marked; a write gets
/// 503 `region-unavailable` with `Retry-After` and never reaches `a`; first while `b`'s
/// upstreams refuse each connection, then once they are ejected.
async fn dark_region_over(proto: Proto) {
    let a = Upstream::start("a").await;
    let config = common::orders_config().extra(EJECT_AT_ONCE).extra(RETRIES);
    let w = World::start(proto, config, &table(&[a.url()], &[dead(), dead()], "", "")).await;
    let path = order(2);

    for round in ["refused", "ejected"] {
        let before = requests(&a).len();
        let answer = w.send(proto, "GET", &path, &[], "").await;
        assert_failed_over(proto, &format!("{round}: GET"), &answer);
        assert_eq!(answer.body, "a", "{proto:?} {round}: a's own answer");
        let got = requests(&a);
        assert_eq!(got.len(), before + 1, "{proto:?} {round}: one request to a");
        let last = got.last().expect("a request");
        assert_eq!(
            (last.method.as_str(), last.target.as_str()),
            ("GET", path.as_str())
        );
        assert_eq!(
            marked(last),
            Some("b"),
            "{proto:?} {round}: a saw X-Iuid-Failover: b"
        );

        for method in ["POST", "PUT"] {
            let answer = w.send(proto, method, &path, &[], "w").await;
            assert_unavailable(proto, &format!("{round}: {method}"), &answer);
        }
        assert_eq!(
            requests(&a).len(),
            before + 1,
            "{proto:?} {round}: a write reached a"
        );
        if round == "refused" {
            // The GET and the writes ejected both of b's upstreams.
            wait_state(&w.router, "b", &[], "ejected").await;
        }
    }
    assert!(
        requests(&a).iter().all(|r| r.method == "GET"),
        "{proto:?}: only reads reached a"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_a_dark_region_fail_over_and_its_writes_are_refused_over_tcp() {
    for proto in TCP {
        dark_region_over(proto).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn reads_of_a_dark_region_fail_over_and_its_writes_are_refused_over_http3() {
    dark_region_over(Proto::H3).await;
}

// ---- gRPC ------------------------------------------------------------------------------------

/// A gRPC call of the `b` entity over `proto`: its HTTP status, headers and trailers.
async fn grpc_call(
    w: &World,
    proto: Proto,
    country: u8,
) -> (u16, http::HeaderMap, Option<http::HeaderMap>) {
    let req = http::Request::post(w.h2_url(proto, "/orders.v1.Orders/GetOrder"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-entity-id", iuid_for(country))
        .body(Full::new(common::grpc::frame(b"\x0a\x03abc")))
        .expect("request");
    let resp = w.h2(proto, req).await;
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let mut body = resp.into_body();
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        if let Ok(t) = frame.expect("frame").into_trailers() {
            trailers = Some(t);
        }
    }
    (status, headers, trailers)
}

/// A gRPC call is a write: to a dark region it is 14 UNAVAILABLE with
/// `grpc-retry-pushback-ms` (trailers-only), never sent to the failover region; while its
/// upstreams refuse connections (not a 502's bare 14) and once they are ejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_to_a_dark_region_is_unavailable_with_a_pushback_and_never_fails_over() {
    for proto in [Proto::H2c, Proto::TlsH2] {
        let (a, a_log) = common::grpc::upstream("a-orders").await;
        let config = ConfigYaml::new()
            .route_header("x-entity-id")
            .timeouts(500, 2000, 10_000)
            .watch(false)
            .extra(EJECT_AT_ONCE)
            .extra(RETRIES);
        let t = table(&[a], &[dead(), dead()], "", ", protocol: h2");
        let w = World::start(proto, config, &t).await;
        for round in ["refused", "ejected"] {
            let (status, headers, trailers) = grpc_call(&w, proto, 2).await;
            assert_eq!(status, 200, "{proto:?} {round}");
            assert_eq!(
                headers["grpc-status"], "14",
                "{proto:?} {round}: {headers:?}"
            );
            let pushback: u64 = headers
                .get("grpc-retry-pushback-ms")
                .and_then(|v| v.to_str().ok()?.parse().ok())
                .unwrap_or_else(|| panic!("{proto:?} {round}: a pushback: {headers:?}"));
            assert!(pushback >= 1000, "{proto:?} {round}: {pushback}");
            assert!(trailers.is_none(), "{proto:?} {round}: trailers-only");
            assert!(
                a_log.lock().expect("log").is_empty(),
                "{proto:?} {round}: the call reached the failover region"
            );
            if round == "refused" {
                wait_state(&w.router, "b", &[], "ejected").await;
            }
        }
        // `a` is up: a call of its own entity is served.
        let (status, _, trailers) = grpc_call(&w, proto, 1).await;
        assert_eq!(status, 200, "{proto:?}");
        let trailers = trailers.expect("trailers");
        assert_eq!(trailers["grpc-status"], "0", "{proto:?}");
        assert_eq!(trailers["x-served-by"], "a-orders", "{proto:?}");
    }
}

/// A `GetOrder` call of the `b` entity (the id in field 1) over `proto`: served by `a`,
/// marked on the answer.
async fn grpc_read_fails_over(w: &World, proto: Proto, what: &str) {
    let id = iuid_for(2);
    let message = [&[0x0a, id.len() as u8][..], id.as_bytes()].concat();
    let req = http::Request::post(w.h2_url(proto, "/orders.v1.Orders/GetOrder"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Full::new(common::grpc::frame(&message)))
        .expect("request");
    let resp = w.h2(proto, req).await;
    assert_eq!(resp.status(), 200, "{proto:?} {what}");
    let headers = resp.headers().clone();
    assert_eq!(
        headers.get("x-iuid-failover").map(|v| v.as_bytes()),
        Some(&b"b"[..]),
        "{proto:?} {what}: {headers:?}"
    );
    let body = resp.into_body().collect().await.expect("body");
    let trailers = body.trailers().cloned().expect("trailers");
    assert_eq!(trailers["grpc-status"], "0", "{proto:?} {what}");
    assert_eq!(trailers["x-served-by"], "a-orders", "{proto:?} {what}");
}

/// A `grpc:` route with `reads: true` says its method only reads: its calls of a dark
/// region's entity fail over with the region's reads, marked on the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_method_routed_as_a_read_fails_over() {
    for proto in [Proto::H2c, Proto::TlsH2] {
        let (a, _) = common::grpc::upstream("a-orders").await;
        let config = ConfigYaml::new()
            .route("{ grpc: /orders.v1.Orders/GetOrder, field: 1, reads: true }")
            .timeouts(500, 2000, 10_000)
            .watch(false)
            .extra(EJECT_AT_ONCE)
            .extra(RETRIES);
        let t = table(&[a], &[dead(), dead()], "", ", protocol: h2");
        let w = World::start(proto, config, &t).await;
        grpc_read_fails_over(&w, proto, "refused").await;
        until_ejected(&w.router, || grpc_read_fails_over(&w, proto, "meanwhile")).await;
        grpc_read_fails_over(&w, proto, "ejected").await;
    }
}

// ---- GraphQL ---------------------------------------------------------------------------------

/// A GraphQL query of a `b` entity is a read: served by `a`, marked; a mutation is a write:
/// 503 `region-unavailable`, never sent to `a`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graphql_query_fails_over_and_a_mutation_is_refused() {
    let a = Upstream::start("a").await;
    let config = common::orders_config()
        .route_graphql("/graphql")
        .extra(EJECT_AT_ONCE)
        .extra(RETRIES);
    let w = World::start(
        Proto::H1,
        config,
        &table(&[a.url()], &[dead(), dead()], "", ""),
    )
    .await;
    let op = |query: String| serde_json::json!({ "query": query, "variables": {} }).to_string();
    let query = op(format!(r#"{{ node(id: "{}") {{ id }} }}"#, iuid_for(2)));
    let mutation = op(format!(
        r#"mutation {{ cancel(id: "{}") {{ ok }} }}"#,
        iuid_for(2)
    ));
    let json = [("content-type", "application/json")];
    for round in ["refused", "ejected"] {
        for proto in [Proto::H1, Proto::H2c] {
            let before = requests(&a).len();
            let answer = w.send(proto, "POST", "/graphql", &json, &query).await;
            assert_failed_over(proto, &format!("{round}: query"), &answer);
            let got = requests(&a);
            assert_eq!(got.len(), before + 1, "{proto:?} {round}");
            let last = got.last().expect("a request");
            assert_eq!(last.target, "/graphql");
            assert_eq!(last.body.as_ref(), query.as_bytes(), "the body as sent");
            assert_eq!(marked(last), Some("b"), "{proto:?} {round}");

            let answer = w.send(proto, "POST", "/graphql", &json, &mutation).await;
            assert_unavailable(proto, &format!("{round}: mutation"), &answer);
            assert_eq!(requests(&a).len(), before + 1, "{proto:?} {round}");
        }
        if round == "refused" {
            wait_state(&w.router, "b", &[], "ejected").await;
        }
    }
    assert!(
        requests(&a)
            .iter()
            .all(|r| r.body.as_ref() == query.as_bytes()),
        "no mutation reached a"
    );
}

// ---- How much fails over ---------------------------------------------------------------------

/// `b` on 10 upstreams, 5 of them dead and failing their active checks: a health share of
/// 0.5, so `b` keeps `0.5 × 1.4 = 70 %` of its reads and `a` serves the rest, marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_a_region_failing_its_checks_keeps_seventy_percent_of_its_reads() {
    let a = Upstream::start("a").await;
    let mut live = Vec::new();
    for _ in 0..5 {
        live.push(Upstream::start("b").await);
    }
    let dead_addrs: Vec<SocketAddr> = (0..5).map(|_| common::free_port()).collect();
    let mut b_urls: Vec<String> = Vec::new();
    for (l, d) in live.iter().zip(&dead_addrs) {
        b_urls.push(l.url());
        b_urls.push(common::url(*d));
    }
    let config = common::orders_config()
        .extra("health_check: { path: /healthz, interval_ms: 100, timeout_ms: 500 }\n");
    let w = World::start(Proto::H1, config, &table(&[a.url()], &b_urls, "", "")).await;
    let live_addrs: Vec<SocketAddr> = live.iter().map(|u| u.addr).collect();
    wait_state(&w.router, "b", &dead_addrs, "check_failed").await;
    wait_state(&w.router, "b", &live_addrs, "healthy").await;

    // 2,000 reads on 8 keep-alive connections.
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(8)
        .build()
        .expect("client");
    let url = w.router.url(&order(2));
    let workers = (0..8).map(|_| {
        let (client, url) = (client.clone(), url.clone());
        tokio::spawn(async move {
            let mut tally = [0usize; 3];
            for _ in 0..250 {
                let resp = client.get(&url).send().await.expect("answer");
                let by = resp.headers().get("x-upstream").cloned();
                let mark = resp.headers().get("x-iuid-failover").cloned();
                let status = resp.status().as_u16();
                let _ = resp.bytes().await;
                match (status, by.as_ref().map(|v| v.as_bytes()), mark) {
                    (200, Some(b"b"), None) => tally[0] += 1,
                    (200, Some(b"a"), Some(m)) if m == "b" => tally[1] += 1,
                    _ => tally[2] += 1,
                }
            }
            tally
        })
    });
    let mut tally = [0usize; 3];
    for worker in futures_util::future::join_all(workers).await {
        let t = worker.expect("worker");
        for k in 0..3 {
            tally[k] += t[k];
        }
    }
    let [kept, moved, other] = tally;
    assert_eq!(other, 0, "answers neither b's nor a's marked: {tally:?}");
    assert_eq!(kept + moved, 2000);
    let share = kept as f64 / 2000.0;
    assert!(
        (0.65..=0.75).contains(&share),
        "b kept {share} of its reads, not 0.70 ± 0.05 ({kept} kept, {moved} moved)"
    );
    let b_served: usize = live.iter().map(|u| requests(u).len()).sum();
    assert_eq!(b_served, kept, "b's live upstreams served what b kept");
    assert_eq!(requests(&a).len(), moved, "a served what moved");
    // Nothing flapped meanwhile.
    wait_state(&w.router, "b", &dead_addrs, "check_failed").await;
    wait_state(&w.router, "b", &live_addrs, "healthy").await;
}

// ---- serves: all -----------------------------------------------------------------------------

/// With `serves: all`, a write of a dark region's entity moves too: served by `a`, marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_all_moves_writes_too() {
    for proto in TCP {
        let a = Upstream::start("a").await;
        let config = common::orders_config().extra(EJECT_AT_ONCE).extra(RETRIES);
        let t = table(&[a.url()], &[dead(), dead()], ", serves: all", "");
        let w = World::start(proto, config, &t).await;
        for round in ["refused", "ejected"] {
            for method in ["POST", "PUT", "GET"] {
                let before = requests(&a).len();
                let answer = w.send(proto, method, &order(2), &[], "w").await;
                assert_failed_over(proto, &format!("{round}: {method}"), &answer);
                let got = requests(&a);
                assert_eq!(got.len(), before + 1, "{proto:?} {round} {method}");
                let last = got.last().expect("a request");
                assert_eq!(last.method, method, "{proto:?} {round}");
                assert_eq!(marked(last), Some("b"), "{proto:?} {round} {method}");
                if method != "GET" {
                    assert_eq!(last.body.as_ref(), b"w", "{proto:?} {round}: the body");
                }
            }
            if round == "refused" {
                until_ejected(&w.router, || async {
                    let answer = w.send(proto, "POST", &order(2), &[], "w").await;
                    assert_failed_over(proto, "POST meanwhile", &answer);
                })
                .await;
            }
        }
    }
}

// ---- A mixed batch under serves: reads -------------------------------------------------------

/// Reads and writes of both regions at once, over HTTP/1.1 (head path and bridged) and h2c,
/// while `b` is dark: `b`'s reads go to `a` marked, its writes get 503 and never reach `a`;
/// `a`'s own requests are served as ever, unmarked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_mixed_batch_reads_move_and_writes_never_do() {
    let a = Upstream::start("a").await;
    let config = common::orders_config().extra(RETRIES);
    let w = World::start(
        Proto::H1,
        config,
        &table(&[a.url()], &[dead(), dead()], "", ""),
    )
    .await;
    let methods = ["GET", "POST", "PUT", "DELETE", "PATCH", "GET"];
    let protos = [Proto::H1, Proto::H1Bridged, Proto::H2c];
    let batch: Vec<(Proto, &str, u8)> = (0..72)
        .map(|i| (protos[i % 3], methods[(i / 3) % 6], 1 + (i / 18 % 2) as u8))
        .collect();
    let answers = futures_util::future::join_all(batch.iter().map(|&(proto, method, country)| {
        let w = &w;
        async move {
            let body = if method == "GET" { "" } else { "w" };
            let path = order(country);
            (w.send(proto, method, &path, &[], body).await, path)
        }
    }))
    .await;
    let (mut moved, mut own_writes, mut own_reads) = (0, 0, 0);
    for (&(proto, method, country), (answer, _)) in batch.iter().zip(&answers) {
        let what = format!("{method} of country {country}");
        match (country, method) {
            (2, "GET") => {
                assert_failed_over(proto, &what, answer);
                moved += 1;
            }
            (2, _) => assert_unavailable(proto, &what, answer),
            (_, m) => {
                assert_eq!(
                    (answer.status, answer.by(), answer.failover()),
                    (200, "a", None),
                    "{proto:?} {what}: {answer:?}"
                );
                if m == "GET" {
                    own_reads += 1;
                } else {
                    own_writes += 1;
                }
            }
        }
    }
    assert!(moved > 0 && own_reads > 0 && own_writes > 0);
    let got = requests(&a);
    let b_path = order(2);
    let marked_reads = got
        .iter()
        .filter(|r| marked(r) == Some("b") && r.method == "GET" && r.target == b_path)
        .count();
    assert_eq!(marked_reads, moved, "b's reads reached a, marked");
    assert!(
        got.iter().all(|r| r.target != b_path || r.method == "GET"),
        "a write of b's entity reached a"
    );
    assert!(
        got.iter()
            .all(|r| (r.target == b_path) == (marked(r) == Some("b"))),
        "only b's requests are marked"
    );
    assert_eq!(got.len(), moved + own_reads + own_writes);
}

// ---- A read retried on the failover region ---------------------------------------------------

/// `b`'s only upstream resets every connection after reading the head: a read that met it
/// is retried on `a` (200, marked), not answered 502; a write is not sent again anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_reset_by_a_dying_upstream_is_retried_on_the_failover_region() {
    let a = Upstream::start("a").await;
    let (resetting, seen) = common::resetting_upstream().await;
    let config = common::orders_config().extra(NEVER_EJECT).extra(RETRIES);
    let t = table(&[a.url()], &[common::url(resetting)], "", "");
    let w = World::start(Proto::H1, config, &t).await;
    for proto in [Proto::H1, Proto::H1Bridged, Proto::H2c] {
        for _ in 0..3 {
            let (before, met) = (requests(&a).len(), seen.lock().expect("log").len());
            let answer = w.send(proto, "GET", &order(2), &[], "").await;
            assert_failed_over(proto, "GET after a reset", &answer);
            assert_eq!(
                seen.lock().expect("log").len(),
                met + 1,
                "{proto:?}: the read met b's upstream first"
            );
            let got = requests(&a);
            assert_eq!(got.len(), before + 1, "{proto:?}");
            assert_eq!(marked(got.last().expect("a request")), Some("b"));
        }
        let before = requests(&a).len();
        let answer = w.send(proto, "POST", &order(2), &[], "w").await;
        assert!(
            answer.status >= 500 && answer.by() == "-",
            "{proto:?}: a reset write is not sent again: {answer:?}"
        );
        assert_eq!(requests(&a).len(), before, "{proto:?}: a write reached a");
    }
}

/// The retry on the failover region is a retry: with no retry budget (`budget_percent: 0,
/// min_per_second: 0`) a read reset by `b`'s upstream is answered 502, never sent to `a`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retry_on_the_failover_region_spends_the_retry_budget() {
    let a = Upstream::start("a").await;
    let (resetting, seen) = common::resetting_upstream().await;
    let config = common::orders_config()
        .extra(NEVER_EJECT)
        .extra("retries: { max_retries: 2, budget_percent: 0, min_per_second: 0 }\n");
    let t = table(&[a.url()], &[common::url(resetting)], "", "");
    let w = World::start(Proto::H1, config, &t).await;
    for proto in [Proto::H1, Proto::H2c] {
        let met = seen.lock().expect("log").len();
        let answer = w.send(proto, "GET", &order(2), &[], "").await;
        assert_eq!(answer.status, 502, "{proto:?}: {answer:?}");
        assert_eq!(seen.lock().expect("log").len(), met + 1, "{proto:?}");
        assert!(
            requests(&a).is_empty(),
            "{proto:?}: retried on a without budget"
        );
    }
}

/// `b` on a live and a dead upstream, `overprovisioning: 10`, nothing ejected: the health
/// share keeps every read with `b`, and a read whose attempt meets the dead upstream is
/// retried on `a` (marked), never answered 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_refused_by_a_dead_upstream_the_share_keeps_is_retried_on_the_failover_region() {
    let a = Upstream::start("a").await;
    let b = Upstream::start("b").await;
    let config = common::orders_config().extra(NEVER_EJECT).extra(RETRIES);
    let t = table(&[a.url()], &[b.url(), dead()], ", overprovisioning: 10", "");
    let w = World::start(Proto::H1, config, &t).await;
    for proto in [Proto::H1, Proto::H1Bridged, Proto::H2c] {
        let (mut by_b, mut by_a) = (0, 0);
        for _ in 0..12 {
            let answer = w.send(proto, "GET", &order(2), &[], "").await;
            match (answer.status, answer.by(), answer.failover()) {
                (200, "b", None) => by_b += 1,
                (200, "a", Some("b")) => by_a += 1,
                _ => panic!("{proto:?}: {answer:?}"),
            }
        }
        assert!(
            by_a > 0 && by_b > 0,
            "{proto:?}: the reads that met the dead upstream went to a ({by_a}), the others stayed ({by_b})"
        );
    }
    assert!(requests(&a).iter().all(|r| marked(r) == Some("b")));
    assert!(requests(&b).iter().all(|r| marked(r).is_none()));
    // A write that meets the dead upstream goes to b's live one: writes stay.
    for _ in 0..4 {
        let answer = w.send(Proto::H1, "POST", &order(2), &[], "w").await;
        assert_eq!((answer.status, answer.by()), (200, "b"), "{answer:?}");
    }
}

// ---- A client's own marks --------------------------------------------------------------------

/// A client's `X-Iuid-Failover` and `X-Iuid-Owner` are removed before forwarding and do not
/// change where its request goes, nor mark the answer.
async fn client_marks_over(proto: Proto) {
    let (a, b) = (Upstream::start("a").await, Upstream::start("b").await);
    let config = common::orders_config().extra(RETRIES);
    let w = World::start(proto, config, &table(&[a.url()], &[b.url()], "", "")).await;
    // (method, country, the owner's upstream, the client's fields)
    let cases = [
        (
            "GET",
            2,
            &b,
            [("X-Iuid-Failover", "b"), ("X-Iuid-Owner", "a")],
        ),
        (
            "POST",
            2,
            &b,
            [("X-Iuid-Failover", "b"), ("X-Iuid-Owner", "a")],
        ),
        (
            "GET",
            1,
            &a,
            [("X-Iuid-Failover", "a"), ("X-Iuid-Owner", "b")],
        ),
        (
            "PUT",
            1,
            &a,
            [("X-Iuid-Owner", "b"), ("X-Iuid-Failover", "b")],
        ),
    ];
    for (method, country, owner, fields) in cases {
        let what = format!("{method} of country {country} with {fields:?}");
        let before = requests(owner).len();
        let body = if method == "GET" { "" } else { "w" };
        let answer = w.send(proto, method, &order(country), &fields, body).await;
        assert_eq!(
            (answer.status, answer.by(), answer.failover()),
            (200, owner.name, None),
            "{proto:?} {what}: {answer:?}"
        );
        let got = requests(owner);
        assert_eq!(got.len(), before + 1, "{proto:?} {what}");
        let last = got.last().expect("a request");
        for name in ["x-iuid-failover", "x-iuid-owner"] {
            assert!(
                !last.headers.contains_key(name),
                "{proto:?} {what}: {name} reached the upstream: {:?}",
                last.headers
            );
        }
    }
    assert_eq!(requests(&a).len() + requests(&b).len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_failover_and_owner_fields_are_removed_and_change_nothing() {
    for proto in TCP {
        client_marks_over(proto).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn a_clients_failover_and_owner_fields_are_removed_over_http3() {
    client_marks_over(Proto::H3).await;
}

/// From a peer in `trusted_proxies`, `X-Iuid-Failover` is another edge's failed-over read:
/// kept for the upstream, and never failed over again (one hop), so with `b` dark it is
/// refused rather than sent to `a`; the same peer's plain read still fails over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_peers_failover_mark_is_kept_and_its_read_moves_no_further() {
    let (a, b) = (Upstream::start("a").await, Upstream::start("b").await);
    let trusted = || {
        common::orders_config()
            .extra("trusted_proxies: [127.0.0.1]\n")
            .extra(EJECT_AT_ONCE)
            .extra(RETRIES)
    };
    let up = World::start(Proto::H1, trusted(), &table(&[a.url()], &[b.url()], "", "")).await;
    let dark = World::start(
        Proto::H1,
        trusted(),
        &table(&[a.url()], &[dead(), dead()], "", ""),
    )
    .await;
    let mark = [("X-Iuid-Failover", "b")];
    for proto in [Proto::H1, Proto::H1Bridged, Proto::H2c] {
        let answer = up.send(proto, "GET", &order(2), &mark, "").await;
        assert_eq!(
            (answer.status, answer.by()),
            (200, "b"),
            "{proto:?}: {answer:?}"
        );
        assert_eq!(
            marked(&requests(&b).pop().expect("a request")),
            Some("b"),
            "{proto:?}: a trusted peer's mark is kept"
        );

        let before = requests(&a).len();
        let answer = dark.send(proto, "GET", &order(2), &mark, "").await;
        assert!(
            answer.status >= 500 && answer.by() == "-",
            "{proto:?}: a read failed over once is not failed over again: {answer:?}"
        );
        assert_eq!(requests(&a).len(), before, "{proto:?}: it reached a");
        let answer = dark.send(proto, "GET", &order(2), &[], "").await;
        assert_failed_over(proto, "the peer's plain read", &answer);
    }
}

// ---- Back from the dark ----------------------------------------------------------------------

/// A recording upstream named `name` (answering as [`Upstream`] does) on `listener`.
fn serve_on(name: &'static str, listener: tokio::net::TcpListener) -> Upstream {
    let received: Arc<Mutex<Vec<Received>>> = Arc::default();
    let log = received.clone();
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().fallback(move |req: Request| {
        let log = log.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = axum::body::to_bytes(body, 1 << 20)
                .await
                .unwrap_or_default();
            let target = parts
                .uri
                .path_and_query()
                .map(|pq| pq.as_str().to_owned())
                .unwrap_or_default();
            log.lock().expect("log").push(Received {
                method: parts.method.to_string(),
                target,
                headers: parts.headers,
                body,
            });
            ([("x-upstream", name)], name)
        }
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Upstream {
        name,
        addr,
        received,
    }
}

/// A loopback port held but not listening: connections are refused until [`come_back`].
fn held_port() -> (tokio::net::TcpSocket, SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let addr = socket.local_addr().expect("addr");
    (socket, addr)
}

/// The upstream at `socket`'s port starts listening: back from the dark.
fn come_back(name: &'static str, socket: tokio::net::TcpSocket) -> Upstream {
    serve_on(name, socket.listen(1024).expect("listen"))
}

/// Reads of `b`'s entity until one is served by `b` (10 s at most); how long it took. Every
/// answer meanwhile is `a`'s, marked.
async fn until_served_by_b(w: &World) -> Duration {
    let start = Instant::now();
    loop {
        let answer = w.send(Proto::H1, "GET", &order(2), &[], "").await;
        if (answer.status, answer.by(), answer.failover()) == (200, "b", None) {
            return start.elapsed();
        }
        assert_failed_over(Proto::H1, "GET while b comes back", &answer);
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "b's reads never came back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// With `health_check`, `b`'s reads go back to it within a check interval of its upstreams'
/// return, and all of them once every check passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_return_to_their_region_within_a_check_interval_of_its_return() {
    let a = Upstream::start("a").await;
    let held = [held_port(), held_port()];
    let b_urls: Vec<String> = held.iter().map(|(_, addr)| common::url(*addr)).collect();
    let config = common::orders_config()
        .extra("health_check: { path: /healthz, interval_ms: 200, timeout_ms: 500 }\n")
        .extra(RETRIES);
    let w = World::start(Proto::H1, config, &table(&[a.url()], &b_urls, "", "")).await;
    wait_state(&w.router, "b", &[], "check_failed").await;
    for _ in 0..3 {
        let answer = w.send(Proto::H1, "GET", &order(2), &[], "").await;
        assert_failed_over(Proto::H1, "GET while b is dark", &answer);
    }

    let back: Vec<Upstream> = held
        .into_iter()
        .map(|(socket, _)| come_back("b", socket))
        .collect();
    let took = until_served_by_b(&w).await;
    assert!(
        took < Duration::from_millis(1500),
        "b served again only after {took:?} (checks every 200 ms)"
    );
    wait_state(&w.router, "b", &[], "healthy").await;
    let before = requests(&a).len();
    for _ in 0..20 {
        let answer = w.send(Proto::H1, "GET", &order(2), &[], "").await;
        assert_eq!(
            (answer.status, answer.by(), answer.failover()),
            (200, "b", None),
            "{answer:?}"
        );
    }
    assert_eq!(
        requests(&a).len(),
        before,
        "a read went to a after b's return"
    );
    let served: usize = back.iter().map(|u| requests(u).len()).sum();
    assert!(served >= 20, "b's upstreams served its reads");
}

/// Without active checks, `b`'s reads go back to it once the ejection ends: the upstream is
/// counted again, probed by a read, and keeps the ones after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_return_to_their_region_when_its_ejection_ends() {
    let a = Upstream::start("a").await;
    let (socket, addr) = held_port();
    let config = common::orders_config()
        .extra("health: { eject_after: 1, ejection_ms: 300, max_ejection_ms: 300, max_ejected_percent: 100 }\n")
        .extra(RETRIES);
    let w = World::start(
        Proto::H1,
        config,
        &table(&[a.url()], &[common::url(addr)], "", ""),
    )
    .await;
    let answer = w.send(Proto::H1, "GET", &order(2), &[], "").await;
    assert_failed_over(Proto::H1, "GET while b is dark", &answer);
    wait_state(&w.router, "b", &[], "ejected").await;
    let answer = w.send(Proto::H1, "GET", &order(2), &[], "").await;
    assert_failed_over(Proto::H1, "GET while b is ejected", &answer);

    let b = come_back("b", socket);
    let took = until_served_by_b(&w).await;
    assert!(
        took < Duration::from_secs(3),
        "b served again only after {took:?} (ejected for 300 ms)"
    );
    for _ in 0..10 {
        let answer = w.send(Proto::H1, "GET", &order(2), &[], "").await;
        assert_eq!(
            (answer.status, answer.by(), answer.failover()),
            (200, "b", None),
            "{answer:?}"
        );
    }
    assert!(requests(&b).len() >= 11);
}
