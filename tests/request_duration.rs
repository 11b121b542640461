//! `iuid_router_request_duration_seconds` (a histogram, seconds; labels `route`, `region`,
//! `status` class, `protocol`), over real sockets, on every protocol a request arrives by:
//! HTTP/1.1 on the own engine's head path and bridged into the shared phases (an
//! absolute-form target), h2c prior knowledge, TLS h2, HTTP/3 (aioquic), and gRPC.
//!
//! - A routed request adds exactly one observation to its series (`route="path"`,
//!   `region="a"`, `status="2xx"`, `protocol` h1 / h2 / h3); `_sum` grows by a positive
//!   amount under a few seconds; the series has exactly the documented buckets (0.0005 …
//!   30 and `+Inf`), cumulative.
//! - A slow upstream's request (`x-delay-ms: 120`) lands above the 0.1 bucket.
//! - A gRPC call counts under `route="grpc"`, `protocol="h2"`.
//! - A request the router refuses itself is recorded too, under a `4xx` series.
//!
//! Metrics are the process's: the tests run one at a time and compare before and after.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{iuid_for, lettered_table, metrics_text, orders_config, Router, Upstream};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

const DURATION: &str = "iuid_router_request_duration_seconds";

/// The documented upper bounds, in order, before `+Inf`.
const BOUNDS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 30.0,
];

/// The tests of this file one at a time: the metrics are the process's.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// How a request reaches the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    /// HTTP/1.1 on the own engine's head path.
    H1,
    /// HTTP/1.1 handed to the shared phases (`Proxy::handle`): an absolute-form target.
    H1Bridged,
    /// HTTP/2 prior knowledge over plain TCP.
    H2c,
    /// HTTP/2 over TLS (ALPN `h2`).
    TlsH2,
    /// HTTP/3 over QUIC, aioquic's client.
    H3,
}

impl Proto {
    /// The `protocol` label a request by this protocol is recorded under.
    fn label(self) -> &'static str {
        match self {
            Proto::H1 | Proto::H1Bridged => "h1",
            Proto::H2c | Proto::TlsH2 => "h2",
            Proto::H3 => "h3",
        }
    }
}

/// The protocols over TCP (HTTP/3 needs aioquic: its tests are ignored unless .ci/run).
const TCP: [Proto; 4] = [Proto::H1, Proto::H1Bridged, Proto::H2c, Proto::TlsH2];

/// A router of `orders_config` plus `extra` in front of one [`Upstream`] (region `a`), with
/// TLS (and HTTP/3) when `proto` needs them.
struct World {
    router: Router,
    _upstream: Upstream,
    certs: Option<tempfile::TempDir>,
    proto: Proto,
}

impl World {
    async fn start(proto: Proto, extra: &str) -> World {
        let upstream = Upstream::start("a").await;
        let table = lettered_table("one", &[&[upstream.url()]]);
        let mut config = orders_config()
            .route("{ grpc: /orders.v1.Orders/GetOrder, field: 1 }")
            .extra(extra);
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
        let router = Router::start(&config.yaml(), &table).await;
        World {
            router,
            _upstream: upstream,
            certs,
            proto,
        }
    }

    /// A request of `method` and `path` with `fields`: the answer's status and body.
    async fn send(&self, method: &str, path: &str, fields: &[(&str, &str)]) -> (u16, String) {
        let router = &self.router;
        match self.proto {
            Proto::H1 | Proto::H1Bridged => {
                let target = match self.proto {
                    Proto::H1 => path.to_owned(),
                    _ => format!("http://shop.example{path}"),
                };
                let mut request = format!(
                    "{method} {target} HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n"
                );
                for (name, value) in fields {
                    request += &format!("{name}: {value}\r\n");
                }
                request += "\r\n";
                let answer = common::raw_http(router.addr, request.into_bytes()).await;
                let status = answer
                    .get(9..12)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("{:?}: no answer: {answer}", self.proto));
                let body = answer.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
                (status, body.to_owned())
            }
            Proto::H2c | Proto::TlsH2 => {
                let req = fields
                    .iter()
                    .fold(
                        http::Request::builder()
                            .method(method)
                            .uri(self.h2_url(path)),
                        |r, (n, v)| r.header(*n, *v),
                    )
                    .body(Empty::<Bytes>::new())
                    .expect("request");
                let resp = self.h2(req).await;
                let status = resp.status().as_u16();
                let body = resp.into_body().collect().await.expect("body").to_bytes();
                (status, String::from_utf8_lossy(&body).into_owned())
            }
            Proto::H3 => {
                let lines: Vec<[&str; 2]> = fields.iter().map(|(n, v)| [*n, *v]).collect();
                let step = serde_json::json!({"op": "request", "method": method, "path": path,
                    "header_lines": lines});
                let certs = self.certs.as_ref().expect("certs");
                let plan =
                    common::h3::plan(router.addr.port(), certs.path(), serde_json::json!([step]));
                let out = common::h3::run(plan).await;
                let result = &out["results"][0];
                let status = result["status"].as_u64().unwrap_or_else(|| panic!("{out}"));
                (
                    status as u16,
                    result["body"].as_str().unwrap_or("").to_owned(),
                )
            }
        }
    }

    /// A `GET` of a region-a order with `fields`.
    async fn get(&self, fields: &[(&str, &str)]) -> (u16, String) {
        let path = format!("/v1/orders/{}", iuid_for(1));
        self.send("GET", &path, fields).await
    }

    /// A gRPC call (h2c or TLS h2) of a region-a order: its HTTP status and `grpc-status`.
    async fn grpc(&self) -> (u16, Option<String>) {
        let id = iuid_for(1);
        let message = [&[0x0a, id.len() as u8][..], id.as_bytes()].concat();
        let req = http::Request::post(self.h2_url("/orders.v1.Orders/GetOrder"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(Full::new(common::grpc::frame(&message)))
            .expect("request");
        let resp = self.h2(req).await;
        let status = resp.status().as_u16();
        let head = resp.headers().get("grpc-status").cloned();
        let body = resp.into_body().collect().await.expect("body");
        let grpc = head
            .or_else(|| body.trailers().and_then(|t| t.get("grpc-status")).cloned())
            .map(|v| v.to_str().expect("ascii").to_owned());
        (status, grpc)
    }

    fn h2_url(&self, path: &str) -> String {
        match self.proto {
            Proto::TlsH2 => format!("https://localhost:{}{path}", self.router.addr.port()),
            _ => self.router.url(path),
        }
    }

    /// Sends `req` over a new HTTP/2 connection (prior knowledge, or TLS with ALPN `h2`).
    async fn h2<B>(&self, req: http::Request<B>) -> http::Response<hyper::body::Incoming>
    where
        B: hyper::body::Body + Send + Unpin + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let tcp = TcpStream::connect(self.router.addr).await.expect("connect");
        match self.proto {
            Proto::TlsH2 => {
                let certs = self.certs.as_ref().expect("certs");
                let connector = common::tls_connector(
                    &certs.path().join("ca.pem"),
                    rustls::DEFAULT_VERSIONS,
                    &[b"h2"],
                );
                let name =
                    rustls::pki_types::ServerName::try_from("localhost".to_owned()).expect("name");
                let tls = connector.connect(name, tcp).await.expect("TLS handshake");
                let (mut h2, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                        .await
                        .expect("h2 handshake");
                tokio::spawn(conn);
                h2.send_request(req).await.expect("answer")
            }
            _ => {
                let (mut h2, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                        .await
                        .expect("h2 handshake");
                tokio::spawn(conn);
                h2.send_request(req).await.expect("answer")
            }
        }
    }

    /// The histogram as `/metrics` renders it now.
    async fn histogram(&self) -> Histogram {
        Histogram::parse(&metrics_text(self.router.admin).await)
    }

    /// The histogram once some series' `_count` differs from `before`'s (2 s at most: a
    /// request is recorded where its life ends, which may be just after its client read it).
    async fn histogram_after(&self, before: &Histogram) -> Histogram {
        let mut now = self.histogram().await;
        for _ in 0..100 {
            if !now.count_deltas(before).is_empty() {
                // One more look, so a second (unwanted) observation has its chance to show.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return self.histogram().await;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
            now = self.histogram().await;
        }
        now
    }
}

/// One series of the histogram: its labels (without `le`), as rendered.
#[derive(Debug, Clone, Default)]
struct Series {
    labels: String,
    /// `(le, cumulative count)` in the order rendered.
    buckets: Vec<(String, f64)>,
    sum: Option<f64>,
    count: Option<f64>,
}

impl Series {
    /// Whether every `name="value"` in `want` is one of this series' labels.
    fn has(&self, want: &[&str]) -> bool {
        let labels: Vec<&str> = split_labels(&self.labels);
        want.iter().all(|w| labels.contains(w))
    }

    fn bucket(&self, le: &str) -> f64 {
        self.buckets
            .iter()
            .find(|(l, _)| l == le)
            .unwrap_or_else(|| panic!("no le=\"{le}\" in {self:?}"))
            .1
    }
}

/// `a="x",b="y"` as `["a=\"x\"", "b=\"y\""]` (the router's label values hold no `,`).
fn split_labels(labels: &str) -> Vec<&str> {
    labels.split(',').filter(|l| !l.is_empty()).collect()
}

/// Every series of [`DURATION`] in an exposition text.
#[derive(Debug, Clone, Default)]
struct Histogram {
    series: Vec<Series>,
}

impl Histogram {
    fn parse(text: &str) -> Histogram {
        let mut h = Histogram::default();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(DURATION) else {
                continue;
            };
            let (kind, rest) = if let Some(r) = rest.strip_prefix("_bucket") {
                ("bucket", r)
            } else if let Some(r) = rest.strip_prefix("_sum") {
                ("sum", r)
            } else if let Some(r) = rest.strip_prefix("_count") {
                ("count", r)
            } else {
                continue;
            };
            let (labels, value) = match rest.strip_prefix('{') {
                Some(r) => r.split_once("} ").expect("labels then value"),
                None => ("", rest.trim_start()),
            };
            let value: f64 = value
                .split(' ')
                .next()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("a value on {line:?}"));
            let mut le = None;
            let key: Vec<&str> = split_labels(labels)
                .into_iter()
                .filter(|l| match l.strip_prefix("le=") {
                    Some(v) => {
                        le = Some(v.trim_matches('"').to_owned());
                        false
                    }
                    None => true,
                })
                .collect();
            let key = key.join(",");
            let at = match h.series.iter().position(|s| s.labels == key) {
                Some(at) => at,
                None => {
                    h.series.push(Series {
                        labels: key,
                        ..Series::default()
                    });
                    h.series.len() - 1
                }
            };
            let s = &mut h.series[at];
            match kind {
                "bucket" => s
                    .buckets
                    .push((le.unwrap_or_else(|| panic!("no le on {line:?}")), value)),
                "sum" => s.sum = Some(value),
                _ => s.count = Some(value),
            }
        }
        h
    }

    /// The one series with all of `want` (none yet: an empty one).
    fn one(&self, want: &[&str]) -> Series {
        let found: Vec<&Series> = self.series.iter().filter(|s| s.has(want)).collect();
        assert!(found.len() <= 1, "{want:?} names {found:?}");
        found.first().map(|s| (*s).clone()).unwrap_or_default()
    }

    /// The series whose `_count` grew since `before`, with how much.
    fn count_deltas(&self, before: &Histogram) -> Vec<(String, f64)> {
        self.series
            .iter()
            .filter_map(|s| {
                let was = before
                    .series
                    .iter()
                    .find(|b| b.labels == s.labels)
                    .and_then(|b| b.count)
                    .unwrap_or(0.0);
                let d = s.count.unwrap_or(0.0) - was;
                (d != 0.0).then(|| (s.labels.clone(), d))
            })
            .collect()
    }
}

/// Checks a series' shape: exactly the documented `le` values then `+Inf`, cumulative, and
/// `+Inf` equal to `_count`.
fn assert_shape(s: &Series, what: &str) {
    let les: Vec<&str> = s.buckets.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(les.len(), BOUNDS.len() + 1, "{what}: {les:?}");
    assert_eq!(les.last(), Some(&"+Inf"), "{what}: {les:?}");
    let bounds: Vec<f64> = les[..BOUNDS.len()]
        .iter()
        .map(|l| l.parse().unwrap_or_else(|_| panic!("{what}: le={l}")))
        .collect();
    assert_eq!(bounds, BOUNDS, "{what}: the documented buckets");
    let counts: Vec<f64> = s.buckets.iter().map(|(_, c)| *c).collect();
    assert!(
        counts.windows(2).all(|w| w[0] <= w[1]),
        "{what}: not cumulative: {counts:?}"
    );
    assert_eq!(counts.last().copied(), s.count, "{what}: +Inf is _count");
}

/// The series a routed `GET` of a region-a order by `proto` lands in.
fn routed(proto: Proto) -> [String; 4] {
    [
        "route=\"path\"".to_owned(),
        "region=\"a\"".to_owned(),
        "status=\"2xx\"".to_owned(),
        format!("protocol=\"{}\"", proto.label()),
    ]
}

async fn one_request_on(proto: Proto) {
    let _serial = serial().await;
    let w = World::start(proto, "").await;
    let want = routed(proto);
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    let before = w.histogram().await;
    let (status, body) = w.get(&[]).await;
    assert_eq!(status, 200, "{proto:?}: {body}");
    let after = w.histogram_after(&before).await;

    let deltas = after.count_deltas(&before);
    assert_eq!(deltas.len(), 1, "{proto:?}: one series grew: {deltas:?}");
    let (was, now) = (before.one(&want), after.one(&want));
    assert_eq!(
        now.count.unwrap_or(0.0) - was.count.unwrap_or(0.0),
        1.0,
        "{proto:?} {want:?}: {deltas:?}"
    );
    let grew = now.sum.expect("_sum") - was.sum.unwrap_or(0.0);
    assert!(grew > 0.0 && grew < 3.0, "{proto:?}: _sum grew by {grew}");
    assert_shape(&now, &format!("{proto:?}"));
}

/// A routed `GET` adds exactly one observation to its series, on HTTP/1.1 (both paths),
/// h2c and TLS h2; the series has the documented buckets, cumulative.
#[tokio::test(flavor = "multi_thread")]
async fn a_routed_request_is_one_observation_on_every_tcp_protocol() {
    for proto in TCP {
        one_request_on(proto).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn a_routed_request_is_one_observation_over_http3() {
    one_request_on(Proto::H3).await;
}

async fn slow_on(proto: Proto) {
    let _serial = serial().await;
    let w = World::start(proto, "").await;
    let want = routed(proto);
    let want: Vec<&str> = want.iter().map(String::as_str).collect();
    let before = w.histogram().await;
    let (status, body) = w.get(&[("x-delay-ms", "120")]).await;
    assert_eq!(status, 200, "{proto:?}: {body}");
    let after = w.histogram_after(&before).await;
    let (was, now) = (before.one(&want), after.one(&want));
    let grew = |le: &str| {
        now.bucket(le)
            - if was.buckets.is_empty() {
                0.0
            } else {
                was.bucket(le)
            }
    };
    assert_eq!(
        grew("0.1"),
        0.0,
        "{proto:?}: 120 ms is above 0.1 s: {now:?}"
    );
    assert_eq!(grew("0.25"), 1.0, "{proto:?}: and within 0.25 s: {now:?}");
    assert_eq!(grew("+Inf"), 1.0, "{proto:?}");
    let sum = now.sum.expect("_sum") - was.sum.unwrap_or(0.0);
    assert!(sum >= 0.12, "{proto:?}: _sum grew by {sum}");
}

/// A slow upstream (120 ms) puts the request above the 0.1 bucket and within 0.25.
#[tokio::test(flavor = "multi_thread")]
async fn a_slow_upstream_lands_above_the_tenth_of_a_second_bucket() {
    for proto in TCP {
        slow_on(proto).await;
    }
}

/// A gRPC call over h2c counts once under `route="grpc"`, `protocol="h2"`.
#[tokio::test(flavor = "multi_thread")]
async fn a_grpc_call_counts_under_the_grpc_route() {
    let _serial = serial().await;
    let w = World::start(Proto::H2c, "").await;
    let before = w.histogram().await;
    let (status, grpc) = w.grpc().await;
    let after = w.histogram_after(&before).await;
    let deltas = after.count_deltas(&before);
    println!("gRPC answered {status} grpc-status {grpc:?}: {deltas:?}");
    let grpc_route: Vec<&(String, f64)> = deltas
        .iter()
        .filter(|(l, _)| split_labels(l).contains(&"route=\"grpc\""))
        .collect();
    assert_eq!(grpc_route.len(), 1, "one class grew: {deltas:?}");
    assert_eq!(grpc_route[0].1, 1.0, "{deltas:?}");
    assert!(
        split_labels(&grpc_route[0].0).contains(&"protocol=\"h2\""),
        "{deltas:?}"
    );
    assert_eq!(deltas.len(), 1, "nothing else counted: {deltas:?}");
    let series = after.one(&split_labels(&grpc_route[0].0));
    assert_shape(&series, "grpc");
}

async fn refusal_on(proto: Proto, method: &str, path: &str, expect: u16) {
    let _serial = serial().await;
    let w = World::start(proto, "").await;
    let before = w.histogram().await;
    let (status, body) = w.send(method, path, &[]).await;
    assert_eq!(status, expect, "{proto:?} {method} {path}: {body}");
    let after = w.histogram_after(&before).await;
    let deltas = after.count_deltas(&before);
    println!("{proto:?} {method} {path} → {status}: {deltas:?}");
    assert_eq!(deltas.len(), 1, "{proto:?} {method} {path}: {deltas:?}");
    let (labels, grew) = &deltas[0];
    assert_eq!(*grew, 1.0, "{proto:?}: {deltas:?}");
    let labels = split_labels(labels);
    assert!(labels.contains(&"status=\"4xx\""), "{proto:?}: {labels:?}");
    let protocol = format!("protocol=\"{}\"", proto.label());
    assert!(labels.contains(&protocol.as_str()), "{proto:?}: {labels:?}");
    assert_shape(&after.one(&labels), &format!("{proto:?} refused"));
}

/// A request the router refuses itself (CONNECT, 405; a malformed id, 400) is recorded
/// once, as a 4xx, under the protocol it came by.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_request_is_recorded_as_4xx() {
    for proto in [Proto::H1, Proto::H2c] {
        refusal_on(proto, "CONNECT", "/v1/orders/x", 405).await;
    }
    for proto in TCP {
        refusal_on(proto, "GET", "/v1/orders/not-an-id", 400).await;
    }
}
