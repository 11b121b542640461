//! docs/data-path.md "who is to blame": a client's own errors (a malformed or abandoned body, a stalled
//! upload, a response it stops reading) get a clear status and never eject or count against
//! an upstream; requests a proxy must refuse (`CONNECT`, bad `Host`, unknown transfer
//! codings) are refused before anything is forwarded. Each test talks raw HTTP/1.1 over a
//! real socket to the real router in front of real upstreams on loopback, and measures time
//! and status where a timeout is involved.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{client, eventually, iuid_for, url, ConfigYaml, Router, Upstream};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A table with one region, named after the test so its metrics are its own; it owns country
/// 1, so every test's id is `iuid_for(1)`.
fn table(region: &str, upstreams: &[String]) -> String {
    let list: Vec<String> = upstreams.iter().map(|u| format!("\"{u}\"")).collect();
    format!(
        "version: blame\nregions:\n  {region}: {{ upstreams: [{}] }}\ncountries:\n  1: {region}\ndefault_region: {region}\n",
        list.join(", ")
    )
}

/// `/graphql` and `/v1/orders/{id}`, no file watch, 500 ms to connect, and the given
/// response-headers and idle timeouts.
fn config(response_headers_ms: u64, idle_ms: u64) -> ConfigYaml {
    ConfigYaml::new()
        .route_graphql("/graphql")
        .route_path("/v1/orders/{id}")
        .watch(false)
        .timeouts(500, response_headers_ms, idle_ms)
}

/// A response as read off the wire: status, head (lower-cased), body.
struct Raw {
    status: u16,
    head: String,
    body: Vec<u8>,
}

/// Reads one response (a `Content-Length` body, or up to EOF) from `stream`, within 15 s.
async fn read_response(stream: &mut TcpStream) -> Raw {
    let read = async {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let n = stream.read(&mut chunk).await.expect("read response");
            assert!(n > 0, "connection closed before a response head: {buf:?}");
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let status = head[9..12].parse().expect("status code");
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map(|v| v.trim().parse::<usize>().expect("length"));
        let mut body = buf[head_end..].to_vec();
        match length {
            Some(n) => {
                while body.len() < n {
                    let got = stream.read(&mut chunk).await.expect("read body");
                    assert!(got > 0, "body cut short");
                    body.extend_from_slice(&chunk[..got]);
                }
            }
            None => {
                let _ = stream.read_to_end(&mut body).await;
            }
        }
        Raw { status, head, body }
    };
    tokio::time::timeout(Duration::from_secs(15), read)
        .await
        .expect("a response within 15 s")
}

/// Sends `request` whole on a new connection and reads the response.
async fn exchange(router: SocketAddr, request: &[u8]) -> Raw {
    let mut stream = TcpStream::connect(router).await.expect("connect");
    stream.write_all(request).await.expect("send");
    read_response(&mut stream).await
}

/// A POST with a chunked body whose second chunk header is not hex.
fn malformed_chunked(path: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n"
    )
    .into_bytes()
}

/// Starts an upload of `declared` bytes, sends 1 KiB of it and resets the connection
/// (`SO_LINGER` 0): a mobile client that dropped mid-upload.
async fn abandoned_upload(router: SocketAddr, path: &str, declared: usize) {
    let mut stream = TcpStream::connect(router).await.expect("connect");
    let head = format!("POST {path} HTTP/1.1\r\nHost: t\r\nContent-Length: {declared}\r\n\r\n");
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(&[b'x'; 1024]).await.expect("part");
    // Let the router start forwarding before the client vanishes.
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Deprecated for blocking on drop with a timeout; a zero linger resets at once instead.
    #[allow(deprecated)]
    stream.set_linger(Some(Duration::ZERO)).expect("linger");
    drop(stream);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_bad_uploads_from_one_client_eject_no_upstream() {
    let (one, two) = (Upstream::start("one").await, Upstream::start("two").await);
    let router = Router::start(
        &config(2000, 5000).yaml(),
        &table("blame_eject", &[one.url(), two.url()]),
    )
    .await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    for _ in 0..10 {
        let raw = exchange(router.addr, &malformed_chunked(&path)).await;
        assert_eq!(
            raw.status, 400,
            "a malformed chunked body is the client's: 400"
        );
        assert!(raw.head.contains("application/problem+json"));
        let body = String::from_utf8_lossy(&raw.body).into_owned();
        assert!(body.contains("bad-body-framing"), "{body}");
    }
    for _ in 0..10 {
        // Over `retries.buffer_bytes` (64 KiB): streamed, as large uploads are.
        abandoned_upload(router.addr, &path, 1 << 20).await;
    }
    let aborted = eventually(Duration::from_secs(5), || async {
        router
            .metric("iuid_router_client_errors_total", &["kind=\"aborted\""])
            .await
            >= 10.0
    })
    .await;
    assert!(
        aborted.is_some(),
        "10 abandoned uploads counted as client_aborted"
    );
    assert!(
        router
            .metric("iuid_router_client_errors_total", &["kind=\"bad_framing\""])
            .await
            >= 10.0
    );
    assert_eq!(
        router
            .metric(
                "iuid_router_upstream_errors_total",
                &["region=\"blame_eject\""]
            )
            .await,
        0.0,
        "no upstream error was counted for the client's faults"
    );

    // With the default health policy (eject after 5 failures), 20 failures blamed on the
    // upstreams would have ejected both: every request below would be 503.
    let (before_one, before_two) = (one.count(), two.count());
    let http = client();
    for _ in 0..20 {
        let resp = http.get(router.url(&path)).send().await.expect("get");
        assert_eq!(resp.status(), 200, "the region still serves");
    }
    assert!(one.count() > before_one, "upstream one still in rotation");
    assert!(two.count() > before_two, "upstream two still in rotation");
}

/// A raw upstream that reads a request head, then its body (chunked, to the end), counting
/// the body bytes, and answers 200 with the count.
async fn counting_upstream() -> SocketAddr {
    let app = axum::Router::new().fallback(|body: axum::body::Body| async move {
        match axum::body::to_bytes(body, 64 << 20).await {
            Ok(bytes) => (http::StatusCode::OK, format!("{}", bytes.len())),
            Err(e) => (http::StatusCode::BAD_REQUEST, e.to_string()),
        }
    });
    common::serve(app).await
}

/// Uploads `chunks` chunks of 1 KiB, one every `every`, then ends the body; the response.
async fn trickle_upload(router: SocketAddr, path: &str, chunks: usize, every: Duration) -> Raw {
    let mut stream = TcpStream::connect(router).await.expect("connect");
    let head = format!("POST {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
    stream.write_all(head.as_bytes()).await.expect("head");
    for _ in 0..chunks {
        stream.write_all(b"400\r\n").await.expect("size");
        stream.write_all(&[b'x'; 1024]).await.expect("chunk");
        stream.write_all(b"\r\n").await.expect("end");
        tokio::time::sleep(every).await;
    }
    stream.write_all(b"0\r\n\r\n").await.expect("last chunk");
    read_response(&mut stream).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_but_steady_30_s_upload_outlasts_response_headers_ms() {
    let up = counting_upstream().await;
    let router = Router::start(
        &config(2000, 1500).yaml(),
        &table("blame_steady", &[url(up)]),
    )
    .await;
    let started = Instant::now();
    // 60 KiB over 30 s: a chunk every 0.5 s, each wait under idle_ms.
    let raw = trickle_upload(
        router.addr,
        &format!("/v1/orders/{}", iuid_for(1)),
        60,
        Duration::from_millis(500),
    )
    .await;
    let took = started.elapsed();
    assert_eq!(raw.status, 200, "{}", String::from_utf8_lossy(&raw.body));
    assert_eq!(raw.body, b"61440", "every byte reached the upstream");
    assert!(took >= Duration::from_secs(30), "the upload took {took:?}");
    assert_eq!(
        router
            .metric(
                "iuid_router_upstream_errors_total",
                &["region=\"blame_steady\""]
            )
            .await,
        0.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_still_progressing_is_not_cut_at_response_headers_ms() {
    let up = counting_upstream().await;
    let router = Router::start(
        &config(1000, 2000).yaml(),
        &table("blame_progress", &[url(up)]),
    )
    .await;
    let started = Instant::now();
    // The case: a 1 KiB chunk every 0.45 s, for 3.6 s, over a 1 s header timeout.
    let raw = trickle_upload(
        router.addr,
        &format!("/v1/orders/{}", iuid_for(1)),
        8,
        Duration::from_millis(450),
    )
    .await;
    assert_eq!(raw.status, 200, "{}", String::from_utf8_lossy(&raw.body));
    assert_eq!(raw.body, b"8192");
    assert!(started.elapsed() >= Duration::from_millis(3600));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_upload_is_408_after_idle_ms_and_blames_no_upstream() {
    let up = counting_upstream().await;
    let router = Router::start(
        &config(5000, 1000).yaml(),
        &table("blame_stall", &[url(up)]),
    )
    .await;
    let mut stream = TcpStream::connect(router.addr).await.expect("connect");
    let head = format!(
        "POST /v1/orders/{} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n",
        iuid_for(1)
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    stream.write_all(&[b'x'; 1024]).await.expect("chunk");
    stream.write_all(b"\r\n").await.expect("end");
    let started = Instant::now();
    let raw = read_response(&mut stream).await;
    let took = started.elapsed();
    assert_eq!(raw.status, 408, "{}", String::from_utf8_lossy(&raw.body));
    assert!(String::from_utf8_lossy(&raw.body).contains("request-body-timeout"));
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_millis(2500),
        "408 after idle_ms (1 s), not at response_headers_ms (5 s): {took:?}"
    );
    assert_eq!(
        router
            .metric(
                "iuid_router_upstream_errors_total",
                &["region=\"blame_stall\""]
            )
            .await,
        0.0
    );
    // A small body with a length is held for a retry before it is sent: the same 408.
    let mut stream = TcpStream::connect(router.addr).await.expect("connect");
    let head = format!(
        "PUT /v1/orders/{} HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789",
        iuid_for(1)
    );
    stream.write_all(head.as_bytes()).await.expect("head");
    let started = Instant::now();
    let raw = read_response(&mut stream).await;
    let took = started.elapsed();
    assert_eq!(raw.status, 408, "{}", String::from_utf8_lossy(&raw.body));
    assert!(took >= Duration::from_millis(950) && took < Duration::from_millis(2500));
    assert!(
        router
            .metric(
                "iuid_router_client_errors_total",
                &["kind=\"body_timeout\""]
            )
            .await
            >= 2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_graphql_body_is_408_after_idle_ms() {
    let up = Upstream::start("gql").await;
    let router = Router::start(&config(5000, 1000).yaml(), &table("blame_gql", &[up.url()])).await;
    let mut stream = TcpStream::connect(router.addr).await.expect("connect");
    let head = "POST /graphql HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n";
    stream.write_all(head.as_bytes()).await.expect("head");
    stream
        .write_all(&[b' '; 100])
        .await
        .expect("100 of 1000 bytes");
    let started = Instant::now();
    let raw = read_response(&mut stream).await;
    let took = started.elapsed();
    assert_eq!(raw.status, 408, "{}", String::from_utf8_lossy(&raw.body));
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_millis(2500),
        "408 after idle_ms (1 s): {took:?}"
    );
    assert_eq!(up.count(), 0, "nothing was forwarded");
}

/// An upstream that answers every request with a `len`-byte body made as it is read, and
/// records when a response body is dropped (its connection closed) and how much was read.
struct Streaming {
    addr: SocketAddr,
    dropped: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
}

impl Streaming {
    async fn start(len: usize) -> Streaming {
        let (dropped, sent) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (d, s) = (dropped.clone(), sent.clone());
        let app = axum::Router::new().fallback(move || {
            let (d, s) = (d.clone(), s.clone());
            async move {
                struct OnDrop(Arc<AtomicBool>);
                impl Drop for OnDrop {
                    fn drop(&mut self) {
                        self.0.store(true, Ordering::SeqCst);
                    }
                }
                let chunk = axum::body::Bytes::from(vec![b'z'; 64 << 10]);
                // The guard lives in the stream's state: dropped with the response body.
                let stream =
                    futures_util::stream::unfold((0usize, OnDrop(d)), move |(at, guard)| {
                        let (chunk, s) = (chunk.clone(), s.clone());
                        async move {
                            if at >= len {
                                return None;
                            }
                            s.fetch_add(chunk.len(), Ordering::SeqCst);
                            let next = at + chunk.len();
                            Some((Ok::<_, std::io::Error>(chunk), (next, guard)))
                        }
                    });
                axum::body::Body::from_stream(stream)
            }
        });
        let addr = common::serve(app).await;
        Streaming {
            addr,
            dropped,
            sent,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_closed_after_idle_ms_with_its_upstream() {
    let up = Streaming::start(100 << 20).await;
    let router = Router::start(
        &config(2000, 1000).yaml(),
        &table("blame_reader", &[url(up.addr)]),
    )
    .await;
    let before = router
        .metric(
            "iuid_router_client_errors_total",
            &["kind=\"send_timeout\""],
        )
        .await;
    // A small receive buffer, and not one byte read: the router's writes soon block.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("rcvbuf");
    let mut stream = socket.connect(router.addr).await.expect("connect");
    let request = format!("GET /v1/orders/{} HTTP/1.1\r\nHost: t\r\n\r\n", iuid_for(1));
    stream.write_all(request.as_bytes()).await.expect("send");
    let started = Instant::now();
    let closed = eventually(Duration::from_secs(5), || async {
        up.dropped.load(Ordering::SeqCst)
    })
    .await;
    let took = started.elapsed();
    assert!(
        closed.is_some(),
        "the upstream's response was dropped (its connection closed)"
    );
    assert!(
        took >= Duration::from_millis(900),
        "not before idle_ms (1 s) without progress: {took:?}"
    );
    let sent = up.sent.load(Ordering::SeqCst);
    assert!(
        sent < 50 << 20,
        "the upstream stopped early: {sent} of 100 MiB made"
    );
    // The client connection is closed too: what was buffered, then EOF or a reset.
    let drained = tokio::time::timeout(Duration::from_secs(5), async {
        let mut sink = [0u8; 64 << 10];
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(
        drained.is_ok(),
        "the client connection was closed by the router"
    );
    assert!(
        router
            .metric(
                "iuid_router_client_errors_total",
                &["kind=\"send_timeout\""]
            )
            .await
            > before
    );
    assert_eq!(
        router
            .metric(
                "iuid_router_upstream_errors_total",
                &["region=\"blame_reader\""]
            )
            .await,
        0.0
    );
}

#[tokio::test]
async fn an_upstream_content_length_beside_chunked_is_removed() {
    let up = common::scripted_upstream(
        &[b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"],
        Duration::ZERO,
    )
    .await;
    let router = Router::start(&config(2000, 5000).yaml(), &table("blame_clte", &[url(up)])).await;
    let resp = client()
        .get(router.url(&format!("/v1/orders/{}", iuid_for(1))))
        .send()
        .await
        .expect("response");
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers().get("content-length").is_none(),
        "Content-Length removed (RFC 9112 §6.3)"
    );
    let body = resp
        .text()
        .await
        .expect("the whole body, not a truncated one");
    assert_eq!(body, "hello");
}

#[tokio::test]
async fn a_missing_repeated_or_invalid_host_is_400_and_not_forwarded() {
    let up = Upstream::start("host").await;
    let router = Router::start(
        &config(2000, 5000).yaml(),
        &table("blame_host", &[up.url()]),
    )
    .await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let requests = [
        format!("GET {path} HTTP/1.1\r\n\r\n"),
        format!("GET {path} HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n"),
        format!("GET {path} HTTP/1.1\r\nHost: a/b@evil\r\n\r\n"),
        format!("GET {path} HTTP/1.1\r\nHost: a.example:port\r\n\r\n"),
    ];
    for request in &requests {
        let raw = exchange(router.addr, request.as_bytes()).await;
        assert_eq!(raw.status, 400, "{request:?}");
        assert!(String::from_utf8_lossy(&raw.body).contains("invalid-host"));
    }
    assert_eq!(up.count(), 0, "none of them was forwarded");
    // HTTP/1.0 needs no Host; a valid one passes.
    let raw = exchange(
        router.addr,
        format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes(),
    )
    .await;
    assert_eq!(raw.status, 200);
    let raw = exchange(
        router.addr,
        format!("GET {path} HTTP/1.1\r\nHost: api.example:8443\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await;
    assert_eq!(raw.status, 200);
    assert_eq!(up.last().headers["x-forwarded-host"], "api.example:8443");
}

#[tokio::test]
async fn a_transfer_coding_other_than_chunked_is_501_and_not_forwarded() {
    let up = Upstream::start("te").await;
    let router = Router::start(&config(2000, 5000).yaml(), &table("blame_te", &[up.url()])).await;
    let request = format!(
        "POST /v1/orders/{} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        iuid_for(1)
    );
    let raw = exchange(router.addr, request.as_bytes()).await;
    assert_eq!(raw.status, 501);
    assert!(String::from_utf8_lossy(&raw.body).contains("unsupported-transfer-coding"));
    assert_eq!(up.count(), 0);
}

#[tokio::test]
async fn connect_is_405_problem_json_and_not_forwarded() {
    let up = Upstream::start("connect").await;
    let router = Router::start(
        &config(2000, 5000).unrouted("default_region").yaml(),
        &table("blame_connect", &[up.url()]),
    )
    .await;
    let raw = exchange(
        router.addr,
        b"CONNECT upstream.example:443 HTTP/1.1\r\nHost: upstream.example:443\r\n\r\n",
    )
    .await;
    assert_eq!(raw.status, 405);
    assert!(raw.head.contains("content-type: application/problem+json"));
    assert!(raw.head.contains("allow: "));
    assert!(String::from_utf8_lossy(&raw.body).contains("method-not-allowed"));
    assert_eq!(up.count(), 0, "nothing forwarded");
}

#[tokio::test]
async fn a_forged_request_id_is_replaced() {
    let up = Upstream::start("rid").await;
    let router = Router::start(&config(2000, 5000).yaml(), &table("blame_rid", &[up.url()])).await;
    let url = router.url(&format!("/v1/orders/{}", iuid_for(1)));
    let forged = "../../etc/passwd%0d%0a";
    let resp = client()
        .get(&url)
        .header("x-request-id", forged)
        .send()
        .await
        .expect("get");
    let returned = resp.headers()["x-request-id"].clone();
    assert_ne!(returned, forged);
    assert_eq!(up.last().headers["x-request-id"], returned);
    let kept = client()
        .get(&url)
        .header("x-request-id", "trace-01:ab_c.d")
        .send()
        .await
        .expect("get");
    assert_eq!(kept.headers()["x-request-id"], "trace-01:ab_c.d");
}
