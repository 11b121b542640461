//! Issue 61 (docs/data-path.md, "Paths" and "Query parameters"): a path or query string the
//! router could read two ways is read as the upstream frameworks read it, or refused — on
//! every protocol: HTTP/1.1 on the own engine's head path and bridged to the shared phases
//! (an absolute-form target), h2c, TLS h2 and HTTP/3.
//!
//! Each case is a request an attacker would write on main to pick the region or dodge a
//! rate limit: `/v1/r%69des?order_id=<us>` went unrouted, `/rl/%69p` escaped the rule scoped
//! to `/rl/ip`, `?x=1;order_id=<us>&order_id=<ap>` was routed by the `&` pair. Requests are
//! written as raw bytes (HTTP/1.1) or with hyper's and aioquic's clients, which send the
//! path as given (reqwest's URL parser would clean it first).

mod common;

use bytes::Bytes;
use common::{iuid_for, ConfigYaml, Router, Upstream};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Proto {
    /// Raw HTTP/1.1, origin-form: the own engine's head path.
    Head,
    /// Raw HTTP/1.1, absolute-form: the own engine hands it to the shared phases.
    Bridged,
    H2c,
    TlsH2,
    /// aioquic's HTTP/3 client, with `http3:` on.
    H3,
}

/// What came back: the status, the upstream that answered (`-`: none), the problem type.
#[derive(Debug, PartialEq)]
struct Got {
    status: u16,
    by: String,
    problem: String,
}

trait IoStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> IoStream for T {}

/// The problem type's slug in a problem+json body, `""` for none.
fn slug(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["type"].as_str().map(str::to_owned))
        .map(|t| t.trim_start_matches("urn:iuid-router:problem:").to_owned())
        .unwrap_or_default()
}

/// `method target` (path and query exactly as written) with `body` (JSON when not empty)
/// and the field `x-rl-key: <key>`, over `proto`.
async fn send(
    proto: Proto,
    router: &Router,
    certs: &std::path::Path,
    method: &str,
    target: &str,
    body: &str,
    key: &str,
) -> Got {
    let addr = router.addr;
    match proto {
        Proto::Head | Proto::Bridged => {
            let target = match proto {
                Proto::Bridged => format!("http://{addr}{target}"),
                _ => target.to_owned(),
            };
            let request = format!(
                "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nx-rl-key: {key}\r\n\
                 Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len(),
            );
            let answer = common::raw_http(addr, request.into_bytes()).await;
            let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
            let by = answer
                .lines()
                .find_map(|l| l.strip_prefix("x-upstream: "))
                .unwrap_or("-")
                .to_owned();
            let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
            Got {
                status,
                by,
                problem: slug(body),
            }
        }
        Proto::H3 => {
            let mut step = json!({"op": "request", "method": method, "path": target,
                "headers": {"x-rl-key": key, "content-type": "application/json"}});
            if !body.is_empty() {
                step["body"] = json!(body);
            }
            let plan = common::h3::plan(addr.port(), certs, json!([step]));
            let out = common::h3::run(plan).await;
            let answer = &out["results"][0];
            Got {
                status: answer["status"].as_u64().unwrap_or(0) as u16,
                by: answer["headers"]["x-upstream"]
                    .as_str()
                    .unwrap_or("-")
                    .to_owned(),
                problem: slug(answer["body"].as_str().unwrap_or("")),
            }
        }
        Proto::H2c | Proto::TlsH2 => {
            let (uri, io): (String, Box<dyn IoStream>) = match proto {
                Proto::TlsH2 => (
                    format!("https://localhost:{}{target}", addr.port()),
                    Box::new(common::tls_to_localhost(addr, certs, b"h2").await),
                ),
                _ => (
                    format!("http://{addr}{target}"),
                    Box::new(tokio::net::TcpStream::connect(addr).await.expect("connect")),
                ),
            };
            let (mut sender, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
                    .await
                    .expect("h2 handshake");
            tokio::spawn(conn);
            let req = http::Request::builder()
                .method(method)
                .uri(uri)
                .header("x-rl-key", key)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(body.to_owned())))
                .expect("request");
            let resp = sender.send_request(req).await.expect("response");
            let status = resp.status().as_u16();
            let by = resp
                .headers()
                .get("x-upstream")
                .map_or("-", |v| v.to_str().unwrap_or("?"))
                .to_owned();
            let body = resp.into_body().collect().await.expect("body").to_bytes();
            Got {
                status,
                by,
                problem: slug(&String::from_utf8_lossy(&body)),
            }
        }
    }
}

/// The world: `eu` (default), `us` (country 2), `ap` (country 1); a `query:` route on
/// `/v1/rides`, a `json:` route on `/v1/payments`, a `path:` route, and a rate limit of one
/// request a minute per `x-rl-key` scoped to `/rl/ip`.
struct World {
    router: Router,
    upstreams: [Upstream; 3],
    _certs: tempfile::TempDir,
}

async fn world(tls: bool, http3: bool, forward_normalized: bool) -> World {
    let certs = tempfile::tempdir().expect("certs");
    let upstreams = [
        Upstream::start("eu").await,
        Upstream::start("us").await,
        Upstream::start("ap").await,
    ];
    let mut config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .route("{ path: /v1/rides, query: order_id }")
        .route("{ path: /v1/payments, json: /order_id }")
        .unrouted("default_region")
        .timeouts(500, 5000, 10_000)
        .watch(false)
        .extra(
            "rate_limits:\n  - { name: scoped, key: { header: x-rl-key }, rate: 1/min, burst: 0, \
             routes: [\"/rl/ip\"] }\n",
        );
    if forward_normalized {
        config = config.limits("forward_normalized_path: true");
    }
    if tls {
        common::make_certs(certs.path(), false, &["localhost"]);
        config = config.extra(&common::tls_lines(certs.path()));
    }
    if http3 {
        config = config.extra("http3: {}");
    }
    let [eu, us, ap] = &upstreams;
    let table = common::three_regions("v1", &eu.url(), &us.url(), &ap.url());
    let router = Router::start(&config.yaml(), &table).await;
    World {
        router,
        upstreams,
        _certs: certs,
    }
}

impl World {
    async fn send(&self, proto: Proto, method: &str, target: &str, body: &str, key: &str) -> Got {
        send(
            proto,
            &self.router,
            self._certs.path(),
            method,
            target,
            body,
            key,
        )
        .await
    }

    fn received(&self) -> usize {
        self.upstreams.iter().map(Upstream::count).sum()
    }
}

fn routed(by: &str) -> Got {
    Got {
        status: 200,
        by: by.to_owned(),
        problem: String::new(),
    }
}

fn refused(status: u16, problem: &str) -> Got {
    Got {
        status,
        by: "-".to_owned(),
        problem: problem.to_owned(),
    }
}

/// Every case over `proto` against `w`.
async fn every_case(w: &World, proto: Proto) {
    let (us, ap) = (iuid_for(2), iuid_for(1));
    let body = format!(r#"{{"order_id": "{ap}"}}"#);
    // Spellings of a routed path: each routes as its normal form.
    for (method, target, body, by) in [
        ("GET", format!("/v1/r%69des?order_id={us}"), "", "us"),
        ("GET", format!("/v1//rides?order_id={us}"), "", "us"),
        ("GET", format!("/v1/rides/?order_id={us}"), "", "us"),
        ("GET", format!("/v1/x/../rides?order_id={us}"), "", "us"),
        ("POST", "/v1/p%61yments".to_owned(), body.as_str(), "ap"),
        ("POST", "/v1/./payments".to_owned(), body.as_str(), "ap"),
        ("GET", format!("//v1/orders/{ap}"), "", "ap"),
        ("GET", format!("/v1/%6Frders/{ap}"), "", "ap"),
        // Query parameters: `name[]` is `name`, `;` splits too.
        ("GET", format!("/v1/rides?order_id[]={us}"), "", "us"),
        ("GET", format!("/v1/rides?x=1;order_id={us}"), "", "us"),
    ] {
        let got = w.send(proto, method, &target, body, "k").await;
        assert_eq!(got, routed(by), "{proto:?} {method} {target}");
    }
    // Refused, and nothing forwarded.
    for (target, status, problem) in [
        (format!("/v1/orders/a%2Fb{ap}"), 400, "ambiguous-path"),
        ("/v1/x%2fy".to_owned(), 400, "ambiguous-path"),
        ("/v1/x%5Cy".to_owned(), 400, "ambiguous-path"),
        ("/v1/x%zz".to_owned(), 400, "ambiguous-path"),
        (format!("/../v1/orders/{ap}"), 400, "ambiguous-path"),
        (
            format!("/v1/rides?x=1;order_id={us}&order_id={ap}"),
            400,
            "invalid-parameter",
        ),
        (
            format!("/v1/rides?order_id={us}&order_id[]={ap}"),
            400,
            "invalid-parameter",
        ),
        (
            format!("/v1/rides?order_id={us};x=1"),
            400,
            "invalid-parameter",
        ),
        (
            format!("/v1/rides?order_id[x]={ap}"),
            400,
            "invalid-parameter",
        ),
    ] {
        let before = w.received();
        let got = w.send(proto, "GET", &target, "", "k").await;
        assert_eq!(got, refused(status, problem), "{proto:?} GET {target}");
        assert_eq!(w.received(), before, "{proto:?} GET {target}: forwarded");
    }
    // A rate limit scoped to `/rl/ip` counts every spelling of it.
    let key = format!("{proto:?}");
    let first = w.send(proto, "GET", "/rl/ip", "", &key).await;
    assert_eq!(
        first,
        routed("eu"),
        "{proto:?}: the first request is admitted"
    );
    for target in [
        "/rl/%69p",
        "/rl//ip",
        "/rl/ip/",
        "//rl/ip",
        "/rl/./ip",
        "/rl/x/../ip",
    ] {
        let got = w.send(proto, "GET", target, "", &key).await;
        assert_eq!(got, refused(429, "rate-limited"), "{proto:?} GET {target}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_and_queries_read_one_way_over_http1_and_h2c() {
    let w = world(false, false, false).await;
    for proto in [Proto::Head, Proto::Bridged, Proto::H2c] {
        every_case(&w, proto).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths_and_queries_read_one_way_over_tls_h2() {
    let w = world(true, false, false).await;
    every_case(&w, Proto::TlsH2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn paths_and_queries_read_one_way_over_h3() {
    let w = world(true, true, false).await;
    every_case(&w, Proto::H3).await;
}

/// The path goes upstream as sent unless `limits.forward_normalized_path`; the query is
/// kept either way.
async fn forwards(w: &World, proto: Proto, forward: bool) {
    let us = iuid_for(2);
    let target = format!("/v1/./r%69des//?order_id={us}");
    let expected = match forward {
        false => target.clone(),
        true => format!("/v1/rides/?order_id={us}"),
    };
    let got = w.send(proto, "GET", &target, "", "k").await;
    assert_eq!(
        got,
        routed("us"),
        "{proto:?} forward_normalized_path: {forward}"
    );
    let received = w.upstreams[1].last().target;
    assert_eq!(
        received, expected,
        "{proto:?} forward_normalized_path: {forward}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_path_goes_upstream_as_sent_or_normalised_when_asked() {
    for forward in [false, true] {
        let w = world(false, false, forward).await;
        for proto in [Proto::Head, Proto::Bridged, Proto::H2c] {
            forwards(&w, proto, forward).await;
        }
        let w = world(true, false, forward).await;
        forwards(&w, Proto::TlsH2, forward).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn the_path_goes_upstream_as_sent_or_normalised_when_asked_over_h3() {
    for forward in [false, true] {
        let w = world(true, true, forward).await;
        forwards(&w, Proto::H3, forward).await;
    }
}

/// A route or rule written in a form no normalised path has would never match: `check`
/// refuses it at its line, naming the form to write.
#[test]
fn a_path_that_never_matches_is_refused_at_its_line() {
    let dir = tempfile::tempdir().expect("dir");
    common::write(
        &dir,
        "routing-table.yaml",
        &common::three_regions(
            "v1",
            "http://127.0.0.1:1",
            "http://127.0.0.1:2",
            "http://127.0.0.1:3",
        ),
    );
    for (route, why) in [
        ("path: /v1/orders/{id}/", "write `/v1/orders/{id}`"),
        ("{ path: /v1//rides, query: order_id }", "write `/v1/rides`"),
        (
            "{ path: /v1/./payments, json: /order_id }",
            "write `/v1/payments`",
        ),
        ("graphql: /gr%61phql", "write `/graphql`"),
        (
            "{ fanout: /v1/list/, items: /items, id_field: id }",
            "write `/v1/list`",
        ),
        ("path: /v1/a%2Fb/{id}", "encoded slash"),
    ] {
        let config = ConfigYaml::new().route(route).yaml();
        common::assert_refused_at(&dir, &config, why, 5);
    }
    let config = ConfigYaml::new()
        .extra("rate_limits:\n  - { key: route, rate: 1/s, routes: [\"/rl/ip/\"] }\n")
        .yaml();
    common::assert_refused_at(&dir, &config, "write `/rl/ip`", 5);
}

/// `limits.escaped_slashes: keep` (Envoy's `KEEP_UNCHANGED`): an encoded slash stays a byte
/// of its segment, so a Relay id in the standard base64 alphabet routes in a path, over the
/// head path and h2c alike; by default it is 400 `ambiguous-path`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encoded_slash_is_kept_in_its_segment_when_the_operator_says() {
    let upstreams = [
        Upstream::start("eu").await,
        Upstream::start("us").await,
        Upstream::start("ap").await,
    ];
    let [eu, us, ap] = &upstreams;
    let table = common::three_regions("v1", &eu.url(), &us.url(), &ap.url());
    let relay = common::relay_id("Ride??", &iuid_for(2));
    assert!(relay.contains('/'), "{relay}");
    let target = format!(
        "/v1/orders/{}",
        relay.replace('/', "%2F").replace('=', "%3D")
    );
    for (keep, want) in [
        (false, refused(400, "ambiguous-path")),
        (true, routed("us")),
    ] {
        let mut config = ConfigYaml::new()
            .route_path("/v1/orders/{id}")
            .unrouted("default_region")
            .watch(false);
        if keep {
            config = config.limits("escaped_slashes: keep");
        }
        let router = Router::start(&config.yaml(), &table).await;
        let certs = std::path::Path::new(".");
        for proto in [Proto::Head, Proto::Bridged, Proto::H2c] {
            let got = send(proto, &router, certs, "GET", &target, "", "k").await;
            assert_eq!(got, want, "{proto:?} escaped_slashes keep: {keep}");
        }
        if keep {
            assert_eq!(us.last().target, target, "forwarded as sent");
        }
    }
}
