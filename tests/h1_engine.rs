//! The own HTTP/1.1 engine over real sockets: what it does that hyper's server did not (or
//! did otherwise), keep-alive on both sides, and the requests its head path hands to the
//! shared phases on the same connection. Raw bytes on loopback, so what is asserted is what
//! went over the wire.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{iuid_for, lettered_table, orders_config, url, Router, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn own() -> String {
    orders_config().yaml()
}

async fn raw(addr: SocketAddr, request: Vec<u8>) -> String {
    common::raw_http(addr, request).await
}

/// An upstream that answers each request it reads (a head, then `Content-Length` bytes of
/// body) with `answer`, keeping the connection; it counts connections and keeps what it read.
struct Scripted {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<u8>>>,
}

async fn scripted(answer: &'static [u8]) -> Scripted {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let connections = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (count, log) = (connections.clone(), seen.clone());
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let log = log.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let len = match common::message_len(&got) {
                        Some(len) if got.len() >= len => len,
                        _ => {
                            match stream.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => got.extend_from_slice(&buf[..n]),
                            }
                            continue;
                        }
                    };
                    let message: Vec<u8> = got.drain(..len).collect();
                    log.lock().expect("log").extend_from_slice(&message);
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    Scripted {
        addr,
        connections,
        seen,
    }
}

/// The router on the own engine, with one region named `region` (metrics are per process:
/// each test counts in a region of its own) owning country 1 and the rest.
async fn router_to(upstream: &str, region: &str) -> Router {
    let table = format!(
        "version: h1\nregions:\n  {region}: {{ upstreams: [\"{upstream}\"] }}\ncountries:\n  1: {region}\ndefault_region: {region}\n"
    );
    Router::start(&own(), &table).await
}

/// Keep-alive on both sides: three requests on one client connection, pipelined in one
/// write, are answered in order, over one upstream connection; what went upstream is the
/// client's request under the header rules, fields in the order and case they came.
#[tokio::test]
async fn pipelined_requests_are_answered_in_order_over_one_pooled_upstream_connection() {
    let up = scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Up: 1\r\n\r\nok").await;
    let router = router_to(&url(up.addr), "pipelined").await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let one = format!("GET {path} HTTP/1.1\r\nHost: shop.example\r\nX-Mixed-Case: v\r\n\r\n");
    let last =
        format!("GET {path}?n=3 HTTP/1.1\r\nHost: shop.example\r\nConnection: close\r\n\r\n");
    let answer = raw(router.addr, format!("{one}{one}{last}").into_bytes()).await;
    assert_eq!(answer.matches("HTTP/1.1 200 OK\r\n").count(), 3, "{answer}");
    assert_eq!(answer.matches("\r\n\r\nok").count(), 3, "{answer}");
    assert!(answer.contains("Connection: close\r\n"), "{answer}");
    assert!(
        answer.contains("X-Up: 1\r\nVia: 1.1 edge\r\nX-Request-Id: "),
        "{answer}"
    );
    assert_eq!(
        up.connections.load(Ordering::SeqCst),
        1,
        "one upstream connection"
    );
    let seen = String::from_utf8(up.seen.lock().expect("seen").clone()).expect("ascii");
    let host = up.addr.to_string();
    let expected_start = format!(
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nX-Mixed-Case: v\r\nX-Forwarded-For: 127.0.0.1\r\n\
X-Forwarded-Proto: http\r\nX-Forwarded-Host: shop.example\r\n\
Forwarded: for=127.0.0.1;host=\"shop.example\";proto=http\r\nVia: 1.1 edge\r\nX-Request-Id: "
    );
    assert!(seen.starts_with(&expected_start), "{seen}");
    assert!(
        seen.contains(&format!("GET {path}?n=3 HTTP/1.1\r\n")),
        "{seen}"
    );
    assert!(
        !seen.to_lowercase().contains("connection:"),
        "hop-by-hop removed: {seen}"
    );
}

/// Heads the codec refuses are problem+json, and the router goes on serving.
#[tokio::test]
async fn refused_heads_are_problem_json() {
    let up = Upstream::start("a").await;
    let router = Router::start(
        &orders_config()
            .limits("max_headers: 20, max_header_bytes: 8192")
            .yaml(),
        &lettered_table("h1", &[&[up.url()]]),
    )
    .await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let bad = raw(
        router.addr,
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nA : b\r\n\r\n").into_bytes(),
    )
    .await;
    assert!(bad.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{bad}");
    assert!(bad.contains("application/problem+json"), "{bad}");
    assert!(
        bad.contains("urn:iuid-router:problem:invalid-head"),
        "{bad}"
    );
    let many: String = (0..30).map(|i| format!("X-{i}: v\r\n")).collect();
    let big = raw(
        router.addr,
        format!("GET {path} HTTP/1.1\r\nHost: t\r\n{many}\r\n").into_bytes(),
    )
    .await;
    assert!(big.starts_with("HTTP/1.1 431 "), "{big}");
    assert!(
        big.contains("urn:iuid-router:problem:head-too-large"),
        "{big}"
    );
    // Transfer-Encoding beside Content-Length: refused, not read either way.
    let smuggle = format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    );
    let answer = raw(router.addr, smuggle.into_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("bad-body-framing"), "{answer}");
    assert_eq!(up.count(), 0, "nothing reached the upstream");
    let ok = raw(
        router.addr,
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").into_bytes(),
    )
    .await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
}

/// 103 Early Hints reach the client before the final answer.
#[tokio::test]
async fn early_hints_reach_the_client() {
    let up = scripted(
        b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    )
    .await;
    let router = router_to(&url(up.addr), "hints").await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let answer = raw(
        router.addr,
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").into_bytes(),
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nVia: 1.1 edge\r\n\r\nHTTP/1.1 200 OK\r\n"),
        "{answer}"
    );
}

/// An answer whose chunked framing is broken in what came with its head is 502 problem+json,
/// counted against the upstream (issue 29, defect 5), for each broken size the review found.
#[tokio::test]
async fn a_broken_chunked_answer_is_502_before_anything_is_sent() {
    for (n, answer) in [
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2zz\r\nhi\r\n0\r\n\r\n"[..],
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nhi\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+2\r\nhi\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi",
    ]
    .into_iter()
    .enumerate()
    {
        let up = scripted(answer).await;
        let region = format!("broken{n}");
        let router = router_to(&url(up.addr), &region).await;
        let path = format!("/v1/orders/{}", iuid_for(1));
        let got = raw(
            router.addr,
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").into_bytes(),
        )
        .await;
        assert!(
            got.starts_with("HTTP/1.1 502 Bad Gateway\r\n"),
            "case {n}: {got}"
        );
        assert!(
            got.contains("urn:iuid-router:problem:bad-gateway"),
            "case {n}: {got}"
        );
        let errors = router
            .metric(
                "iuid_router_upstream_errors_total",
                &[&format!("region=\"{region}\"")],
            )
            .await;
        assert_eq!(errors, 1.0, "case {n}: counted against the upstream");
    }
}

/// What the head path does not carry (here an expectation other than `100-continue`, and a
/// GraphQL body sent chunked) goes through the shared phases on the same connection, and
/// the connection's next request is served after it; each is counted.
#[tokio::test]
async fn a_request_off_the_head_path_is_carried_through_the_shared_phases() {
    let up = Upstream::start("a").await;
    let router = Router::start(
        &orders_config().route_graphql("/graphql").yaml(),
        &lettered_table("h1", &[&[up.url()]]),
    )
    .await;
    let handoffs = router
        .metric("iuid_router_http1_shared_phases_total", &[])
        .await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let expect = format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nExpect: something-else\r\nContent-Length: 5\r\n\r\nhello"
    );
    let next = format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let answer = raw(router.addr, format!("{expect}{next}").into_bytes()).await;
    assert_eq!(answer.matches("HTTP/1.1 200 OK\r\n").count(), 2, "{answer}");
    assert_eq!(up.count(), 2);
    assert_eq!(&up.last().body[..], b"");
    let query = r#"{"query":"{ node(id: \"x\") { id } }"}"#;
    let graphql = format!(
        "POST /graphql HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{query}\r\n0\r\n\r\n",
        query.len()
    );
    let answer = raw(router.addr, graphql.into_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 "), "{answer}");
    assert!(answer.contains("x-request-id: "), "{answer}");
    // Each request is counted (other tests here may add theirs).
    let now = router
        .metric("iuid_router_http1_shared_phases_total", &[])
        .await;
    assert!(now >= handoffs + 2.0, "{handoffs} -> {now}");
}

/// A client that stops sending its body midway is the client's error: the upstream never
/// gets a complete request and is not blamed.
#[tokio::test]
async fn an_upload_cut_midway_is_never_completed_upstream() {
    let up = scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n").await;
    let router = router_to(&url(up.addr), "cut").await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let body = vec![b'x'; 200_000];
    let mut stream = tokio::net::TcpStream::connect(router.addr)
        .await
        .expect("connect");
    let head = format!("POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 400000\r\n\r\n");
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(&body).await.expect("half the body");
    drop(stream);
    let counted = common::eventually(Duration::from_secs(5), || async {
        router
            .metric("iuid_router_client_errors_total", &["kind=\"aborted\""])
            .await
            >= 1.0
    })
    .await;
    assert!(counted.is_some(), "the client's error is counted");
    assert_eq!(
        router
            .metric("iuid_router_upstream_errors_total", &["region=\"cut\""])
            .await,
        0.0
    );
    let seen = up.seen.lock().expect("seen").len();
    assert_eq!(seen, 0, "the upstream never completed a request");
}

/// HTTPS with ALPN `http/1.1` is the own engine's too: the upstream gets the client's fields
/// in their case and order, `X-Forwarded-Proto: https`, and two requests on one TLS
/// connection are answered (curl reuses it).
#[tokio::test]
async fn a_tls_http11_connection_is_served_by_the_own_engine() {
    let up = scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    common::make_certs(&certs, false, &["localhost"]);
    let table = format!(
        "version: h1\nregions:\n  tls: {{ upstreams: [\"{}\"] }}\ncountries:\n  1: tls\ndefault_region: tls\n",
        url(up.addr)
    );
    let config = orders_config().extra(&common::tls_lines(&certs)).yaml();
    let router = Router::start(&config, &table).await;
    let target = format!(
        "https://localhost:{}/v1/orders/{}",
        router.addr.port(),
        iuid_for(1)
    );
    let args: Vec<String> = [
        "-sS",
        "--http1.1",
        "--cacert",
        &certs.join("ca.pem").display().to_string(),
        "--resolve",
        &format!("localhost:{}:127.0.0.1", router.addr.port()),
        "-H",
        "X-Case-Kept: 1",
        &target,
        &target,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl").args(&args).output()
    })
    .await
    .expect("join")
    .expect("curl");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "okok", "{out:?}");
    let seen = String::from_utf8(up.seen.lock().expect("seen").clone()).expect("ascii");
    assert_eq!(seen.matches("X-Case-Kept: 1\r\n").count(), 2, "{seen}");
    assert_eq!(
        seen.matches("X-Forwarded-Proto: https\r\n").count(),
        2,
        "{seen}"
    );
    assert!(seen.contains(";proto=https\r\n"), "{seen}");
}

/// A body up to `retries.buffer_bytes` that comes after its head (a later read) is read
/// whole before it goes upstream, as hyper's engine does: it goes with its head in one
/// write, and a request an upstream drops is sent again, body and all, to the other one.
#[tokio::test]
async fn a_body_read_after_its_head_is_held_and_retried() {
    // An upstream that reads a request's first bytes and closes without answering.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let dropping = listener.local_addr().expect("addr");
    let dropped = Arc::new(AtomicUsize::new(0));
    let count = dropped.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            if matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {
                count.fetch_add(1, Ordering::SeqCst);
            }
        }
    });
    let up = scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let table = format!(
        "version: h1\nregions:\n  held: {{ upstreams: [\"{}\", \"{}\"] }}\ncountries:\n  1: held\ndefault_region: held\n",
        url(dropping),
        url(up.addr)
    );
    let router = Router::start(&own(), &table).await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let body = vec![b'b'; 20_000];
    for _ in 0..4 {
        let mut stream = tokio::net::TcpStream::connect(router.addr)
            .await
            .expect("connect");
        let head = format!(
            "PUT {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 20000\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(head.as_bytes()).await.expect("head");
        tokio::time::sleep(Duration::from_millis(50)).await;
        stream.write_all(&body).await.expect("body");
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
            .await
            .expect("an answer within 10 s")
            .expect("read");
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    }
    assert!(
        dropped.load(Ordering::SeqCst) >= 1,
        "some request went to the dropping upstream first and was sent again"
    );
    let seen = up.seen.lock().expect("seen").clone();
    let whole = format!("Content-Length: 20000\r\n\r\n{}", "b".repeat(20_000));
    assert_eq!(
        String::from_utf8_lossy(&seen).matches(&whole).count(),
        4,
        "every body reached the answering upstream whole"
    );
}

/// A request refused before it goes upstream (here 400: its id is malformed) whose body is small and
/// length-framed has its body read and dropped, as nginx discards it, and its connection
/// goes on: the request pipelined after it is answered. A client that pushes a body at an
/// answer it does not wait for is not cut off mid-write.
#[tokio::test]
async fn a_refused_requests_small_body_is_dropped_and_the_connection_goes_on() {
    let up = scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let router = router_to(&url(up.addr), "dropped").await;
    let refused = format!(
        "POST /v1/orders/not-an-id HTTP/1.1\r\nHost: t\r\nContent-Length: 20000\r\n\r\n{}",
        "x".repeat(20_000)
    );
    let next = format!(
        "GET /v1/orders/{} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        iuid_for(1)
    );
    let answer = raw(router.addr, format!("{refused}{next}").into_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("application/problem+json"), "{answer}");
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 2, "{answer}");
    assert!(answer.ends_with("\r\n\r\nok"), "{answer}");
    let seen = String::from_utf8(up.seen.lock().expect("seen").clone()).expect("ascii");
    assert!(
        seen.starts_with("GET /v1/orders/"),
        "only the second request went upstream: {seen}"
    );
    assert!(
        !seen.contains("xxxx"),
        "the refused body never went upstream"
    );
}

/// `Expect: 100-continue` on the own engine (issue 37; main handed it to hyper's): the
/// client that waits for `100 Continue` gets it, sends its body, gets the answer; the
/// upstream gets the body without the hop-by-hop `Expect`; and a request refused from its
/// head gets its final status at once and its connection closed, its body never asked for.
#[tokio::test]
async fn expect_100_continue_is_answered_before_the_body_is_read() {
    let up = scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
    let router = router_to(&url(up.addr), "expect").await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let mut conn = tokio::net::TcpStream::connect(router.addr)
        .await
        .expect("connect");
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n"
    );
    conn.write_all(head.as_bytes()).await.expect("head");
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let continue_line = b"HTTP/1.1 100 Continue\r\n\r\n";
    while got.len() < continue_line.len() {
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .expect("100 Continue before the body")
            .expect("read");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(&got[..], continue_line);
    conn.write_all(b"hello").await.expect("body");
    let mut answer = Vec::new();
    while !answer.ends_with(b"\r\n\r\nok") {
        let n = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .expect("answer")
            .expect("read");
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&answer));
        answer.extend_from_slice(&buf[..n]);
    }
    assert!(answer.starts_with(b"HTTP/1.1 200 OK\r\n"));
    let seen = String::from_utf8(up.seen.lock().expect("seen").clone()).expect("ascii");
    assert!(seen.ends_with("\r\n\r\nhello"), "{seen}");
    assert!(!seen.to_lowercase().contains("expect:"), "{seen}");
    // Refused from its head (no `Host`): 400 at once, no `100 Continue`, then closed.
    let refused =
        format!("POST {path} HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    conn.write_all(refused.as_bytes()).await.expect("head");
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut rest))
        .await
        .expect("closed without waiting for a body")
        .expect("read");
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.starts_with("HTTP/1.1 400 "), "{rest}");
    assert!(!rest.contains("100 Continue"), "{rest}");
    assert_eq!(up.connections.load(Ordering::SeqCst), 1);
}

/// HTTP/1.0 on the own engine (issue 37; main handed it to hyper's): a request with
/// `Connection: keep-alive` gets `HTTP/1.0` with `Connection: keep-alive` and its connection
/// goes on; one without is answered and closed; an upstream's chunked answer reaches the
/// HTTP/1.0 client decoded, delimited by the close (no chunked coding in HTTP/1.0). What went
/// upstream is HTTP/1.1 with `Via: 1.0 edge`, fields in the case they came.
#[tokio::test]
async fn http10_clients_are_served_by_the_own_engine() {
    let up = scripted(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Up: 1\r\n\r\nok").await;
    let router = router_to(&url(up.addr), "http10").await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let keep = format!(
        "GET {path} HTTP/1.0\r\nHost: t\r\nConnection: keep-alive\r\nX-Mixed-Case: v\r\n\r\n"
    );
    let last = format!("GET {path} HTTP/1.0\r\n\r\n");
    let answer = raw(router.addr, format!("{keep}{keep}{last}").into_bytes()).await;
    assert_eq!(answer.matches("HTTP/1.0 200 OK\r\n").count(), 3, "{answer}");
    assert_eq!(
        answer.matches("Connection: keep-alive\r\n").count(),
        2,
        "{answer}"
    );
    // The upstream's field as it came: hyper's engine would have lowercased it.
    assert_eq!(answer.matches("X-Up: 1\r\n").count(), 3, "{answer}");
    let seen = String::from_utf8(up.seen.lock().expect("seen").clone()).expect("ascii");
    assert_eq!(
        seen.matches(&format!("GET {path} HTTP/1.1\r\n")).count(),
        3,
        "{seen}"
    );
    assert!(seen.contains("X-Mixed-Case: v\r\n"), "{seen}");
    assert!(seen.contains("Via: 1.0 edge\r\n"), "{seen}");

    let chunked = scripted(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Up: 1\r\n\r\n5;a=b\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    )
    .await;
    let router = router_to(&url(chunked.addr), "http10-chunked").await;
    let answer = raw(router.addr, keep.into_bytes()).await;
    assert!(answer.starts_with("HTTP/1.0 200 OK\r\n"), "{answer}");
    assert!(
        !answer.to_lowercase().contains("transfer-encoding"),
        "{answer}"
    );
    assert!(answer.contains("Connection: close\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nhello world"), "{answer}");
}
