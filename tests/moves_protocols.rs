//! Issue 51: the same move behaves the same over every protocol the router serves
//! (docs/moves.md): HTTP/1.1 on the own engine's head path and bridged to the shared
//! phases (an absolute-form target), h2c, TLS h2, HTTP/3 and gRPC. In `fence` a write gets 503
//! `moving` after `hold_ms` (gRPC: 14 UNAVAILABLE with `grpc-retry-pushback-ms`) and a
//! read goes to `from`; after the flip a write goes to `to`; in `mirror` a read is served
//! by `from` and copied to `to`.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::grpc::{frame, upstream as grpc_upstream};
use common::{iuid_for, ConfigYaml, Router, Upstream};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};

fn move_of_country_1(phase: &str, mirror_ratio: f64, hold_ms: u64) -> String {
    format!(
        "moves:\n  - name: ap-to-us\n    match: {{ country: 1 }}\n    from: ap\n    to: us\n    \
         phase: {phase}\n    mirror_ratio: {mirror_ratio}\n    hold_ms: {hold_ms}\n"
    )
}

#[derive(Debug, Clone, Copy)]
enum Proto {
    /// reqwest over HTTP/1.1: the own engine's head path.
    Head,
    /// An absolute-form target: the own engine hands it to the shared phases.
    Bridged,
    H2c,
    TlsH2,
    /// aioquic's HTTP/3 client (`tests/h3_py/client.py`), with `http3:` on.
    H3,
}

/// One request of `method` for country 1's order over `proto`: the status and the
/// `x-upstream` that answered (`-` for none).
async fn send(
    proto: Proto,
    router: &Router,
    certs: &std::path::Path,
    method: &str,
) -> (u16, String) {
    let path = format!("/v1/orders/{}", iuid_for(1));
    let body = if method == "GET" { "" } else { "w" };
    match proto {
        Proto::Head => {
            let method = http::Method::from_bytes(method.as_bytes()).expect("method");
            let resp = common::client()
                .request(method, router.url(&path))
                .body(body)
                .send()
                .await
                .expect("send");
            let upstream = resp
                .headers()
                .get("x-upstream")
                .map_or("-", |v| v.to_str().unwrap_or("?"))
                .to_owned();
            (resp.status().as_u16(), upstream)
        }
        Proto::Bridged => {
            let request = format!(
                "{method} http://{addr}{path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len(),
                addr = router.addr
            );
            let answer = common::raw_http(router.addr, request.into_bytes()).await;
            let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
            let upstream = answer
                .lines()
                .find_map(|l| l.strip_prefix("x-upstream: "))
                .unwrap_or("-")
                .to_owned();
            (status, upstream)
        }
        Proto::H3 => {
            let mut step = serde_json::json!({"op": "request", "method": method, "path": path});
            if !body.is_empty() {
                step["body"] = serde_json::json!(body);
            }
            let plan = common::h3::plan(router.addr.port(), certs, serde_json::json!([step]));
            let out = common::h3::run(plan).await;
            let answer = &out["results"][0];
            let status = answer["status"].as_u64().unwrap_or(0) as u16;
            let upstream = answer["headers"]["x-upstream"]
                .as_str()
                .unwrap_or("-")
                .to_owned();
            (status, upstream)
        }
        Proto::H2c | Proto::TlsH2 => {
            let (uri, io): (String, Box<dyn IoStream>) = match proto {
                Proto::TlsH2 => (
                    format!("https://localhost:{}{path}", router.addr.port()),
                    Box::new(common::tls_to_localhost(router.addr, certs, b"h2").await),
                ),
                _ => (
                    router.url(&path),
                    Box::new(
                        tokio::net::TcpStream::connect(router.addr)
                            .await
                            .expect("connect"),
                    ),
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
                .body(Full::new(Bytes::from_static(body.as_bytes())))
                .expect("request");
            let resp = sender.send_request(req).await.expect("response");
            let upstream = resp
                .headers()
                .get("x-upstream")
                .map_or("-", |v| v.to_str().unwrap_or("?"))
                .to_owned();
            let status = resp.status().as_u16();
            let _ = resp.into_body().collect().await;
            (status, upstream)
        }
    }
}

/// Asserts what `send` got: the status and who answered.
async fn expect(
    proto: Proto,
    router: &Router,
    certs: &std::path::Path,
    method: &str,
    (status, by): (u16, &str),
) {
    let got = send(proto, router, certs, method).await;
    assert_eq!(got, (status, by.to_owned()), "{proto:?} {method}");
}

trait IoStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> IoStream for T {}

/// Fence, flip and mirror of one move over `protos`, against a router at `router` whose
/// table `reload` rewrites.
async fn fence_flip_mirror(
    router: &Router,
    certs: &std::path::Path,
    protos: &[Proto],
    upstreams: (&Upstream, &Upstream, &Upstream),
) {
    let (eu, us, ap) = upstreams;
    let reload = |version: &str, moves: String| {
        let table = common::three_regions(version, &eu.url(), &us.url(), &ap.url()) + &moves;
        common::write(&router.dir, "routing-table.yaml", &table);
        router.reload()
    };
    reload("fence", move_of_country_1("fence", 0.0, 300)).await;
    for &proto in protos {
        let (us_before, ap_before) = (us.count(), ap.count());
        expect(proto, router, certs, "POST", (503, "-")).await;
        assert_eq!(
            (us.count(), ap.count()),
            (us_before, ap_before),
            "{proto:?}: a fenced write was forwarded"
        );
        expect(proto, router, certs, "GET", (200, "ap")).await;
    }
    reload("flip", move_of_country_1("flip", 0.0, 300)).await;
    for &proto in protos {
        expect(proto, router, certs, "POST", (200, "us")).await;
        expect(proto, router, certs, "GET", (200, "us")).await;
    }
    reload("mirror", move_of_country_1("mirror", 1.0, 300)).await;
    for &proto in protos {
        let copies = || {
            us.received
                .lock()
                .expect("log")
                .iter()
                .filter(|r| r.headers.get("x-iuid-mirror").is_some())
                .count()
        };
        let before = copies();
        expect(proto, router, certs, "GET", (200, "ap")).await;
        let copied =
            common::eventually(Duration::from_secs(5), || async { copies() == before + 1 }).await;
        assert!(copied.is_some(), "{proto:?}: the read was copied to `to`");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_move_over_http1_head_path_bridged_and_h2c() {
    let (eu, us, ap) = (
        Upstream::start("eu").await,
        Upstream::start("us").await,
        Upstream::start("ap").await,
    );
    let config = common::orders_config().yaml();
    let table = common::three_regions("v1", &eu.url(), &us.url(), &ap.url());
    let router = Router::start(&config, &table).await;
    let before = router
        .metric("iuid_router_http1_shared_phases_total", &[])
        .await;
    let protos = [Proto::Head, Proto::Bridged, Proto::H2c];
    fence_flip_mirror(&router, std::path::Path::new("."), &protos, (&eu, &us, &ap)).await;
    let after = router
        .metric("iuid_router_http1_shared_phases_total", &[])
        .await;
    assert!(
        after > before,
        "the bridged requests took the shared phases"
    );
}

/// [`fence_flip_mirror`] over `protos` against a router with `tls:` (and `http3:`).
async fn over_tls(protos: &[Proto], http3: bool) {
    let certs = tempfile::tempdir().expect("certs");
    common::make_certs(certs.path(), false, &["localhost"]);
    let (eu, us, ap) = (
        Upstream::start("eu").await,
        Upstream::start("us").await,
        Upstream::start("ap").await,
    );
    let config = common::orders_config()
        .extra(&common::tls_lines(certs.path()))
        .extra(if http3 { "http3: {}\n" } else { "" })
        .yaml();
    let table = common::three_regions("v1", &eu.url(), &us.url(), &ap.url());
    let router = Router::start(&config, &table).await;
    fence_flip_mirror(&router, certs.path(), protos, (&eu, &us, &ap)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_move_over_tls_h2() {
    over_tls(&[Proto::TlsH2], false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn one_move_over_h3() {
    over_tls(&[Proto::H3], true).await;
}

/// A gRPC call of country 1's entity (`x-entity-id` metadata): the answer's HTTP status,
/// its headers (a trailers-only answer's status is there) and its trailers.
async fn grpc_call(router: &Router) -> (u16, http::HeaderMap, Option<http::HeaderMap>) {
    let tcp = tokio::net::TcpStream::connect(router.addr)
        .await
        .expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let req = http::Request::post(router.url("/orders.v1.Orders/CancelOrder"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-entity-id", iuid_for(1))
        .body(Full::new(frame(b"\x0a\x03abc")))
        .expect("request");
    let resp = sender.send_request(req).await.expect("response");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_grpc_call_gets_unavailable_with_its_retry_delay_and_the_flip_releases_the_next() {
    let (ap, ap_seen) = grpc_upstream("ap-orders").await;
    let (us, us_seen) = grpc_upstream("us-orders").await;
    let table = |version: &str, phase: &str, hold_ms: u64| {
        format!(
            "version: {version}\nregions:\n  ap: {{ upstreams: [\"{ap}\"], protocol: h2 }}\n  us: {{ upstreams: [\"{us}\"], protocol: h2 }}\ncountries:\n  1: ap\ndefault_region: ap\n{}",
            move_of_country_1(phase, 0.0, hold_ms)
        )
    };
    let config = ConfigYaml::new()
        .route_header("x-entity-id")
        .timeouts(500, 2000, 10_000)
        .watch(false)
        .yaml();
    let router = Router::start(&config, &table("v1", "fence", 300)).await;

    let (status, headers, trailers) = grpc_call(&router).await;
    assert_eq!(status, 200);
    assert_eq!(headers["grpc-status"], "14", "UNAVAILABLE");
    assert_eq!(headers["grpc-retry-pushback-ms"], "1000", "the retry delay");
    assert!(trailers.is_none(), "trailers-only");
    assert!(ap_seen.lock().expect("log").is_empty() && us_seen.lock().expect("log").is_empty());

    // A call held in the fence goes to `to` when the table flips.
    common::write(
        &router.dir,
        "routing-table.yaml",
        &table("v2", "fence", 5000),
    );
    router.reload().await;
    let call = grpc_call(&router);
    tokio::pin!(call);
    let waiting = tokio::time::timeout(Duration::from_millis(300), &mut call).await;
    assert!(waiting.is_err(), "the call is held");
    common::write(
        &router.dir,
        "routing-table.yaml",
        &table("v3", "flip", 5000),
    );
    router.reload().await;
    let (status, _, trailers) = call.await;
    assert_eq!(status, 200);
    let trailers = trailers.expect("trailers");
    assert_eq!(trailers["grpc-status"], "0");
    assert_eq!(trailers["x-served-by"], "us-orders");
    assert!(
        ap_seen.lock().expect("log").is_empty(),
        "nothing reached `from`"
    );
}
