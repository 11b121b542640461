//! One reading of a request's header fields (docs/data-path.md, "One reading of a request"),
//! over real sockets, on every protocol a request arrives by: HTTP/1.1 on the own engine's
//! head path and bridged into the shared phases (an absolute-form target), h2c prior
//! knowledge, TLS h2, HTTP/3 (aioquic), and gRPC where it applies.
//!
//! - A field whose name, with `_` read as `-`, is one of the router's own (`X-Iuid_Region`,
//!   `X_Forwarded_For`, …) never reaches the upstream; any other `_` name goes by
//!   `limits.underscore_fields` (`drop` by default, `pass`); each line counted in
//!   `iuid_router_underscore_fields_total`.
//! - A `{ header: NAME }` rate limit's key sent on two lines with different values is 400
//!   `ambiguous-header` (gRPC 3), nothing forwarded, nothing counted; the same value twice is
//!   one key.
//! - A valid `tracestate` over 512 bytes goes on truncated by whole list members, never
//!   dropped whole.
//!
//! What the upstream got is read from its raw bytes (`common::recording_upstream`).

mod common;

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{iuid_for, lettered_table, metric_sum, metrics_text, orders_config, Router};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

const UNDERSCORES: &str = "iuid_router_underscore_fields_total";
const AMBIGUOUS: &str = "urn:iuid-router:problem:ambiguous-header";

/// The tests of this file one at a time: the counters are the process's.
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

/// The protocols over TCP (HTTP/3 needs aioquic: its tests are ignored unless .ci/run).
const TCP: [Proto; 4] = [Proto::H1, Proto::H1Bridged, Proto::H2c, Proto::TlsH2];

/// A router of `orders_config` plus `extra` in front of one recording upstream, with TLS
/// (and HTTP/3) when `proto` needs them.
struct World {
    router: Router,
    seen: Arc<Mutex<Vec<Vec<u8>>>>,
    certs: Option<tempfile::TempDir>,
    proto: Proto,
}

impl World {
    async fn start(proto: Proto, extra: &str) -> World {
        let (url, seen) = common::recording_upstream().await;
        let table = lettered_table("one", &[&[url]]);
        let mut config = orders_config().extra(extra);
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
            seen,
            certs,
            proto,
        }
    }

    /// Requests so far.
    fn count(&self) -> usize {
        self.seen.lock().expect("log").len()
    }

    /// The field lines of the last request the upstream got, as `(name, value)` in order.
    fn last_fields(&self) -> Vec<(String, String)> {
        let seen = self.seen.lock().expect("log");
        let head = String::from_utf8_lossy(seen.last().expect("a request arrived")).into_owned();
        let head = head.split("\r\n\r\n").next().unwrap_or_default().to_owned();
        head.lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.to_owned(), v.trim().to_owned()))
            .collect()
    }

    /// The names (lowercased) of the last request's fields.
    fn last_names(&self) -> Vec<String> {
        self.last_fields()
            .into_iter()
            .map(|(n, _)| n.to_ascii_lowercase())
            .collect()
    }

    /// A `GET` of a region-a order with `fields` (sent in order, a name twice as two lines):
    /// the answer's status and body (for gRPC, see [`World::grpc`]).
    async fn get(&self, fields: &[(&str, &str)]) -> (u16, String) {
        let path = format!("/v1/orders/{}", iuid_for(1));
        let router = &self.router;
        match self.proto {
            Proto::H1 | Proto::H1Bridged => {
                let target = match self.proto {
                    Proto::H1 => path,
                    _ => format!("http://shop.example{path}"),
                };
                let mut request =
                    format!("GET {target} HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n");
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
                    .fold(http::Request::get(self.h2_url(&path)), |r, (n, v)| {
                        r.header(*n, *v)
                    })
                    .body(Empty::<Bytes>::new())
                    .expect("request");
                let resp = self.h2(req).await;
                let status = resp.status().as_u16();
                let body = resp.into_body().collect().await.expect("body").to_bytes();
                (status, String::from_utf8_lossy(&body).into_owned())
            }
            Proto::H3 => {
                let lines: Vec<[&str; 2]> = fields.iter().map(|(n, v)| [*n, *v]).collect();
                let step = serde_json::json!({"op": "request", "method": "GET", "path": path,
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

    /// A gRPC call (h2c or TLS h2) with `fields`: its HTTP status and `grpc-status`.
    async fn grpc(&self, fields: &[(&str, &str)]) -> (u16, Option<String>) {
        let id = iuid_for(1);
        let message = [&[0x0a, id.len() as u8][..], id.as_bytes()].concat();
        let req = fields
            .iter()
            .fold(
                http::Request::post(self.h2_url("/orders.v1.Orders/GetOrder"))
                    .header("content-type", "application/grpc")
                    .header("te", "trailers"),
                |r, (n, v)| r.header(*n, *v),
            )
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

    async fn metric(&self, labels: &[&str]) -> f64 {
        metric_sum(&metrics_text(self.router.admin).await, UNDERSCORES, labels)
    }
}

// ---- Field names with `_` ---------------------------------------------------------------

/// What a client sends: the router's own decision and forwarding fields spelled with `_`,
/// another `_` name, and a plain field.
const UNDERSCORED: [(&str, &str); 8] = [
    ("X-Iuid_Region", "ap"),
    ("X_Iuid_Move", "to"),
    ("X-Iuid_Mirror", "1"),
    ("X_Forwarded_For", "6.6.6.6"),
    ("X-Forwarded_Host", "bank.example"),
    ("X_Request_Id", "forged"),
    ("X_Tenant_Hint", "blue"),
    ("X-Plain", "kept"),
];

/// The names with `_` in [`UNDERSCORED`] that read as the router's own.
const OWN: usize = 6;

async fn underscores_on(proto: Proto, setting: Option<&str>) {
    let _serial = serial().await;
    let limits = setting.map(|s| format!("limits: {{ underscore_fields: {s} }}\n"));
    let w = World::start(proto, limits.as_deref().unwrap_or("")).await;
    let own = w.metric(&["kind=\"own\"", "action=\"dropped\""]).await;
    let dropped = w.metric(&["kind=\"other\"", "action=\"dropped\""]).await;
    let passed = w.metric(&["kind=\"other\"", "action=\"passed\""]).await;

    let (status, body) = w.get(&UNDERSCORED).await;
    assert_eq!(status, 200, "{proto:?}: {body}");
    let names = w.last_names();
    let leaked: Vec<&String> = names
        .iter()
        .filter(|n| n.contains('_') && n.as_str() != "x_tenant_hint")
        .collect();
    assert!(
        leaked.is_empty(),
        "{proto:?}: {leaked:?} reached the upstream"
    );
    assert!(
        names.contains(&"x-plain".to_owned()),
        "{proto:?}: {names:?}"
    );
    let pass = setting == Some("pass");
    assert_eq!(
        names.contains(&"x_tenant_hint".to_owned()),
        pass,
        "{proto:?} {setting:?}: {names:?}"
    );
    // The router's own, as the router wrote them: not the client's.
    let fields = w.last_fields();
    let value = |name: &str| {
        fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect::<Vec<_>>()
    };
    assert_eq!(value("x-forwarded-for"), ["127.0.0.1"], "{proto:?}");
    assert_eq!(value("x-forwarded-host").len(), 1, "{proto:?}: {fields:?}");
    let forged = ["forged", "6.6.6.6", "bank.example", "to"];
    assert!(
        !fields.iter().any(|(_, v)| forged.contains(&v.as_str())),
        "{proto:?}: {fields:?}"
    );

    let now = [
        w.metric(&["kind=\"own\"", "action=\"dropped\""]).await - own,
        w.metric(&["kind=\"other\"", "action=\"dropped\""]).await - dropped,
        w.metric(&["kind=\"other\"", "action=\"passed\""]).await - passed,
    ];
    let other = if pass { [0.0, 1.0] } else { [1.0, 0.0] };
    assert_eq!(
        now,
        [OWN as f64, other[0], other[1]],
        "{proto:?}: counted (own dropped, other dropped, other passed)"
    );
}

/// By default (`drop`, as nginx's `underscores_in_headers off`), no field with `_` in its
/// name reaches the upstream, on any protocol over TCP.
#[tokio::test(flavor = "multi_thread")]
async fn underscore_names_are_dropped_by_default() {
    for proto in TCP {
        underscores_on(proto, None).await;
    }
}

/// With `pass`, another `_` name goes on, but never one that reads as the router's own.
#[tokio::test(flavor = "multi_thread")]
async fn underscore_names_pass_but_never_the_routers_own() {
    for proto in TCP {
        underscores_on(proto, Some("pass")).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs aioquic (.ci/run installs it)"]
async fn underscore_names_over_http3() {
    underscores_on(Proto::H3, None).await;
    underscores_on(Proto::H3, Some("pass")).await;
}

/// A trusted peer's `X-Iuid-Mirror` is kept (docs/moves.md), but not its `X-Iuid_Mirror`.
#[tokio::test(flavor = "multi_thread")]
async fn a_trusted_peers_mirror_mark_is_kept_only_as_spelled() {
    let _serial = serial().await;
    let w = World::start(Proto::H1, "trusted_proxies: [127.0.0.1]\n").await;
    let (status, _) = w
        .get(&[("X-Iuid-Mirror", "1"), ("X-Iuid_Mirror", "1")])
        .await;
    assert_eq!(status, 200);
    let names = w.last_names();
    assert_eq!(
        names
            .iter()
            .filter(|n| n.starts_with("x-iuid"))
            .collect::<Vec<_>>(),
        ["x-iuid-mirror"],
        "{names:?}"
    );
}

/// `limits.underscore_fields` takes `drop` or `pass`; anything else is refused where it is
/// written.
#[test]
fn a_bad_underscore_setting_is_refused_where_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    common::write(
        &dir,
        "routing-table.yaml",
        &lettered_table("one", &[&["http://127.0.0.1:9".to_owned()]]),
    );
    let text = "listen: 127.0.0.1:0\nregion: eu\nrouting_table: routing-table.yaml\nlimits:\n  underscore_fields: keep\n";
    common::assert_refused_at(
        &dir,
        text,
        "unknown variant `keep`, expected `drop` or `pass`",
        5,
    );
}

// ---- A rate-limit key sent twice ---------------------------------------------------------

const KEYED: &str =
    "rate_limits:\n  - { name: key, key: { header: x-api-key }, rate: 1/min, burst: 0 }\n";

async fn key_twice_on(proto: Proto) {
    let _serial = serial().await;
    let w = World::start(proto, KEYED).await;
    // `over` spends its one request; `fresh` has its own.
    let (status, _) = w.get(&[("x-api-key", "over")]).await;
    assert_eq!(status, 200, "{proto:?}");
    let forwarded = w.count();

    // `fresh` then `over` on two lines: the rule would count `fresh`, the upstream could act
    // on `over` (or on both joined). Refused, nothing forwarded.
    let (status, body) = w
        .get(&[("x-api-key", "fresh"), ("x-api-key", "over")])
        .await;
    assert_eq!(status, 400, "{proto:?}: {body}");
    let problem: serde_json::Value = serde_json::from_str(&body).expect("problem+json");
    assert_eq!(problem["type"], AMBIGUOUS, "{proto:?}: {problem}");
    assert_eq!(problem["field"], "x-api-key", "{proto:?}: {problem}");
    assert_eq!(w.count(), forwarded, "{proto:?}: nothing forwarded");

    // Nothing was counted: `fresh` still has its request, once, however many lines say it.
    let (status, body) = w
        .get(&[("x-api-key", "fresh"), ("x-api-key", "fresh")])
        .await;
    assert_eq!(status, 200, "{proto:?}: {body}");
    let (status, _) = w.get(&[("x-api-key", "fresh")]).await;
    assert_eq!(
        status, 429,
        "{proto:?}: the same key twice is counted once, as one key"
    );
    let (status, _) = w.get(&[("x-api-key", "over"), ("x-api-key", "over")]).await;
    assert_eq!(status, 429, "{proto:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rate_limit_key_sent_twice_with_different_values_is_refused() {
    for proto in TCP {
        key_twice_on(proto).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs aioquic (.ci/run installs it)"]
async fn a_rate_limit_key_sent_twice_over_http3() {
    key_twice_on(Proto::H3).await;
}

/// A gRPC client is told 3 `INVALID_ARGUMENT`, over h2c and TLS h2.
#[tokio::test(flavor = "multi_thread")]
async fn a_grpc_call_with_its_key_sent_twice_is_invalid_argument() {
    let _serial = serial().await;
    for proto in [Proto::H2c, Proto::TlsH2] {
        let w = World::start(proto, KEYED).await;
        let (status, grpc) = w.grpc(&[("x-api-key", "a"), ("x-api-key", "b")]).await;
        assert_eq!((status, grpc.as_deref()), (200, Some("3")), "{proto:?}");
        assert_eq!(w.count(), 0, "{proto:?}");
    }
}

/// The check is the rate limit's: without a `{ header: x-api-key }` rule, two lines go on.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_header_rule_two_lines_go_on() {
    let _serial = serial().await;
    let w = World::start(Proto::H1, "").await;
    let (status, _) = w.get(&[("x-api-key", "a"), ("x-api-key", "b")]).await;
    assert_eq!(status, 200);
    let keys: Vec<String> = w
        .last_fields()
        .into_iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-api-key"))
        .map(|(_, v)| v)
        .collect();
    assert_eq!(keys, ["a", "b"]);
}

// ---- tracestate over 512 bytes ------------------------------------------------------------

/// `n` list members `k{i}=` + `len` bytes.
fn members(from: usize, n: usize, len: usize) -> Vec<String> {
    (from..from + n)
        .map(|i| format!("k{i}={}", "v".repeat(len)))
        .collect()
}

async fn tracestate_on(proto: Proto) {
    let _serial = serial().await;
    let receiver = common::otlp::Receiver::start().await;
    let tracing = format!(
        "tracing: {{ otlp: {{ endpoint: \"{}\", protocol: grpc }}, sample_ratio: 1.0 }}\n",
        receiver.endpoint()
    );
    let w = World::start(proto, &tracing).await;
    let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    // 609 bytes, valid: ten members of 60 bytes. The first eight fit in 512.
    let all = members(0, 10, 57);
    let state = all.join(",");
    assert_eq!(state.len(), 609);
    let (status, body) = w
        .get(&[("traceparent", traceparent), ("tracestate", &state)])
        .await;
    assert_eq!(status, 200, "{proto:?}: {body}");
    let fields = w.last_fields();
    let states: Vec<&str> = fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("tracestate"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(
        states,
        [all[..8].join(",")],
        "{proto:?}: whole members, from the left"
    );

    // A long member goes first; two lines are one list.
    let long = format!("long={}", "l".repeat(195));
    let (status, _) = w
        .get(&[
            ("traceparent", traceparent),
            (
                "tracestate",
                &[members(0, 2, 100), vec![long]].concat().join(","),
            ),
            ("tracestate", &members(2, 2, 100).join(",")),
        ])
        .await;
    assert_eq!(status, 200, "{proto:?}");
    let fields = w.last_fields();
    let states: Vec<&str> = fields
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("tracestate"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(states, [members(0, 4, 100).join(",")], "{proto:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tracestate_over_512_bytes_is_truncated_by_whole_members() {
    for proto in TCP {
        tracestate_on(proto).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs aioquic (.ci/run installs it)"]
async fn a_tracestate_over_512_bytes_over_http3() {
    tracestate_on(Proto::H3).await;
}
