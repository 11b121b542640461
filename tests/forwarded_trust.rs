//! `trusted_proxies` (docs/data-path.md "Header rules"): a peer outside it cannot put
//! `for=6.6.6.6` ahead of its own address in what the region reads; a peer inside it has its
//! chain appended to, as without the setting. Over every engine the router serves: HTTP/1.1
//! on the own head path and bridged (an absolute-form target), h2c, and TLS h2.

mod common;

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;

use common::{iuid_for, lettered_table, orders_config, Router, Upstream};

const SPOOFED_XFF: &str = "6.6.6.6";
const SPOOFED_FORWARDED: &str = "for=6.6.6.6;host=\"bank.example\"";

struct World {
    router: Router,
    upstream: Upstream,
    certs: std::path::PathBuf,
}

/// A router with `trusted_proxies: [trusted]` and TLS, in front of one upstream.
async fn world(trusted: &str) -> World {
    let upstream = Upstream::start("a").await;
    let table = lettered_table("trust", &[&[upstream.url()]]);
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    common::make_certs(&certs, false, &["localhost"]);
    let tls = common::tls_lines(&certs);
    let config = orders_config()
        .extra(&format!("trusted_proxies: [{trusted}]\n"))
        .extra(&tls)
        .yaml();
    common::write(&dir, "routing-table.yaml", &table);
    let router = Router::start_in(dir, &config).await;
    World {
        router,
        upstream,
        certs,
    }
}

fn path() -> String {
    format!("/v1/orders/{}", iuid_for(1))
}

/// What the upstream received of the forwarding fields: `X-Forwarded-For` lines and
/// `Forwarded` lines.
fn forwarding(upstream: &Upstream) -> (Vec<String>, Vec<String>) {
    let got = upstream.last();
    let all = |name: &str| {
        got.headers
            .get_all(name)
            .iter()
            .map(|v| v.to_str().expect("ascii").to_owned())
            .collect::<Vec<_>>()
    };
    (all("x-forwarded-for"), all("forwarded"))
}

/// Sends one GET with the spoofed fields over `engine` (`h1`, `h1-bridged`: HTTP/1.1 over
/// TLS; anything else: h2 over TLS).
async fn send(w: &World, engine: &str) {
    let addr: SocketAddr = w.router.addr;
    match engine {
        "h1" | "h1-bridged" => {
            let target = match engine {
                "h1" => path(),
                _ => format!("http://api.example.com{}", path()),
            };
            let request = format!(
                "GET {target} HTTP/1.1\r\nHost: api.example.com\r\nX-Forwarded-For: {SPOOFED_XFF}\r\n\
                 Forwarded: {SPOOFED_FORWARDED}\r\nConnection: close\r\n\r\n"
            );
            let answer = common::tls_raw(w.router.addr, &w.certs, request.as_bytes()).await;
            assert!(answer.starts_with("HTTP/1.1 200 "), "{engine}: {answer}");
        }
        _ => {
            let tls = common::tls_to_localhost(addr, &w.certs, b"h2").await;
            let (mut h2, conn) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls))
                    .await
                    .expect("h2 handshake");
            tokio::spawn(conn);
            let req = http::Request::get(format!("https://localhost:{}{}", addr.port(), path()))
                .header("x-forwarded-for", SPOOFED_XFF)
                .header("forwarded", SPOOFED_FORWARDED)
                .body(Empty::<Bytes>::new())
                .expect("request");
            let resp = h2.send_request(req).await.expect("answer");
            assert_eq!(resp.status(), 200, "{engine}");
            resp.into_body().collect().await.expect("body");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_untrusted_peer_has_its_forwarding_fields_replaced_on_every_engine() {
    let w = world("10.0.0.0/8").await;
    for engine in ["h1", "h1-bridged", "tls-h2"] {
        send(&w, engine).await;
        let (xff, forwarded) = forwarding(&w.upstream);
        assert_eq!(xff, ["127.0.0.1"], "{engine}: only the router's element");
        assert_eq!(forwarded.len(), 1, "{engine}: {forwarded:?}");
        assert!(
            forwarded[0].starts_with("for=127.0.0.1;") && !forwarded[0].contains("6.6.6.6"),
            "{engine}: {forwarded:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_trusted_peer_has_its_chain_appended_to_on_every_engine() {
    let w = world("127.0.0.1, 10.0.0.0/8").await;
    for engine in ["h1", "h1-bridged", "tls-h2"] {
        send(&w, engine).await;
        let (xff, forwarded) = forwarding(&w.upstream);
        assert_eq!(xff, ["6.6.6.6, 127.0.0.1"], "{engine}");
        let all = forwarded.join(", ");
        assert!(
            all.starts_with(SPOOFED_FORWARDED) && all.contains("for=127.0.0.1;"),
            "{engine}: {forwarded:?}"
        );
    }
}

/// h2c needs the plain listener: the same rule there.
#[tokio::test(flavor = "multi_thread")]
async fn h2c_from_an_untrusted_peer_is_replaced_too() {
    let upstream = Upstream::start("a").await;
    let table = lettered_table("trust", &[&[upstream.url()]]);
    let config = orders_config()
        .extra("trusted_proxies: [10.0.0.0/8]\n")
        .yaml();
    let router = Router::start(&config, &table).await;
    let h2c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("h2c client");
    let resp = h2c
        .get(router.url(&path()))
        .header("x-forwarded-for", SPOOFED_XFF)
        .header("forwarded", SPOOFED_FORWARDED)
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 200);
    let (xff, forwarded) = forwarding(&upstream);
    assert_eq!(xff, ["127.0.0.1"]);
    assert_eq!(forwarded.len(), 1, "{forwarded:?}");
    assert!(!forwarded[0].contains("6.6.6.6"), "{forwarded:?}");
}

/// A gRPC call (h2c, its id in `x-entity-id` metadata) to an HTTP/2 region: the same rule.
#[tokio::test(flavor = "multi_thread")]
async fn a_grpc_call_from_an_untrusted_peer_is_replaced_too() {
    let upstream = Upstream::start("a").await;
    let table = format!(
        "version: trust\nregions:\n  a: {{ upstreams: [\"{}\"], protocol: h2 }}\ncountries:\n  1: a\ndefault_region: a\n",
        upstream.url()
    );
    let config = orders_config()
        .extra("trusted_proxies: [10.0.0.0/8]\n")
        .yaml();
    let router = Router::start(&config, &table).await;
    let tcp = TcpStream::connect(router.addr).await.expect("connect");
    let (mut h2, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2c handshake");
    tokio::spawn(conn);
    let call = http::Request::post(router.url("/orders.v1.Orders/GetOrder"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-entity-id", iuid_for(1))
        .header("x-forwarded-for", SPOOFED_XFF)
        .header("forwarded", SPOOFED_FORWARDED)
        .body(http_body_util::Full::new(common::grpc::frame(b"")))
        .expect("call");
    let resp = h2.send_request(call).await.expect("answer");
    assert_eq!(resp.status(), 200);
    resp.into_body().collect().await.expect("body");
    let got = upstream.last();
    assert_eq!(
        got.headers["content-type"], "application/grpc",
        "the call arrived"
    );
    let (xff, forwarded) = forwarding(&upstream);
    assert_eq!(xff, ["127.0.0.1"]);
    assert_eq!(forwarded.len(), 1, "{forwarded:?}");
    assert!(!forwarded[0].contains("6.6.6.6"), "{forwarded:?}");
}

#[test]
fn a_bad_range_is_refused_where_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    common::write(
        &dir,
        "routing-table.yaml",
        &lettered_table("t", &[&["http://127.0.0.1:1".to_owned()]]),
    );
    for (entry, why) in [
        ("10.0.0.0/33", "prefix length must be 0 to 32"),
        ("ten", "not an IP address or CIDR range"),
    ] {
        let text = format!(
            "listen: 127.0.0.1:0\nregion: eu\nrouting_table: routing-table.yaml\ntrusted_proxies:\n  - 127.0.0.1\n  - {entry}\n"
        );
        common::assert_refused_at(&dir, &text, why, 6);
    }
}
