//! Issue 25 item 5 over real sockets: fan-outs in flight are bounded per client connection
//! (an HTTP/2 connection multiplexes many) and in the whole router, and the bytes of the
//! answers they buffer are bounded together; beyond a bound the answer is 503 with
//! `Retry-After` at once, and no region is asked.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use bytes::Bytes;
use common::{client, url, ConfigYaml, Router};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::Value;

/// A region whose answer (`{"items": [], "pad": "…"}`, `bytes` long, with `Content-Length`)
/// sends its first half at once and the rest after `stall`: each fan-out stays in flight, its
/// answer buffered, that long. Counts the requests it got.
async fn slow_region(bytes: usize, stall: Duration) -> (String, Arc<AtomicUsize>) {
    let hits: Arc<AtomicUsize> = Arc::default();
    let counted = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let hits = counted.clone();
        async move {
            hits.fetch_add(1, Ordering::SeqCst);
            let head = r#"{"items": [], "pad": ""#;
            let pad = bytes - head.len() - 2;
            let mut body = head.as_bytes().to_vec();
            body.extend(vec![b'x'; pad]);
            body.extend_from_slice(b"\"}");
            let second = Bytes::from(body.split_off(bytes / 2));
            let first = Bytes::from(body);
            let chunks = futures_util::stream::unfold(0, move |step| {
                let (first, second) = (first.clone(), second.clone());
                async move {
                    match step {
                        0 => Some((Ok::<_, std::io::Error>(first), 1)),
                        1 => {
                            tokio::time::sleep(stall).await;
                            Some((Ok(second), 2))
                        }
                        _ => None,
                    }
                }
            });
            http::Response::builder()
                .header("content-type", "application/json")
                .header("content-length", bytes)
                .body(Body::from_stream(chunks))
                .expect("response")
        }
    });
    (url(common::serve(app).await), hits)
}

async fn router(regions: &[String; 3], limits: &str) -> Router {
    let table = common::lettered_table(
        "bounds",
        &[
            &[regions[0].clone()],
            &[regions[1].clone()],
            &[regions[2].clone()],
        ],
    );
    let config = ConfigYaml::new()
        .route(
            "{ fanout: /v1/orders, scheme: iuid, items: /items, id_field: id, timeout_ms: 10000 }",
        )
        .timeouts(500, 5000, 10000)
        .limits(limits)
        .watch(false)
        .yaml();
    Router::start(&config, &table).await
}

/// Checks a refusal: 503 problem+json of type `fanout-busy` naming `key`, `Retry-After: 1`.
fn assert_busy(status: u16, headers: &http::HeaderMap, body: &[u8], key: &str) {
    assert_eq!(status, 503, "{}", String::from_utf8_lossy(body));
    assert_eq!(headers["retry-after"], "1");
    assert_eq!(headers["content-type"], "application/problem+json");
    let problem: Value = serde_json::from_slice(body).expect("problem");
    assert_eq!(problem["type"], "urn:iuid-router:problem:fanout-busy");
    let detail = problem["detail"].as_str().expect("detail");
    assert!(detail.contains(key), "{detail}");
}

/// Six fan-outs at once on one HTTP/2 connection with `fanout_per_connection: 2`: two are
/// served, four refused at once without asking any region; another connection is still
/// served meanwhile.
#[tokio::test]
async fn fanouts_on_one_http2_connection_are_bounded() {
    let stall = Duration::from_millis(800);
    let (a, a_hits) = slow_region(2000, stall).await;
    let (b, _) = slow_region(2000, stall).await;
    let (c, _) = slow_region(2000, stall).await;
    let router = router(
        &[a, b, c],
        "fanout_per_connection: 2, fanout_concurrent: 10",
    )
    .await;

    let stream = tokio::net::TcpStream::connect(router.addr)
        .await
        .expect("connect");
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let started = Instant::now();
    let calls = (0..6).map(|_| {
        let mut sender = sender.clone();
        let uri = router.url("/v1/orders");
        tokio::spawn(async move {
            let req = hyper::Request::get(uri)
                .body(Empty::<Bytes>::new())
                .expect("request");
            let resp = sender.send_request(req).await.expect("response");
            let (parts, body) = resp.into_parts();
            let body = body.collect().await.expect("body").to_bytes();
            (
                parts.status.as_u16(),
                parts.headers,
                body,
                started.elapsed(),
            )
        })
    });
    let calls: Vec<_> = calls.collect();
    // Meanwhile another client connection is served.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let other = client()
        .get(router.url("/v1/orders"))
        .send()
        .await
        .expect("another connection");
    assert_eq!(other.status(), 200);

    let mut served = 0;
    for call in calls {
        let (status, headers, body, took) = call.await.expect("join");
        if status == 200 {
            served += 1;
            continue;
        }
        assert_busy(status, &headers, &body, "limits.fanout_per_connection");
        assert!(took < stall, "refused at once, not queued: {took:?}");
    }
    assert_eq!(served, 2);
    assert_eq!(
        a_hits.load(Ordering::SeqCst),
        3,
        "two fan-outs and the other client's"
    );
    assert!(router
        .metrics()
        .await
        .contains("iuid_router_fanout_refused_total{reason=\"per_connection\"} 4"));
}

/// Five fan-outs at once on five connections with `fanout_concurrent: 3`: three served, two
/// refused at once.
#[tokio::test]
async fn fanouts_in_the_router_are_bounded() {
    let stall = Duration::from_millis(800);
    let (a, a_hits) = slow_region(2000, stall).await;
    let (b, _) = slow_region(2000, stall).await;
    let (c, _) = slow_region(2000, stall).await;
    let router = router(&[a, b, c], "fanout_per_connection: 3, fanout_concurrent: 3").await;
    let calls: Vec<_> = (0..5)
        .map(|_| {
            let url = router.url("/v1/orders");
            tokio::spawn(async move {
                let started = Instant::now();
                let resp = client().get(url).send().await.expect("request");
                let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
                let body = resp.bytes().await.expect("body");
                (status, headers, body, started.elapsed())
            })
        })
        .collect();
    let mut served = 0;
    for call in calls {
        let (status, headers, body, took) = call.await.expect("join");
        if status == 200 {
            served += 1;
            continue;
        }
        assert_busy(status, &headers, &body, "limits.fanout_concurrent");
        assert!(took < stall, "refused at once: {took:?}");
    }
    assert_eq!(served, 3);
    assert_eq!(a_hits.load(Ordering::SeqCst), 3);
}

/// Answers of 60 kB from three regions, `fanout_buffer_bytes` 200 kB: while one fan-out holds
/// 180 kB, a second does not fit and is refused (503) instead of buffering more; once the
/// first is merged its bytes are given back and the next is served.
#[tokio::test]
async fn buffered_answers_are_bounded_together() {
    let stall = Duration::from_millis(800);
    let (a, _) = slow_region(60_000, stall).await;
    let (b, _) = slow_region(60_000, stall).await;
    let (c, _) = slow_region(60_000, stall).await;
    let router = router(
        &[a, b, c],
        "fanout_region_bytes: 100000, fanout_buffer_bytes: 200000",
    )
    .await;
    let first = {
        let url = router.url("/v1/orders");
        tokio::spawn(async move { client().get(url).send().await.expect("first").status() })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let resp = client()
        .get(router.url("/v1/orders"))
        .send()
        .await
        .expect("second");
    let took = started.elapsed();
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let body = resp.bytes().await.expect("body");
    assert_busy(status, &headers, &body, "limits.fanout_buffer_bytes");
    assert!(took < stall, "refused before the first is done: {took:?}");
    assert_eq!(first.await.expect("join"), 200);

    let resp = client()
        .get(router.url("/v1/orders"))
        .send()
        .await
        .expect("third");
    assert_eq!(resp.status(), 200, "the first's bytes were given back");
    assert!(router
        .metrics()
        .await
        .contains("iuid_router_fanout_refused_total{reason=\"memory\"}"));
}
