//! Traces (docs/traces.md): with `tracing:`, every request exports one `SERVER`
//! span named by its route template and one `CLIENT` span per upstream attempt (a retry, each
//! fan-out region, each legacy probe), whatever carried it (HTTP/1.1 on the head path and
//! bridged, h2c, TLS h2, gRPC, HTTP/3) and whatever route kind found its id; W3C `traceparent` comes
//! in (adopted when trusted and valid) and goes out (exactly one, its parent the attempt's
//! span); a collector that is away or slow costs no request, and what is lost is counted.
//!
//! Each test starts a real OTLP receiver on loopback (`common::otlp`: gRPC and HTTP/protobuf
//! on one port), the real router in this process exporting to it, and real upstreams; each
//! request carries a `traceparent` of a trace id of its own, by which its spans are found.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use common::lists::ListRegion;
use common::otlp::{Receiver, Span, CLIENT, SERVER, STATUS_ERROR};
use common::{client, free_port, iuid_for, url, ConfigYaml, Router, Upstream};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The span id of the callers in these tests.
const CALLER: &str = "00f067aa0ba902b7";

/// A legacy id (a UUIDv4, no routing bits).
const LEGACY: &str = "9b2e4c1a-7d3f-4e8b-a6c5-0f1e2d3c4b5a";

/// A trace id no other request of this process uses.
fn trace_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(7, |d| d.as_nanos() as u64);
    format!("{nanos:016x}{n:016x}")
}

/// A sampled caller's `traceparent` in trace `trace`.
fn traceparent(trace: &str) -> String {
    format!("00-{trace}-{CALLER}-01")
}

/// The route kinds of tests/request_life.rs, `legacy: probe`, exporting to `receiver` over
/// `protocol`, every trace sampled, as edge `edge-eu`.
fn config(receiver: &Receiver, protocol: &str) -> ConfigYaml {
    common::every_route_kind()
        .extra(&format!(
            "tracing: {{ otlp: {{ endpoint: \"{}\", protocol: {protocol} }}, service_name: edge-eu, sample_ratio: 1.0 }}",
            receiver.endpoint()
        ))
}

/// GETs `path` from `router` with `headers`; the answer must be `status` (its body is read).
async fn get(router: &Router, path: &str, headers: &[(&str, &str)], status: u16) {
    let mut req = client().get(router.url(path));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let resp = req.send().await.expect("answer");
    assert_eq!(resp.status(), status, "GET {path}");
    resp.bytes().await.expect("body");
}

/// Regions `eu`, `us`, `ap` (countries 3, 2, 1); `ap`'s upstream is returned.
async fn three() -> (String, Upstream) {
    let (eu, us, ap) = (
        Upstream::start("eu").await,
        Upstream::start("us").await,
        Upstream::start("ap").await,
    );
    (
        common::three_regions("traces", &eu.url(), &us.url(), &ap.url()),
        ap,
    )
}

/// A receiver, [`three`] and a router of [`config`] in front of them exporting over gRPC:
/// (receiver, `ap`'s upstream, router).
async fn traced_three() -> (Receiver, Upstream, Router) {
    let receiver = Receiver::start().await;
    let (table, ap) = three().await;
    let router = Router::start(&config(&receiver, "grpc").yaml(), &table).await;
    (receiver, ap, router)
}

/// The one `traceparent` the last request `upstream` received carried.
fn sent_traceparent(upstream: &Upstream) -> String {
    let received = upstream.last();
    let sent: Vec<&str> = received
        .headers
        .get_all("traceparent")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    assert_eq!(sent.len(), 1, "one traceparent upstream: {sent:?}");
    sent[0].to_owned()
}

fn order_path() -> String {
    format!("/v1/orders/{}", iuid_for(1))
}

/// The one `SERVER` span of `spans` and its `CLIENT` children; fails on any other shape: a
/// second server span, a client span that is not its child, a span of another service.
fn tree<'s>(case: &str, spans: &'s [Span], parent: &str) -> (&'s Span, Vec<&'s Span>) {
    let servers: Vec<&Span> = spans.iter().filter(|s| s.kind == SERVER).collect();
    assert_eq!(servers.len(), 1, "{case}: one SERVER span: {spans:#?}");
    let server = servers[0];
    assert_eq!(server.parent, parent, "{case}: the SERVER span's parent");
    assert_eq!(server.service, "edge-eu", "{case}: service.name");
    let clients: Vec<&Span> = spans.iter().filter(|s| s.kind == CLIENT).collect();
    assert_eq!(
        clients.len() + 1,
        spans.len(),
        "{case}: only SERVER and CLIENT spans: {spans:#?}"
    );
    for c in &clients {
        assert_eq!(
            c.parent, server.span_id,
            "{case}: a CLIENT span's parent: {c:#?}"
        );
    }
    (server, clients)
}

/// The regions of `clients`, sorted.
fn regions(clients: &[&Span]) -> Vec<String> {
    let mut got: Vec<String> = clients
        .iter()
        .map(|c| c.attr("iuid_router.region").to_owned())
        .collect();
    got.sort();
    got
}

/// Checks a request routed to `ap` in one attempt: the server span's name, route and
/// decision, one client span, and the `traceparent` `ap` received (its parent the client
/// span); returns the server span.
fn check_ap(case: &str, spans: &[Span], name: &str, route: Option<&str>, ap: &Upstream) -> Span {
    check_ap_under(case, spans, CALLER, name, route, ap)
}

/// [`check_ap`] for a `SERVER` span whose parent is `parent` (`""`: a root).
fn check_ap_under(
    case: &str,
    spans: &[Span],
    parent: &str,
    name: &str,
    route: Option<&str>,
    ap: &Upstream,
) -> Span {
    let (server, clients) = tree(case, spans, parent);
    assert_eq!(server.name, name, "{case}: the SERVER span's name");
    assert_eq!(
        server.attr("http.route"),
        route.unwrap_or(""),
        "{case}: http.route"
    );
    assert_eq!(server.attr("http.response.status_code"), "200", "{case}");
    assert_eq!(server.attr("iuid_router.region"), "ap", "{case}");
    assert_eq!(server.attr("iuid_router.scheme"), "iuid", "{case}");
    assert_eq!(server.attr("iuid_router.rule"), "country", "{case}");
    assert_eq!(server.attr("client.address"), "127.0.0.1", "{case}");
    // Semantic conventions: only a protocol other than `http` is named.
    assert_eq!(server.attr("network.protocol.name"), "", "{case}");
    assert_eq!(regions(&clients), ["ap"], "{case}: one CLIENT span, to ap");
    let client_span = clients[0];
    assert_eq!(client_span.attr("server.address"), "127.0.0.1", "{case}");
    assert_eq!(
        client_span.attr("http.response.status_code"),
        "200",
        "{case}"
    );
    assert_eq!(
        client_span.attr("http.request.resend_count"),
        "",
        "{case}: a first attempt"
    );
    let sent: Vec<String> = ap
        .last()
        .headers
        .get_all("traceparent")
        .iter()
        .map(|v| v.to_str().unwrap_or("").to_owned())
        .collect();
    assert_eq!(
        sent,
        [format!("00-{}-{}-01", server.trace_id, client_span.span_id)],
        "{case}: exactly one traceparent upstream, its parent the CLIENT span"
    );
    server.clone()
}

/// One request through a router of [`config`] in front of [`three`], answered 200 by `ap`;
/// its spans checked by [`check_ap`].
async fn ap_case(
    case: &str,
    http: reqwest::Client,
    name: &str,
    route: Option<&str>,
    request: impl FnOnce(&reqwest::Client, &Router) -> reqwest::RequestBuilder,
) {
    let (receiver, ap, router) = traced_three().await;
    let trace = trace_id();
    let resp = request(&http, &router)
        .header("traceparent", traceparent(&trace))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_eq!(resp.status(), 200, "{case}");
    resp.bytes().await.unwrap_or_else(|e| panic!("{case}: {e}"));
    let spans = receiver.trace(&trace, 2).await;
    check_ap(case, &spans, name, route, &ap);
}

// ---- HTTP/1.1 on the head path ------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn h1_path_route() {
    let path = order_path();
    ap_case(
        "h1-path",
        client(),
        "GET /v1/orders/{id}",
        Some("/v1/orders/{id}"),
        |c, r| c.get(r.url(&path)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn h1_header_route_has_no_template() {
    ap_case("h1-header", client(), "GET", None, |c, r| {
        c.get(r.url("/v1/things"))
            .header("x-entity-id", iuid_for(1))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn h1_graphql_route() {
    let query = format!("{{ node(id: \"{}\") {{ id }} }}", iuid_for(1));
    let body = serde_json::json!({ "query": query }).to_string();
    ap_case(
        "h1-graphql",
        client(),
        "POST /graphql",
        Some("/graphql"),
        |c, r| {
            c.post(r.url("/graphql"))
                .header("content-type", "application/json")
                .body(body)
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn h1_query_route() {
    let target = format!("/v1/rides?order_id={}", iuid_for(1));
    ap_case(
        "h1-query",
        client(),
        "GET /v1/rides",
        Some("/v1/rides"),
        |c, r| c.get(r.url(&target)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn h1_json_route() {
    let body = serde_json::json!({ "order_id": iuid_for(1) }).to_string();
    ap_case(
        "h1-json",
        client(),
        "POST /v1/payments",
        Some("/v1/payments"),
        |c, r| {
            c.post(r.url("/v1/payments"))
                .header("content-type", "application/json")
                .body(body)
        },
    )
    .await;
}

/// A fan-out: one CLIENT span per region, each with the region's `traceparent`.
#[tokio::test(flavor = "multi_thread")]
async fn fanout_has_a_client_span_per_region() {
    let case = "fanout";
    let receiver = Receiver::start().await;
    let lists = [
        ListRegion::start("eu").await,
        ListRegion::start("us").await,
        ListRegion::start("ap").await,
    ];
    let table = common::three_regions("traces", &lists[0].url(), &lists[1].url(), &lists[2].url());
    let router = Router::start(&config(&receiver, "grpc").yaml(), &table).await;
    let trace = trace_id();
    get(
        &router,
        "/v1/list",
        &[("traceparent", &traceparent(&trace))],
        200,
    )
    .await;
    let spans = receiver.trace(&trace, 4).await;
    let (server, clients) = tree(case, &spans, CALLER);
    assert_eq!(server.name, "GET /v1/list", "{case}");
    assert_eq!(regions(&clients), ["ap", "eu", "us"], "{case}");
}

/// A retry is a second CLIENT span: the first upstream refuses the connection (its span an
/// error), the second answers (`http.request.resend_count: 1`).
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_is_a_second_client_span() {
    let case = "retry";
    let receiver = Receiver::start().await;
    let closed = free_port();
    let live = Upstream::start("live").await;
    let table = common::lettered_table("traces", &[&[url(closed), live.url()]]);
    let router = Router::start(&config(&receiver, "grpc").yaml(), &table).await;
    let trace = trace_id();
    get(
        &router,
        &order_path(),
        &[("traceparent", &traceparent(&trace))],
        200,
    )
    .await;
    let spans = receiver.trace(&trace, 3).await;
    let (_, mut clients) = tree(case, &spans, CALLER);
    clients.sort_by_key(|c| c.attr("http.request.resend_count").to_owned());
    assert_eq!(clients.len(), 2, "{case}: two attempts: {clients:#?}");
    let (first, second) = (clients[0], clients[1]);
    assert_eq!(
        first.attr("server.port"),
        closed.port().to_string(),
        "{case}"
    );
    assert_eq!(
        first.status_code, STATUS_ERROR,
        "{case}: the refused attempt"
    );
    assert_eq!(first.attr("error.type"), "connect", "{case}");
    assert_eq!(second.attr("http.request.resend_count"), "1", "{case}");
    assert_eq!(
        second.attr("server.port"),
        live.addr.port().to_string(),
        "{case}"
    );
    let sent = sent_traceparent(&live);
    assert_eq!(
        Some(sent.as_str()),
        Some(format!("00-{trace}-{}-01", second.span_id).as_str()),
        "{case}: the retry's own span is the parent upstream"
    );
}

// ---- HTTP/1.1 bridged into the shared phases ---------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn bridged_absolute_form_target() {
    let case = "bridged-absolute";
    let (receiver, ap, router) = traced_three().await;
    let trace = trace_id();
    let request = format!(
        "GET http://shop.example{} HTTP/1.1\r\nHost: shop.example\r\ntraceparent: {}\r\nConnection: close\r\n\r\n",
        order_path(),
        traceparent(&trace)
    );
    let answer = common::raw_http(router.addr, request.into_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 "), "{case}: {answer}");
    let spans = receiver.trace(&trace, 2).await;
    let server = check_ap(
        case,
        &spans,
        "GET /v1/orders/{id}",
        Some("/v1/orders/{id}"),
        &ap,
    );
    assert_eq!(server.attr("server.address"), "shop.example", "{case}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bridged_websocket_upgrade() {
    let case = "bridged-upgrade";
    let receiver = Receiver::start().await;
    let ws = url(common::ws_echo_upstream().await);
    let table = common::three_regions("traces", &ws, &ws, &ws);
    let router = Router::start(&config(&receiver, "grpc").yaml(), &table).await;
    let trace = trace_id();
    {
        let mut conn = TcpStream::connect(router.addr).await.expect("connect");
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\ntraceparent: {}\r\n\r\n",
            order_path(),
            traceparent(&trace)
        );
        conn.write_all(request.as_bytes()).await.expect("write");
        let head = common::read_head(&mut conn).await.unwrap_or_default();
        assert!(head.starts_with("HTTP/1.1 101 "), "{case}: {head}");
    }
    let spans = receiver.trace(&trace, 2).await;
    let (server, clients) = tree(case, &spans, CALLER);
    assert_eq!(server.attr("http.response.status_code"), "101", "{case}");
    assert_eq!(regions(&clients), ["ap"], "{case}");
}

/// A legacy id: the default region answers 404, the probe asks `us`: a CLIENT span each.
#[tokio::test(flavor = "multi_thread")]
async fn legacy_probe_has_a_client_span_per_region() {
    let case = "legacy";
    let receiver = Receiver::start().await;
    let answering = |status: u16| async move {
        let status = http::StatusCode::from_u16(status).expect("a status");
        url(common::serve(axum::Router::new().fallback(move || async move { status })).await)
    };
    let (eu, us) = (answering(404).await, answering(200).await);
    let table = format!(
        "version: traces\nregions:\n  eu: {{ upstreams: [\"{eu}\"] }}\n  us: {{ upstreams: [\"{us}\"] }}\ncountries:\n  2: us\n  3: eu\ndefault_region: eu\n"
    );
    let router = Router::start(&config(&receiver, "grpc").yaml(), &table).await;
    let trace = trace_id();
    get(
        &router,
        &format!("/v1/orders/{LEGACY}"),
        &[("traceparent", &traceparent(&trace))],
        200,
    )
    .await;
    let spans = receiver.trace(&trace, 3).await;
    let (server, clients) = tree(case, &spans, CALLER);
    assert_eq!(regions(&clients), ["eu", "us"], "{case}");
    assert_eq!(server.attr("iuid_router.rule"), "default_region", "{case}");
}

// ---- HTTP/2 and gRPC ----------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread")]
async fn h2c_prior_knowledge() {
    let h2c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("h2c client");
    let path = order_path();
    ap_case(
        "h2c",
        h2c,
        "GET /v1/orders/{id}",
        Some("/v1/orders/{id}"),
        |c, r| c.get(r.url(&path)),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn tls_h2() {
    let case = "tls-h2";
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    common::make_certs(&certs, false, &["localhost"]);
    let tls = common::tls_lines(&certs);
    let (table, ap) = three().await;
    let router = Router::start(&config(&receiver, "grpc").extra(&tls).yaml(), &table).await;
    let trace = trace_id();
    let tls = common::tls_to_localhost(router.addr, &certs, b"h2").await;
    let (mut h2, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let target = format!("https://localhost:{}{}", router.addr.port(), order_path());
    let req = http::Request::get(target)
        .header("traceparent", traceparent(&trace))
        .body(Empty::<Bytes>::new())
        .expect("request");
    let resp = h2.send_request(req).await.expect("answer");
    assert_eq!(resp.status(), 200, "{case}");
    resp.into_body().collect().await.expect("body");
    check_https(case, &receiver.trace(&trace, 2).await, &ap, "2");
}

/// [`check_ap`] for `GET /v1/orders/{id}` over HTTPS in HTTP `version` (`2`, `3`).
fn check_https(case: &str, spans: &[Span], ap: &Upstream, version: &str) {
    let server = check_ap(
        case,
        spans,
        "GET /v1/orders/{id}",
        Some("/v1/orders/{id}"),
        ap,
    );
    assert_eq!(server.attr("network.protocol.version"), version, "{case}");
    assert_eq!(server.attr("url.scheme"), "https", "{case}");
}

/// HTTP/3 (aioquic's client, `tests/h3_py/client.py`): the same SERVER span, version 3.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn h3() {
    let case = "h3";
    let receiver = Receiver::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    common::make_certs(&certs, false, &["localhost"]);
    let config = config(&receiver, "grpc")
        .extra(&common::tls_lines(&certs))
        .extra("http3: {}\n");
    let (table, ap) = three().await;
    let router = Router::start(&config.yaml(), &table).await;
    let trace = trace_id();
    let step = serde_json::json!({"op": "request", "method": "GET", "path": order_path(),
        "headers": {"traceparent": traceparent(&trace)}});
    let out = common::h3::run(common::h3::plan(
        router.addr.port(),
        &certs,
        serde_json::json!([step]),
    ))
    .await;
    assert_eq!(out["results"][0]["status"], 200, "{case}: {out}");
    check_https(case, &receiver.trace(&trace, 2).await, &ap, "3");
}

#[tokio::test(flavor = "multi_thread")]
async fn grpc_route() {
    let case = "grpc";
    let receiver = Receiver::start().await;
    let (upstream, _) = common::grpc::upstream("ap-orders").await;
    let table = format!(
        "version: traces\nregions:\n  ap: {{ upstreams: [\"{upstream}\"], protocol: h2 }}\ncountries:\n  1: ap\ndefault_region: ap\n"
    );
    let router = Router::start(&config(&receiver, "grpc").yaml(), &table).await;
    let trace = trace_id();
    let tcp = TcpStream::connect(router.addr).await.expect("connect");
    let (mut h2, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let id = iuid_for(1);
    let message = [&[0x0a, id.len() as u8][..], id.as_bytes()].concat();
    let req = http::Request::post(router.url("/orders.v1.Orders/GetOrder"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("traceparent", traceparent(&trace))
        .body(Full::new(common::grpc::frame(&message)))
        .expect("request");
    let resp = h2.send_request(req).await.expect("answer");
    assert_eq!(resp.status(), 200, "{case}");
    resp.into_body().collect().await.expect("body");
    let spans = receiver.trace(&trace, 2).await;
    let (server, clients) = tree(case, &spans, CALLER);
    assert_eq!(server.name, "POST /orders.v1.Orders/GetOrder", "{case}");
    assert_eq!(regions(&clients), ["ap"], "{case}");
}

// ---- traceparent in and out, sampling, export ---------------------------------------------

/// OTLP over HTTP/protobuf (`{endpoint}/v1/traces`) carries the same spans.
#[tokio::test(flavor = "multi_thread")]
async fn http_protobuf_export() {
    let case = "http/protobuf";
    let receiver = Receiver::start().await;
    let (table, ap) = three().await;
    let router = Router::start(&config(&receiver, "http/protobuf").yaml(), &table).await;
    let trace = trace_id();
    get(
        &router,
        &order_path(),
        &[("traceparent", &traceparent(&trace))],
        200,
    )
    .await;
    let spans = receiver.trace(&trace, 2).await;
    check_ap(
        case,
        &spans,
        "GET /v1/orders/{id}",
        Some("/v1/orders/{id}"),
        &ap,
    );
    assert!(spans.iter().all(|s| s.via == "http/protobuf"), "{case}");
}

/// An invalid `traceparent` is dropped: the router starts a trace of its own, and what goes
/// upstream is its traceparent, not the client's.
#[tokio::test(flavor = "multi_thread")]
async fn an_invalid_traceparent_is_dropped() {
    let case = "invalid";
    let (receiver, ap, router) = traced_three().await;
    let bad = "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01";
    get(
        &router,
        &order_path(),
        &[("traceparent", bad), ("tracestate", "vendor=1")],
        200,
    )
    .await;
    let received = ap.last();
    let sent: Vec<&str> = received
        .headers
        .get_all("traceparent")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect();
    assert_eq!(sent.len(), 1, "{case}: {sent:?}");
    assert_ne!(sent[0], bad, "{case}");
    assert!(
        received.headers.get("tracestate").is_none(),
        "{case}: no tracestate"
    );
    let trace = &sent[0][3..35];
    let spans = receiver.trace(trace, 2).await;
    let route = Some("/v1/orders/{id}");
    check_ap_under(case, &spans, "", "GET /v1/orders/{id}", route, &ap);
}

/// `trust_incoming: false`: a valid `traceparent` is ignored (a new root trace), and so is
/// its `tracestate`; trusted, both are kept.
#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_traceparent_starts_a_new_trace() {
    let case = "untrusted";
    let receiver = Receiver::start().await;
    let (table, ap) = three().await;
    let yaml = config(&receiver, "grpc").yaml().replace(
        "sample_ratio: 1.0",
        "sample_ratio: 1.0, trust_incoming: false",
    );
    let router = Router::start(&yaml, &table).await;
    let caller = trace_id();
    get(
        &router,
        &order_path(),
        &[
            ("traceparent", &traceparent(&caller)),
            ("tracestate", "vendor=1"),
        ],
        200,
    )
    .await;
    let sent = sent_traceparent(&ap);
    assert!(!sent.contains(&caller), "{case}: {sent}");
    assert!(ap.last().headers.get("tracestate").is_none(), "{case}");
    let spans = receiver.trace(&sent[3..35], 2).await;
    let (server, _) = tree(case, &spans, "");
    assert_eq!(server.parent, "", "{case}: a root span");
}

/// A trusted caller's `tracestate` goes on with its trace.
#[tokio::test(flavor = "multi_thread")]
async fn a_trusted_tracestate_goes_on() {
    let (_receiver, ap, router) = traced_three().await;
    let trace = trace_id();
    let resp = client()
        .get(router.url(&order_path()))
        .header("traceparent", traceparent(&trace))
        .header("tracestate", "vendor=1,other=2")
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 200);
    let received = ap.last();
    assert_eq!(
        received
            .headers
            .get("tracestate")
            .and_then(|v| v.to_str().ok()),
        Some("vendor=1,other=2")
    );
}

/// A caller that did not sample: nothing is exported (parent-based), yet the trace goes on
/// upstream, unsampled, with this edge as its parent.
#[tokio::test(flavor = "multi_thread")]
async fn a_caller_that_did_not_sample_is_followed() {
    let case = "not-sampled";
    let (receiver, ap, router) = traced_three().await;
    let trace = trace_id();
    get(
        &router,
        &order_path(),
        &[
            ("traceparent", &format!("00-{trace}-{CALLER}-00")),
            ("x-request-id", "not-sampled-1"),
        ],
        200,
    )
    .await;
    let sent = sent_traceparent(&ap);
    assert!(sent.starts_with(&format!("00-{trace}-")), "{case}: {sent}");
    assert!(sent.ends_with("-00"), "{case}: {sent}");
    assert!(
        !sent.contains(CALLER),
        "{case}: this edge is the parent: {sent}"
    );
    let spans = receiver.trace(&trace, 1).await;
    assert!(spans.is_empty(), "{case}: {spans:#?}");
}

/// `sample_ratio: 0`: a trace this edge starts is not sampled, and still sent on.
#[tokio::test(flavor = "multi_thread")]
async fn sample_ratio_zero_exports_nothing() {
    let case = "ratio-0";
    let receiver = Receiver::start().await;
    let (table, ap) = three().await;
    let yaml = config(&receiver, "grpc")
        .yaml()
        .replace("sample_ratio: 1.0", "sample_ratio: 0");
    let router = Router::start(&yaml, &table).await;
    for _ in 0..5 {
        get(&router, &order_path(), &[], 200).await;
    }
    let sent = sent_traceparent(&ap);
    assert!(sent.ends_with("-00"), "{case}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        receiver.spans().is_empty(),
        "{case}: {:#?}",
        receiver.spans()
    );
}

/// A request through two peered edges is one trace: the second edge's SERVER span is a child
/// of the first edge's CLIENT span.
#[tokio::test(flavor = "multi_thread")]
async fn two_edges_one_trace() {
    let case = "two-edges";
    let receiver = Receiver::start().await;
    let (table, ap) = three().await;
    let inner = Router::start(&config(&receiver, "grpc").yaml(), &table).await;
    let peer = url(inner.addr);
    let outer_table = common::three_regions("traces", &peer, &peer, &peer);
    let outer_yaml = config(&receiver, "grpc")
        .yaml()
        .replace("service_name: edge-eu", "service_name: edge-us")
        .replace("region: edge", "region: edge-us");
    let outer = Router::start(&outer_yaml, &outer_table).await;
    let trace = trace_id();
    get(
        &outer,
        &order_path(),
        &[("traceparent", &traceparent(&trace))],
        200,
    )
    .await;
    let spans = receiver.trace(&trace, 4).await;
    assert_eq!(spans.len(), 4, "{case}: {spans:#?}");
    let of = |service: &str, kind: i32| -> &Span {
        spans
            .iter()
            .find(|s| s.service == service && s.kind == kind)
            .unwrap_or_else(|| panic!("{case}: no {service} span of kind {kind}: {spans:#?}"))
    };
    let (outer_server, outer_client) = (of("edge-us", SERVER), of("edge-us", CLIENT));
    let (inner_server, inner_client) = (of("edge-eu", SERVER), of("edge-eu", CLIENT));
    assert_eq!(outer_server.parent, CALLER, "{case}");
    assert_eq!(outer_client.parent, outer_server.span_id, "{case}");
    assert_eq!(inner_server.parent, outer_client.span_id, "{case}");
    assert_eq!(inner_client.parent, inner_server.span_id, "{case}");
    let sent = sent_traceparent(&ap);
    assert_eq!(
        Some(sent.as_str()),
        Some(format!("00-{trace}-{}-01", inner_client.span_id).as_str()),
        "{case}"
    );
}

/// A refusal sets the SERVER span's status to its problem type; an upstream's 5xx marks both
/// spans as errors.
#[tokio::test(flavor = "multi_thread")]
async fn errors_set_the_span_status() {
    let case = "errors";
    let receiver = Receiver::start().await;
    let failing = url(common::serve(
        axum::Router::new().fallback(|| async { http::StatusCode::SERVICE_UNAVAILABLE }),
    )
    .await);
    let table = common::three_regions("traces", &failing, &failing, &failing);
    let router = Router::start(&config(&receiver, "grpc").yaml(), &table).await;
    let refused = trace_id();
    get(
        &router,
        "/v1/orders/not-an-id",
        &[("traceparent", &traceparent(&refused))],
        400,
    )
    .await;
    let failed = trace_id();
    get(
        &router,
        &order_path(),
        &[("traceparent", &traceparent(&failed))],
        503,
    )
    .await;

    let spans = receiver.trace(&refused, 1).await;
    let (server, clients) = tree(case, &spans, CALLER);
    assert!(clients.is_empty(), "{case}: nothing was sent upstream");
    assert_eq!(server.status_code, STATUS_ERROR, "{case}: {server:#?}");
    assert!(
        server
            .status_message
            .starts_with("urn:iuid-router:problem:"),
        "{case}: {server:#?}"
    );
    assert_eq!(server.attr("http.response.status_code"), "400", "{case}");

    let spans = receiver.trace(&failed, 2).await;
    let (server, clients) = tree(case, &spans, CALLER);
    assert_eq!(server.status_code, STATUS_ERROR, "{case}: {server:#?}");
    assert_eq!(clients.len(), 1, "{case}");
    assert_eq!(clients[0].status_code, STATUS_ERROR, "{case}");
    assert_eq!(
        clients[0].attr("http.response.status_code"),
        "503",
        "{case}"
    );
}

/// The access log line carries the trace id and this edge's span id.
#[tokio::test(flavor = "multi_thread")]
async fn the_access_log_line_carries_the_ids() {
    common::spans::install();
    let case = "access-log";
    let (receiver, _ap, router) = traced_three().await;
    let trace = trace_id();
    get(
        &router,
        &order_path(),
        &[
            ("traceparent", &traceparent(&trace)),
            ("x-request-id", "traces-access-log"),
        ],
        200,
    )
    .await;
    let spans = receiver.trace(&trace, 2).await;
    let (server, _) = tree(case, &spans, CALLER);
    let lines = common::spans::access_lines("traces-access-log");
    assert_eq!(lines.len(), 1, "{case}: {lines:?}");
    let field = |k: &str| lines[0].get(k).map(|v| v.trim_matches('"').to_owned());
    assert_eq!(field("trace_id"), Some(trace.clone()), "{case}");
    assert_eq!(field("span_id"), Some(server.span_id.clone()), "{case}");
}

// ---- a collector away or slow ---------------------------------------------------------

/// A router of one `path:` route in front of [`three`], every trace sampled, with `tracing:`
/// keys `otlp` (where spans go).
async fn exporting_to(otlp: &str) -> Router {
    let (table, _ap) = three().await;
    let yaml = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .watch(false)
        .extra(&format!("tracing: {{ {otlp}, sample_ratio: 1.0 }}"))
        .yaml();
    Router::start(&yaml, &table).await
}

/// `iuid_router_trace_spans_dropped_total{reason}` of `router`.
async fn dropped(router: &Router, reason: &str) -> f64 {
    let label = format!("reason=\"{reason}\"");
    router
        .metric("iuid_router_trace_spans_dropped_total", &[label.as_str()])
        .await
}

/// Nothing listens where spans go: every request is answered as without tracing, and the
/// spans that could not be exported are counted.
#[tokio::test(flavor = "multi_thread")]
async fn a_collector_that_is_down_costs_no_request() {
    let case = "collector-down";
    let down = free_port();
    let router = exporting_to(&format!("otlp: {{ endpoint: \"http://{down}\" }}")).await;
    let dropped = || dropped(&router, "export_failed");
    let before = dropped().await;
    for _ in 0..20 {
        let started = std::time::Instant::now();
        get(&router, &order_path(), &[], 200).await;
        assert!(started.elapsed() < Duration::from_secs(2), "{case}");
    }
    common::eventually(Duration::from_secs(10), || async {
        dropped().await - before >= 40.0
    })
    .await;
    assert!(
        dropped().await - before >= 40.0,
        "{case}: 20 × 2 spans counted"
    );
}

/// A collector that takes the connection and never answers: the export waits, the queue
/// (`max_queue_spans: 4`) fills, later spans are dropped and counted, and no request waits.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_queue_drops_and_counts() {
    let case = "queue-full";
    let hanging = common::hanging_upstream().await;
    let router = exporting_to(&format!(
        "otlp: {{ endpoint: \"http://{hanging}\", protocol: http/protobuf }}, max_queue_spans: 4"
    ))
    .await;
    let dropped = || dropped(&router, "queue_full");
    let before = dropped().await;
    let started = std::time::Instant::now();
    for _ in 0..50 {
        get(&router, &order_path(), &[], 200).await;
    }
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{case}: 50 requests took {:?}",
        started.elapsed()
    );
    common::eventually(Duration::from_secs(5), || async {
        dropped().await - before >= 50.0
    })
    .await;
    let counted = dropped().await - before;
    assert!(counted >= 50.0, "{case}: {counted} of 100 spans dropped");
}

// ---- config ---------------------------------------------------------------------------

/// A bad `tracing:` is refused at its line and column.
#[test]
fn bad_tracing_settings_are_refused_where_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    common::write(
        &dir,
        "routing-table.yaml",
        &common::lettered_table("t", &[&["http://127.0.0.1:1".to_owned()]]),
    );
    let cases = [
        ("sample_ratio: 1.5", "sample_ratio is a share of traces"),
        (
            "otlp: { endpoint: \"127.0.0.1:4317\" }",
            "must be an http:// or https:// URL",
        ),
        ("otlp: { protocol: http/json }", "unknown variant"),
        ("sample_rate: 0.1", "unknown field"),
    ];
    for (line, why) in cases {
        let text = format!(
            "listen: 127.0.0.1:0\nregion: eu\nrouting_table: routing-table.yaml\ntracing:\n  {line}\n"
        );
        common::assert_refused_at(&dir, &text, why, 5);
    }
}
