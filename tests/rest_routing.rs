//! docs/routing-table.md–§6 end to end: real upstreams on loopback, the real router, a real HTTP client.

mod common;

use common::{client, free_port, orders_config, relay_id, Router, Upstream};
use std::io::{Read, Write};

/// 2026-06-01T00:00:00Z in ms: the migration cut-over of the table below.
const CUTOVER_MS: u64 = 1_780_272_000_000;

struct World {
    eu1: Upstream,
    eu2: Upstream,
    us: Upstream,
    ap: Upstream,
    router: Router,
}

impl World {
    async fn start() -> World {
        let (eu1, eu2, us, ap) = (
            Upstream::start("eu-1").await,
            Upstream::start("eu-2").await,
            Upstream::start("us-1").await,
            Upstream::start("ap-1").await,
        );
        let table = format!(
            "\
version: test-1
regions:
  eu: {{ upstreams: [\"{}\", \"{}\"] }}
  us: {{ upstreams: [\"{}\"] }}
  ap: {{ upstreams: [\"{}\"] }}
countries:
  1: {{ code: KZ, region: ap }}
  2: {{ code: US, region: us }}
  3: eu
  4: {{ code: JP, region: ap }}
services:
  1: AyanOrder
  2: WalletAccount
overrides:
  - {{ service: WalletAccount, region: eu }}
  - {{ country: 1, created_before: \"2026-06-01T00:00:00Z\", region: eu }}
  - {{ country: 4, service: 1, region: us }}
default_region: eu
",
            eu1.url(),
            eu2.url(),
            us.url(),
            ap.url()
        );
        let router = Router::start(&orders_config().yaml(), &table).await;
        World {
            eu1,
            eu2,
            us,
            ap,
            router,
        }
    }

    fn eu_count(&self) -> usize {
        self.eu1.count() + self.eu2.count()
    }

    /// GETs `/v1/orders/{id}` and returns the status and which upstream answered.
    async fn get_order(&self, id: &str) -> (u16, String, String) {
        let resp = client()
            .get(self.router.url(&format!("/v1/orders/{id}")))
            .send()
            .await
            .expect("router answers");
        let status = resp.status().as_u16();
        let upstream = resp
            .headers()
            .get("x-upstream")
            .map(|v| v.to_str().expect("ascii").to_owned())
            .unwrap_or_default();
        let content_type = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().expect("ascii").to_owned())
            .unwrap_or_default();
        let _ = resp.bytes().await;
        (status, upstream, content_type)
    }
}

/// An id minted at `ts_ms` in `country` for `service`, with this file's random bits.
fn id(ts_ms: u64, country: u8, service: u8) -> String {
    common::iuid(ts_ms, country, service, 0x1234_5678_9abc)
}

const AFTER_CUTOVER: u64 = CUTOVER_MS + 86_400_000;

#[tokio::test]
async fn ids_of_each_country_reach_their_region() {
    let w = World::start().await;
    let (status, up, _) = w.get_order(&id(AFTER_CUTOVER, 1, 1)).await;
    assert_eq!((status, up.as_str()), (200, "ap-1"));
    let (status, up, _) = w.get_order(&id(AFTER_CUTOVER, 2, 1)).await;
    assert_eq!((status, up.as_str()), (200, "us-1"));
    let (status, up, _) = w.get_order(&id(AFTER_CUTOVER, 3, 1)).await;
    assert!(status == 200 && up.starts_with("eu-"), "{status} {up}");
    assert_eq!(w.ap.count(), 1);
    assert_eq!(w.us.count(), 1);
    assert_eq!(w.eu_count(), 1);
}

#[tokio::test]
async fn every_kind_of_override_wins_over_the_country_map() {
    let w = World::start().await;
    // Service override: a WalletAccount minted in the US lives in eu.
    let (_, up, _) = w.get_order(&id(AFTER_CUTOVER, 2, 2)).await;
    assert!(up.starts_with("eu-"), "service override: {up}");
    // Migration cut-over: KZ ids minted strictly before it stay in eu; at and after it, ap.
    let (_, up, _) = w.get_order(&id(CUTOVER_MS - 1, 1, 1)).await;
    assert!(up.starts_with("eu-"), "created_before override: {up}");
    let (_, up, _) = w.get_order(&id(CUTOVER_MS, 1, 1)).await;
    assert_eq!(up, "ap-1", "the cut-over instant itself is not before it");
    // Country + service override: JP AyanOrders go to us, other JP entities stay in ap.
    let (_, up, _) = w.get_order(&id(AFTER_CUTOVER, 4, 1)).await;
    assert_eq!(up, "us-1");
    let (_, up, _) = w.get_order(&id(AFTER_CUTOVER, 4, 7)).await;
    assert_eq!(up, "ap-1");
}

#[tokio::test]
async fn ids_without_routing_bits_go_to_the_default_region() {
    let w = World::start().await;
    for other in [
        "9b2c4f7e-1d3a-4c5b-8e6f-0a1b2c3d4e5f", // v4
        "01932c07-2c4a-7d3e-9f1b-3c5d7e9f1a2b", // v7
    ] {
        let (status, up, _) = w.get_order(other).await;
        assert!(
            status == 200 && up.starts_with("eu-"),
            "{other}: {status} {up}"
        );
    }
    assert_eq!(w.eu_count(), 2);
}

#[tokio::test]
async fn unknown_country_is_404_and_malformed_id_is_400_as_problem_json() {
    let w = World::start().await;
    let resp = client()
        .get(
            w.router
                .url(&format!("/v1/orders/{}", id(AFTER_CUTOVER, 99, 1))),
        )
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(body["status"], 404);
    assert_eq!(body["country"], 99);
    assert!(body["type"].is_string() && body["title"].is_string());
    assert!(body["detail"]
        .as_str()
        .expect("detail")
        .contains("country 99"));

    for bad in [
        "017f22e2-79b0-802a-8144-dc0c0c07398",  // one digit short
        "017f22e2-79b0-802a-8144-dc0c0c07398g", // non-hex
        "017f22e2-79b0-802a-0144-dc0c0c07398f", // v8 with a bad variant
    ] {
        let resp = client()
            .get(w.router.url(&format!("/v1/orders/{bad}")))
            .send()
            .await
            .expect("answer");
        assert_eq!(resp.status(), 400, "{bad}");
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        let body: serde_json::Value = resp.json().await.expect("json");
        assert_eq!(body["status"], 400);
        assert!(!body["detail"].as_str().expect("detail").is_empty());
    }
    assert_eq!(
        w.eu_count() + w.us.count() + w.ap.count(),
        0,
        "nothing forwarded"
    );
}

#[tokio::test]
async fn a_one_mib_body_and_the_path_and_query_arrive_byte_exact() {
    let w = World::start().await;
    let body: Vec<u8> = (0..(1u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let target = format!(
        "/v1/orders/{}/items/a%2Cb;p=1/%7E?q=%E2%9C%93&q=2&&empty=&plus=a+b&x=%2f",
        id(AFTER_CUTOVER, 2, 1)
    );
    let resp = client()
        .post(w.router.url(&target))
        .body(body.clone())
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 200);
    let got = w.us.last();
    assert_eq!(got.method, "POST");
    assert_eq!(got.target, target);
    assert_eq!(got.body.len(), body.len());
    assert!(got.body.as_ref() == body.as_slice(), "body differs");
}

#[tokio::test]
async fn header_route_and_round_robin_over_a_regions_upstreams() {
    let w = World::start().await;
    for _ in 0..4 {
        let resp = client()
            .get(w.router.url("/anything/else"))
            .header("x-entity-id", id(AFTER_CUTOVER, 3, 1))
            .send()
            .await
            .expect("answer");
        assert_eq!(resp.status(), 200);
    }
    assert_eq!((w.eu1.count(), w.eu2.count()), (2, 2));
}

/// Sends raw bytes and reads the response until the upstream's connection closes it.
fn raw_exchange(addr: std::net::SocketAddr, request: &str) -> String {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    s.write_all(request.as_bytes()).expect("write");
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn hop_by_hop_headers_are_removed_and_forwarding_headers_set() {
    let w = World::start().await;
    let addr = w.router.addr;
    let path = format!("/v1/orders/{}", id(AFTER_CUTOVER, 2, 1));
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: api.example.com\r\nConnection: close, X-Drop-Me\r\n\
         X-Drop-Me: secret\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\n\
         TE: trailers\r\nUpgrade: h2c\r\nX-Forwarded-For: 203.0.113.7\r\nVia: 1.0 corp-proxy\r\n\
         X-Kept: yes\r\n\r\n"
    );
    let response = tokio::task::spawn_blocking(move || raw_exchange(addr, &request))
        .await
        .expect("join");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let lower = response.to_ascii_lowercase();
    assert!(
        lower.contains("\r\nvia: 1.1 edge\r\n"),
        "response Via: {response}"
    );
    assert!(
        !lower.contains("x-upstream-secret"),
        "upstream's Connection-named header leaked"
    );

    let got = w.us.last();
    for gone in [
        "connection",
        "x-drop-me",
        "keep-alive",
        "proxy-connection",
        "te",
        "upgrade",
    ] {
        assert!(
            !got.headers.contains_key(gone),
            "{gone} reached the upstream"
        );
    }
    assert_eq!(got.headers["x-kept"], "yes");
    assert_eq!(got.headers["x-forwarded-for"], "203.0.113.7, 127.0.0.1");
    assert_eq!(got.headers["x-forwarded-proto"], "http");
    assert_eq!(got.headers["x-forwarded-host"], "api.example.com");
    assert_eq!(
        got.headers["forwarded"],
        "for=127.0.0.1;host=\"api.example.com\";proto=http"
    );
    let via: Vec<_> = got
        .headers
        .get_all("via")
        .iter()
        .map(|v| v.to_str().expect("via"))
        .collect();
    assert_eq!(via, ["1.0 corp-proxy", "1.1 edge"]);
    assert_eq!(got.headers["host"], w.us.addr.to_string());
}

#[tokio::test]
async fn a_request_that_already_passed_this_router_is_508() {
    let w = World::start().await;
    let path = format!("/v1/orders/{}", id(AFTER_CUTOVER, 2, 1));
    for via in ["1.1 edge", "1.1 a, 1.1 b, 1.1 c"] {
        let resp = client()
            .get(w.router.url(&path))
            .header("via", via)
            .send()
            .await
            .expect("answer");
        assert_eq!(resp.status(), 508, "Via: {via}");
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
    }
    let resp = client()
        .get(w.router.url(&path))
        .header("via", "1.1 a, 1.1 b")
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 200, "two hops are below max_hops 3");
    assert_eq!(w.us.count(), 1);
}

#[tokio::test]
async fn a_dead_upstream_is_502_problem_json() {
    // A port that was just free: nothing listens there.
    let dead = free_port();
    let table = format!(
        "version: t\nregions:\n  eu: {{ upstreams: [\"http://{dead}\"] }}\ncountries:\n  3: eu\ndefault_region: eu\n"
    );
    let router = Router::start(&orders_config().yaml(), &table).await;
    let resp = client()
        .get(router.url(&format!("/v1/orders/{}", id(AFTER_CUTOVER, 3, 1))))
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 502);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    let body: serde_json::Value = resp.json().await.expect("json");
    assert!(
        body["detail"].as_str().expect("detail").contains("eu"),
        "{body}"
    );
}

#[tokio::test]
async fn every_text_form_of_an_id_routes_the_same() {
    let w = World::start().await;
    let plain = common::iuid(AFTER_CUTOVER, 2, 1, 99);
    // base64("Ride??:" + uuid) uses '/' in the standard alphabet: percent-encoded in a path,
    // an encoded slash, which upstreams read apart (400 unless `limits.escaped_slashes:
    // keep`, tests/one_reading_paths.rs); in a header it routes.
    let relay_std = relay_id("Ride??", &plain);
    assert!(relay_std.contains('/'), "{relay_std}");
    let (status, _, _) = w
        .get_order(&relay_std.replace('/', "%2F").replace('=', "%3D"))
        .await;
    assert_eq!(status, 400, "an encoded slash in a path");
    let forms = [
        plain.to_uppercase(),
        plain.replace('-', ""),
        format!("%7B{plain}%7D"),
        format!("urn:uuid:{plain}"),
        relay_std
            .replace('/', "_")
            .replace('+', "-")
            .trim_end_matches('=')
            .to_owned(),
    ];
    for form in &forms {
        let (status, up, _) = w.get_order(form).await;
        assert_eq!((status, up.as_str()), (200, "us-1"), "{form}");
    }
    let resp = client()
        .get(w.router.url("/no/id/in/path"))
        .header("x-entity-id", relay_std.as_str())
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.headers()["x-upstream"], "us-1");
    assert_eq!(w.us.count(), forms.len() + 1);
}

#[tokio::test]
async fn preserve_host_keeps_the_clients_host_and_reject_refuses_unrouted() {
    let us = Upstream::start("us-1").await;
    let table = format!(
        "version: t\nregions:\n  us: {{ upstreams: [\"{}\"] }}\ncountries:\n  2: us\ndefault_region: us\n",
        us.url()
    );
    let config = orders_config()
        .unrouted("reject")
        .extra("preserve_host: true");
    let router = Router::start(&config.yaml(), &table).await;
    let resp = client()
        .get(router.url(&format!("/v1/orders/{}", id(AFTER_CUTOVER, 2, 1))))
        .header("host", "api.example.com")
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 200);
    let got = us.last();
    assert_eq!(got.headers["host"], "api.example.com");
    assert_eq!(got.headers["x-forwarded-host"], "api.example.com");

    let resp = client()
        .get(router.url("/v1/other"))
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 404);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    assert_eq!(us.count(), 1, "the unrouted request was not forwarded");
}

#[tokio::test]
async fn request_ids_are_passed_upstream_and_returned() {
    let w = World::start().await;
    let path = format!("/v1/orders/{}", id(AFTER_CUTOVER, 2, 1));
    let resp = client()
        .get(w.router.url(&path))
        .header("x-request-id", "client-chosen-42")
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.headers()["x-request-id"], "client-chosen-42");
    assert_eq!(w.us.last().headers["x-request-id"], "client-chosen-42");

    let resp = client()
        .get(w.router.url(&path))
        .send()
        .await
        .expect("answer");
    let made = resp.headers()["x-request-id"]
        .to_str()
        .expect("ascii")
        .to_owned();
    assert_eq!(made.len(), 32);
    assert_eq!(w.us.last().headers["x-request-id"], made.as_str());
    // Refusals carry one too.
    let resp = client()
        .get(w.router.url("/v1/orders/bad"))
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 400);
    assert!(resp.headers().contains_key("x-request-id"));
}
