//! The upstream connection pools (`src/upstream/pool.rs`) over real sockets: an upstream
//! that counts the TCP connections it accepts shows reuse, idle expiry, and recovery from a
//! keep-alive connection the upstream closed.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{client, iuid_for, ConfigYaml, Router};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// An HTTP/1.1 upstream on hyper that counts accepted connections; with `close_idle_after`
/// it ends a keep-alive connection that stays idle that long (as servers' keep-alive
/// timeouts do).
async fn counting_upstream(close_idle_after: Option<Duration>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let service = service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(hyper::Response::new(
                        http_body_util::Full::new(bytes::Bytes::from_static(b"ok")),
                    ))
                });
                let mut builder = hyper::server::conn::http1::Builder::new();
                builder.timer(hyper_util::rt::TokioTimer::new());
                if let Some(idle) = close_idle_after {
                    builder.header_read_timeout(idle);
                }
                let _ = builder
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (common::url(addr), accepted)
}

fn config(idle_ms: u64) -> String {
    ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .timeouts(500, 2000, idle_ms)
        .watch(false)
        .extra("workers: 1")
        .yaml()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_requests_reuse_one_connection() {
    let (upstream, accepted) = counting_upstream(None).await;
    let router = Router::start(
        &config(60_000),
        &common::lettered_table("pool", &[&[upstream]]),
    )
    .await;
    let url = router.url(&format!("/v1/orders/{}", iuid_for(1)));
    let http = client();
    for _ in 0..50 {
        let resp = http.get(&url).send().await.expect("request");
        assert_eq!(resp.status(), 200);
        resp.bytes().await.expect("body");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one worker, one keep-alive connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_after_idle_ms() {
    let (upstream, accepted) = counting_upstream(None).await;
    let router = Router::start(
        &config(300),
        &common::lettered_table("pool", &[&[upstream]]),
    )
    .await;
    let url = router.url(&format!("/v1/orders/{}", iuid_for(1)));
    let http = client();
    assert_eq!(http.get(&url).send().await.expect("first").status(), 200);
    assert_eq!(http.get(&url).send().await.expect("second").status(), 200);
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(http.get(&url).send().await.expect("third").status(), 200);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "the idle connection was not reused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_upstream_closed_while_idle_costs_no_request() {
    // The upstream ends connections idle for 200 ms; the router keeps them for 60 s.
    let (upstream, accepted) = counting_upstream(Some(Duration::from_millis(200))).await;
    let router = Router::start(
        &config(60_000),
        &common::lettered_table("pool", &[&[upstream]]),
    )
    .await;
    let url = router.url(&format!("/v1/orders/{}", iuid_for(1)));
    let http = client();
    for round in 0..5 {
        let resp = http.get(&url).send().await.expect("request");
        assert_eq!(resp.status(), 200, "round {round}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        5,
        "a new connection each round"
    );
}

/// An upstream on raw sockets that answers the first request on each connection and, on the
/// second, reads it whole and closes without a byte of answer: a keep-alive connection the
/// upstream dropped just as a request reached it. Counts the `POST`s it read.
async fn closing_upstream() -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let posts = Arc::new(AtomicUsize::new(0));
    let count = posts.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for n in 0.. {
                    // One request: its head, then the body its Content-Length says.
                    let (head_end, length) = loop {
                        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..at]).to_ascii_lowercase();
                            let length = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .and_then(|v| v.trim().parse::<usize>().ok())
                                .unwrap_or(0);
                            break (at + 4, length);
                        }
                        let mut chunk = [0u8; 4096];
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(read) => buf.extend_from_slice(&chunk[..read]),
                        }
                    };
                    while buf.len() < head_end + length {
                        let mut chunk = [0u8; 4096];
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(read) => buf.extend_from_slice(&chunk[..read]),
                        }
                    }
                    if buf.starts_with(b"POST") {
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                    buf.drain(..head_end + length);
                    if n > 0 {
                        return; // closed, unanswered
                    }
                    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (common::url(addr), posts)
}

/// A `POST` whose pooled connection the upstream closes once the request reached it is not
/// sent again on a new connection, on the head path as through the shared phases (HTTP/2
/// clients): the upstream may have acted on it (RFC 9110 §9.2.2). The stale-connection
/// resend is one rule (`upstream::stale`); the shared phases once resent any held body.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_the_upstream_dropped_on_a_pooled_connection_is_not_sent_again() {
    for (case, http) in [
        ("HTTP/1.1", client()),
        (
            "h2c",
            reqwest::Client::builder()
                .http2_prior_knowledge()
                .build()
                .expect("client"),
        ),
    ] {
        let (upstream, posts) = closing_upstream().await;
        let router = Router::start(
            &config(60_000),
            &common::lettered_table("stale", &[&[upstream]]),
        )
        .await;
        let url = router.url(&format!("/v1/orders/{}", iuid_for(1)));
        let primed = http.get(&url).send().await.expect("request");
        assert_eq!(
            primed.status(),
            200,
            "{case}: the GET that pools a connection"
        );
        let resp = http
            .post(&url)
            .body("order=1")
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), 502, "{case}: a POST the upstream dropped");
        assert_eq!(
            posts.load(Ordering::SeqCst),
            1,
            "{case}: the POST was sent once"
        );
    }
}
