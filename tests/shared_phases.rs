//! Issue 37: the HTTP/1.x requests the own engine's head path does not carry (upgrades,
//! absolute-form targets, legacy probes, HTTP/2 upstreams, …) run through the shared phases
//! (`Proxy::handle`, HTTP/2's) while the own engine keeps the connection: it feeds them the
//! body and writes their answer (`src/proxy/h1/bridge.rs`). Raw bytes over loopback.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{iuid_for, orders_config, Router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The router with one region, `region`, on `upstream` (metrics are per process: each test
/// counts in a region of its own); `idle_ms` as given.
async fn router_to(upstream: &str, region: &str, idle_ms: u64) -> Router {
    let table = format!(
        "version: s\nregions:\n  {region}: {{ upstreams: [\"{upstream}\"] }}\ncountries:\n  1: {region}\ndefault_region: {region}\n"
    );
    let config = orders_config().timeouts(1000, 5000, idle_ms).yaml();
    Router::start(&config, &table).await
}

fn connect(addr: SocketAddr) -> TcpStream {
    let conn = TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    conn
}

/// Reads until `needle` has come (or the connection closes): what came.
fn read_until(conn: &mut TcpStream, needle: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while !String::from_utf8_lossy(&got).contains(needle) {
        match conn.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// An absolute-form target (a client that takes the router for a forward proxy) is routed
/// by its path through the shared phases, and the connection goes on with the next
/// request, on the head path.
#[tokio::test]
async fn an_absolute_form_request_is_routed_and_its_connection_kept() {
    let (up, seen) = common::recording_upstream().await;
    let router = router_to(&up, "absolute", 60_000).await;
    let before = router
        .metric("iuid_router_http1_shared_phases_total", &[])
        .await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let addr = router.addr;
    let answers = tokio::task::spawn_blocking(move || {
        let mut conn = connect(addr);
        let first =
            format!("GET http://shop.example{path}?a=1 HTTP/1.1\r\nHost: shop.example\r\n\r\n");
        conn.write_all(first.as_bytes()).expect("write");
        let one = common::read_answer(&mut conn);
        let next = format!("GET {path} HTTP/1.1\r\nHost: shop.example\r\n\r\n");
        conn.write_all(next.as_bytes()).expect("write");
        let two = common::read_answer(&mut conn);
        (one, two)
    })
    .await
    .expect("client");
    assert!(
        answers.0.starts_with("HTTP/1.1 200 OK\r\n"),
        "{}",
        answers.0
    );
    assert!(answers.0.contains("x-request-id: "), "{}", answers.0);
    assert!(
        answers.1.starts_with("HTTP/1.1 200 OK\r\n"),
        "{}",
        answers.1
    );
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 2);
    let first = String::from_utf8_lossy(&seen[0]);
    assert!(
        first.contains(&format!("/v1/orders/{}?a=1 HTTP/1.1\r\n", iuid_for(1))),
        "{first}"
    );
    let after = router
        .metric("iuid_router_http1_shared_phases_total", &[])
        .await;
    assert!(after > before, "{before} -> {after}");
}

/// An absolute-form target with an empty path and a query (`http://shop.example?x=1`) goes
/// upstream in origin form as `/?x=1`, RFC 9112 §3.2.1: never as `?x=1`, which a strict
/// parser refuses.
#[tokio::test]
async fn an_empty_absolute_path_goes_upstream_as_a_slash() {
    let (up, seen) = common::recording_upstream().await;
    let router = router_to(&up, "empty-path", 60_000).await;
    let answer = common::raw_http(
        router.addr,
        b"GET http://shop.example?x=1 HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n"
            .to_vec(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    let seen = seen.lock().expect("seen").clone();
    let first = String::from_utf8_lossy(seen.first().expect("a request arrived"));
    assert!(first.starts_with("GET /?x=1 HTTP/1.1\r\n"), "{first}");
}

/// An upload through the shared phases larger than a retry holds streams: the client that
/// asks `Expect: 100-continue` gets `100 Continue` when the body is first asked for, and the
/// upstream gets every byte, once, with its length.
#[tokio::test]
async fn an_upload_streams_after_100_continue() {
    let (up, seen) = common::recording_upstream().await;
    let router = router_to(&up, "upload", 60_000).await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let addr = router.addr;
    let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let sent = body.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let mut conn = connect(addr);
        let head = format!(
            "POST http://t{path} HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: {}\r\n\r\n",
            sent.len()
        );
        conn.write_all(head.as_bytes()).expect("head");
        let continued = read_until(&mut conn, "\r\n\r\n");
        assert_eq!(continued, "HTTP/1.1 100 Continue\r\n\r\n");
        conn.write_all(&sent).expect("body");
        common::read_answer(&mut conn)
    })
    .await
    .expect("client");
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    let seen = seen.lock().expect("seen").clone();
    assert_eq!(seen.len(), 1);
    let request = &seen[0];
    let end = request
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a head")
        + 4;
    let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
    assert!(head.contains("content-length: 300000\r\n"), "{head}");
    assert!(!head.contains("expect:"), "hop-by-hop: {head}");
    assert!(request[end..] == body[..], "the body, whole and once");
}

/// A client that stops its upload midway is the client's error: the upstream never gets a
/// complete request, the region is not blamed, and the router goes on serving.
#[tokio::test]
async fn an_upload_cut_midway_is_never_completed_upstream() {
    let (up, seen) = common::recording_upstream().await;
    let router = router_to(&up, "cutshared", 60_000).await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let before = router
        .metric("iuid_router_client_errors_total", &["kind=\"aborted\""])
        .await;
    let (addr, target) = (router.addr, path.clone());
    tokio::task::spawn_blocking(move || {
        let mut conn = connect(addr);
        let head =
            format!("POST http://t{target} HTTP/1.1\r\nHost: t\r\nContent-Length: 400000\r\n\r\n");
        conn.write_all(head.as_bytes()).expect("head");
        conn.write_all(&vec![b'x'; 200_000]).expect("half the body");
    })
    .await
    .expect("client");
    let counted = common::eventually(Duration::from_secs(5), || async {
        router
            .metric("iuid_router_client_errors_total", &["kind=\"aborted\""])
            .await
            > before
    })
    .await;
    assert!(counted.is_some(), "the client's error is counted");
    let blamed = router
        .metric(
            "iuid_router_upstream_errors_total",
            &["region=\"cutshared\""],
        )
        .await;
    assert_eq!(blamed, 0.0);
    assert!(seen.lock().expect("seen").is_empty(), "nothing completed");
    let ok = reqwest::get(router.url(&path))
        .await
        .expect("still serving");
    assert_eq!(ok.status(), 200);
}

/// An HTTP/1.0 client through the shared phases gets `HTTP/1.0` answers, and its
/// connection closes after one (it did not ask to keep it).
#[tokio::test]
async fn an_http10_client_gets_http10_answers() {
    let (up, _seen) = common::recording_upstream().await;
    let router = router_to(&up, "shared10", 60_000).await;
    let request = format!("GET http://t/v1/orders/{} HTTP/1.0\r\n\r\n", iuid_for(1));
    let answer = common::raw_http(router.addr, request.into_bytes()).await;
    assert!(answer.starts_with("HTTP/1.0 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
}

/// An upstream that switches to WebSocket (`101`) and then echoes every byte.
async fn echoing_upgrade_upstream() -> (String, Arc<Mutex<Vec<u8>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let heads = Arc::new(Mutex::new(Vec::new()));
    let log = heads.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = vec![0u8; 8192];
                let end = loop {
                    if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                        break end + 4;
                    }
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                };
                log.lock().expect("log").extend_from_slice(&got[..end]);
                let switched = b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
                if stream.write_all(switched).await.is_err() {
                    return;
                }
                if stream.write_all(&got[end..]).await.is_err() {
                    return;
                }
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    (url, heads)
}

/// A WebSocket upgrade on the own engine: the `101` reaches the client, the bytes the client
/// sent with its request and after it reach the upstream and come back, and a tunnel with no
/// byte either way for `idle_ms` is closed.
#[tokio::test]
async fn a_websocket_tunnel_carries_both_ways_and_is_closed_when_idle() {
    let (up, heads) = echoing_upgrade_upstream().await;
    let router = router_to(&up, "tunnel", 400).await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let addr = router.addr;
    let (switched, echoed, idle_for) = tokio::task::spawn_blocking(move || {
        let mut conn = connect(addr);
        let upgrade = format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\nearly"
        );
        conn.write_all(upgrade.as_bytes()).expect("write");
        let switched = read_until(&mut conn, "early");
        conn.write_all(b"ping").expect("ping");
        let echoed = read_until(&mut conn, "ping");
        let quiet = Instant::now();
        let mut buf = [0u8; 64];
        let closed = conn.read(&mut buf);
        assert!(matches!(closed, Ok(0)), "closed, not {closed:?}");
        (switched, echoed, quiet.elapsed())
    })
    .await
    .expect("client");
    assert!(
        switched.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
        "{switched}"
    );
    assert!(
        switched.to_ascii_lowercase().contains("upgrade: websocket"),
        "{switched}"
    );
    assert!(switched.ends_with("\r\n\r\nearly"), "{switched}");
    assert_eq!(echoed, "ping");
    assert!(
        idle_for >= Duration::from_millis(350) && idle_for < Duration::from_secs(3),
        "closed after {idle_for:?} idle (idle_ms 400)"
    );
    let head = String::from_utf8_lossy(&heads.lock().expect("heads")).to_ascii_lowercase();
    assert!(head.contains("upgrade: websocket"), "{head}");
    assert!(head.contains("connection: upgrade"), "{head}");
}
