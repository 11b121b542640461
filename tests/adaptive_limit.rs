//! Issue 38 (docs/overload.md, "Adaptive limit"): with `limits.adaptive: true` a region's
//! limit follows its latency. Over real sockets: an upstream whose answer delay the test
//! sets, 24 clients asking it without pause through the router; the limit (the
//! `iuid_router_region_limit` gauge) shrinks when the delay grows from 20 to 300 ms — the
//! requests beyond it answered 503 `region-overloaded` at once — and grows back when the
//! delay returns to 20 ms.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, iuid_for, Router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CLIENTS: usize = 24;
const MAX: usize = 64;

/// An HTTP/1.1 upstream that answers every request `delay` ms after reading its head, on
/// kept-alive connections.
async fn slow_upstream(delay: Arc<AtomicU64>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let delay = delay.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                    let end = buf.windows(4).position(|w| w == b"\r\n\r\n").expect("head") + 4;
                    buf.drain(..end);
                    let ms = delay.load(Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// `CLIENTS` loops of GETs through the router until `stop`; a 503 is followed by a 100 ms
/// pause (as a client honouring `Retry-After` would wait, only shorter).
fn load(
    router: SocketAddr,
    path: String,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<u64>> {
    (0..CLIENTS)
        .map(|_| {
            let (path, stop) = (path.clone(), stop.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                let mut shed = 0;
                while !stop.load(Ordering::Relaxed) {
                    match client.get(format!("http://{router}{path}")).send().await {
                        Ok(r) if r.status() == 503 => {
                            shed += 1;
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Ok(r) => {
                            let _ = r.bytes().await;
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                    }
                }
                shed
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_adaptive_limit_shrinks_as_the_region_slows_and_recovers() {
    let delay = Arc::new(AtomicU64::new(20));
    let up = slow_upstream(delay.clone()).await;
    let table = format!(
        "version: a\nregions:\n  adaptive: {{ upstreams: [\"http://{up}\"] }}\ncountries:\n  1: adaptive\ndefault_region: adaptive\n"
    );
    let config = common::orders_config()
        .limits(&format!(
            "region_max_in_flight: {MAX}, adaptive: true, adaptive_min_in_flight: 2"
        ))
        .yaml();
    let router = Router::start(&config, &table).await;
    let limit = || async {
        router
            .metric("iuid_router_region_limit", &["region=\"adaptive\""])
            .await
    };
    let stop = Arc::new(AtomicBool::new(false));
    let clients = load(
        router.addr,
        format!("/v1/orders/{}", iuid_for(1)),
        stop.clone(),
    );

    // At 20 ms the load (24 in flight) is under the limit: nothing is shed.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let shed = || async {
        router
            .metric(
                "iuid_router_shed_total",
                &["region=\"adaptive\"", "max_in_flight"],
            )
            .await
    };
    assert_eq!(shed().await, 0.0, "nothing shed while the region is fast");

    // The region slows down: the limit falls well below the load.
    delay.store(300, Ordering::Relaxed);
    let shrunk = eventually(Duration::from_secs(10), || async {
        let now = limit().await;
        now > 0.0 && now <= 8.0
    })
    .await;
    assert!(
        shrunk.is_some(),
        "the limit shrank as latency grew from 20 to 300 ms: {}",
        limit().await
    );
    let shed_slow = eventually(Duration::from_secs(5), || async { shed().await > 0.0 }).await;
    assert!(
        shed_slow.is_some(),
        "requests beyond the shrunk limit are shed"
    );

    // The region recovers: the limit grows back as the load fills it.
    delay.store(20, Ordering::Relaxed);
    let grown = eventually(Duration::from_secs(20), || async { limit().await >= 16.0 }).await;
    assert!(
        grown.is_some(),
        "the limit grew back once latency returned to 20 ms: {}",
        limit().await
    );
    stop.store(true, Ordering::Relaxed);
    let mut total = 0;
    for c in clients {
        total += c.await.expect("client");
    }
    assert!(total > 0, "the clients saw 503s while the limit was low");
    // Shed requests never count against the region.
    let blamed = router
        .metric(
            "iuid_router_upstream_errors_total",
            &["region=\"adaptive\""],
        )
        .await;
    assert_eq!(blamed, 0.0);
}
