//! docs/data-path.md / issue 5 behaviours with real servers on loopback that the fault tests leave out:
//! which methods are retried after a reset before response headers, the idle timeout on a
//! stalled response body, and the limits on request header count and size.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{
    client, eventually, free_port, iuid_for, read_head, resetting_upstream, url, ConfigYaml,
    Router, Upstream,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Country 1 → region `a`, 2 → `b` (ids: [`iuid_for`]).
fn table(a: &[String], b: &[String]) -> String {
    common::lettered_table("limits", &[a, b])
}

/// `/o/{id}`, no file watch, 500 ms to connect, 2 s to the response headers, `idle_ms`.
fn config(idle_ms: u64) -> ConfigYaml {
    ConfigYaml::new()
        .route_path("/o/{id}")
        .watch(false)
        .timeouts(500, 2000, idle_ms)
}

/// The targets of the `method` requests among request lines.
fn targets_of(lines: &[String], method: &str) -> BTreeSet<String> {
    lines
        .iter()
        .filter_map(|l| {
            let mut parts = l.split(' ');
            (parts.next() == Some(method)).then(|| parts.next().unwrap_or_default().to_owned())
        })
        .collect()
}

fn received_targets(up: &Upstream, method: &str) -> Vec<String> {
    up.received
        .lock()
        .expect("log")
        .iter()
        .filter(|r| r.method == method)
        .map(|r| r.target.clone())
        .collect()
}

/// The reset upstream stays in rotation (no ejection) and every retry the rules allow gets a
/// budget, so what is (not) retried depends on the method alone.
const RESET_CONFIG: &str =
    "health: { eject_after: 1000 }\nretries: { budget_percent: 100, min_per_second: 1000 }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_before_response_headers_is_retried_for_idempotent_methods_only() {
    let (resetter, seen) = resetting_upstream().await;
    let healthy = Upstream::start("healthy").await;
    let router = Router::start(
        &config(5000).extra(RESET_CONFIG).yaml(),
        &table(&[url(resetter), healthy.url()], &[healthy.url()]),
    )
    .await;
    let http = client();
    let path = |n: usize| format!("/o/{}?n={n}", iuid_for(1));

    // GET and PUT (idempotent): every request succeeds, whichever upstream it tried first.
    // Methods go in pairs (GET GET PUT PUT …) so that, with first attempts alternating
    // between the two upstreams, each method meets the resetting one.
    for n in 0..40 {
        let method = if (n / 2) % 2 == 0 { "GET" } else { "PUT" };
        let req = match method {
            "GET" => http.get(router.url(&path(n))),
            _ => http.put(router.url(&path(n))).body(format!("put-{n}")),
        };
        let resp = req.send().await.expect("answer");
        assert_eq!(resp.status(), 200, "{method} {n}");
        assert_eq!(resp.text().await.expect("body"), "healthy", "{method} {n}");
    }
    let lines = seen.lock().expect("log").clone();
    let (reset_gets, reset_puts) = (targets_of(&lines, "GET"), targets_of(&lines, "PUT"));
    assert!(
        !reset_gets.is_empty() && !reset_puts.is_empty(),
        "the resetting upstream was never tried: {lines:?}"
    );
    // Each request reached the healthy upstream exactly once, the retried ones included, and
    // a replayed PUT carried its whole body.
    let gets = received_targets(&healthy, "GET");
    let puts = received_targets(&healthy, "PUT");
    assert_eq!(gets.len(), 20);
    assert_eq!(puts.len(), 20);
    assert_eq!(gets.iter().collect::<BTreeSet<_>>().len(), 20);
    assert!(reset_gets.iter().all(|t| gets.contains(t)));
    assert!(reset_puts.iter().all(|t| puts.contains(t)));
    for r in healthy.received.lock().expect("log").iter() {
        if r.method == "PUT" {
            let n = r.target.rsplit('=').next().expect("n");
            assert_eq!(r.body, format!("put-{n}"), "{}", r.target);
        }
    }

    // POST (not idempotent, small body held for replay all the same): one that hit the reset
    // is answered 502 and never sent again; the others are served.
    let mut answered_502 = BTreeSet::new();
    let mut answered_200 = BTreeSet::new();
    for n in 100..140 {
        let resp = http
            .post(router.url(&path(n)))
            .body(format!("post-{n}"))
            .send()
            .await
            .expect("answer");
        match resp.status().as_u16() {
            200 => {
                answered_200.insert(path(n));
            }
            502 => {
                assert_eq!(
                    resp.headers()["content-type"],
                    "application/problem+json",
                    "POST {n}"
                );
                answered_502.insert(path(n));
            }
            other => panic!("POST {n}: status {other}"),
        }
    }
    let reset_posts = targets_of(&seen.lock().expect("log"), "POST");
    let healthy_posts = received_targets(&healthy, "POST");
    assert!(
        !answered_502.is_empty(),
        "no POST hit the resetting upstream"
    );
    assert_eq!(reset_posts, answered_502, "exactly the reset POSTs got 502");
    assert_eq!(
        healthy_posts.len(),
        answered_200.len(),
        "no POST sent twice"
    );
    assert_eq!(
        healthy_posts.into_iter().collect::<BTreeSet<_>>(),
        answered_200,
        "no reset POST was replayed on the healthy upstream"
    );
}

/// An upstream that answers `200` with `Content-Length: 1000`, sends the first 100 bytes and
/// stalls; it reports when the router closes the connection.
async fn stalling_upstream() -> (SocketAddr, Arc<Mutex<Option<Instant>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let closed: Arc<Mutex<Option<Instant>>> = Arc::default();
    let report = closed.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let report = report.clone();
            tokio::spawn(async move {
                if read_head(&mut stream).await.is_none() {
                    return;
                }
                let mut answer = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n".to_vec();
                answer.extend_from_slice(&[b'x'; 100]);
                if stream.write_all(&answer).await.is_err() {
                    return;
                }
                // Never send the rest; wait for the router to hang up.
                let mut buf = [0u8; 1024];
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                }
                *report.lock().expect("closed") = Some(Instant::now());
            });
        }
    });
    (addr, closed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_response_body_is_cut_after_the_idle_timeout() {
    const IDLE: Duration = Duration::from_millis(300);
    let (stalled, upstream_closed) = stalling_upstream().await;
    let healthy = Upstream::start("healthy").await;
    let router = Router::start(
        &config(IDLE.as_millis() as u64).yaml(),
        &table(&[url(stalled)], &[healthy.url()]),
    )
    .await;
    let http = client();
    let target = router.url(&format!("/o/{}", iuid_for(1)));
    let stalled_client = tokio::spawn({
        let http = http.clone();
        async move {
            let sent = Instant::now();
            let mut resp = http.get(&target).send().await.expect("headers");
            assert_eq!(resp.status(), 200);
            let headers_at = Instant::now();
            let mut got = Vec::new();
            // Bounded: were the body never cut, this fails instead of hanging.
            let cut = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    match resp.chunk().await {
                        Ok(Some(chunk)) => got.extend_from_slice(&chunk),
                        Ok(None) => return false,
                        Err(_) => return true,
                    }
                }
            })
            .await
            .expect("the stalled body was never cut off");
            (sent.elapsed(), headers_at.elapsed(), cut, got)
        }
    });

    // Meanwhile another region is served as usual.
    let other = router.url(&format!("/o/{}", iuid_for(2)));
    for _ in 0..10 {
        let resp = http.get(&other).send().await.expect("answer");
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.text().await.expect("body"), "healthy");
    }

    let (since_sent, since_headers, cut, got) = stalled_client.await.expect("join");
    // Cut off: an error reading the body, or fewer bytes than announced.
    assert!(
        cut || got.len() < 1000,
        "the body was not cut off: {} bytes",
        got.len()
    );
    assert!(got.iter().all(|&b| b == b'x'));
    assert!(
        since_sent >= IDLE,
        "cut after {since_sent:?}, before the idle timeout"
    );
    assert!(
        since_headers < IDLE + Duration::from_secs(2),
        "cut {since_headers:?} after the headers, idle timeout {IDLE:?}"
    );
    // The router let go of the upstream connection too.
    let released = eventually(Duration::from_secs(5), || async {
        upstream_closed.lock().expect("closed").is_some()
    })
    .await;
    assert!(
        released.is_some(),
        "the router kept the stalled upstream connection"
    );

    // And it still serves both regions' healthy paths.
    let resp = http
        .get(router.url(&format!("/o/{}", iuid_for(2))))
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 200);
    assert_eq!(healthy.count(), 11);
}

/// Sends `request` on a new connection and returns the answer's status (0 if the connection
/// ended with none).
async fn raw_status(addr: SocketAddr, request: Vec<u8>) -> u16 {
    let exchange = async {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        // The router may answer and close before reading all of an oversized head.
        let _ = s.write_all(&request).await;
        let head = read_head(&mut s).await.unwrap_or_default();
        head.split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0)
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .expect("an answer within 10 s")
}

fn request(path: &str, extra_headers: &[(String, String)]) -> Vec<u8> {
    let mut r = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    for (name, value) in extra_headers {
        r.push_str(&format!("{name}: {value}\r\n"));
    }
    r.push_str("\r\n");
    r.into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_or_too_large_request_headers_are_refused_before_any_upstream() {
    let up = Upstream::start("up").await;
    let router = Router::start(
        &config(5000)
            .limits("max_headers: 20, max_header_bytes: 8192")
            .yaml(),
        &table(&[up.url()], &[up.url()]),
    )
    .await;
    let path = format!("/o/{}", iuid_for(1));
    let headers = |n: usize, len: usize| -> Vec<(String, String)> {
        (0..n)
            .map(|i| (format!("x-extra-{i}"), "v".repeat(len)))
            .collect()
    };

    // Within both limits: 2 + 18 headers, about 2 KiB.
    assert_eq!(
        raw_status(router.addr, request(&path, &headers(18, 100))).await,
        200
    );
    assert_eq!(up.count(), 1);

    // 2 + 38 headers, each small: over `max_headers` (hyper's default allows 100).
    assert_eq!(
        raw_status(router.addr, request(&path, &headers(38, 10))).await,
        431
    );
    // One 20 KiB header: over `max_header_bytes` (hyper's default buffer is ~400 KiB).
    assert_eq!(
        raw_status(router.addr, request(&path, &headers(1, 20 << 10))).await,
        431
    );
    assert_eq!(up.count(), 1, "a refused request reached the upstream");

    // The router goes on serving.
    assert_eq!(
        raw_status(router.addr, request(&path, &headers(18, 100))).await,
        200
    );
    let resp = client()
        .get(router.url(&path))
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 200);
    assert_eq!(up.count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_whose_upstreams_all_fail_answers_503_despite_the_ejection_cap() {
    let healthy = Upstream::start("healthy").await;
    // Two upstreams that refuse connections; the cap (50 %) alone would keep one in rotation.
    let dead = [url(free_port()), url(free_port())];
    let router = Router::start(
        &config(5000)
            .extra("health: { eject_after: 2, ejection_ms: 5000, max_ejected_percent: 50 }")
            .yaml(),
        &table(&dead, &[healthy.url()]),
    )
    .await;
    let http = client();
    let target = router.url(&format!("/o/{}", iuid_for(1)));
    let mut statuses = Vec::new();
    for _ in 0..10 {
        statuses.push(
            http.get(&target)
                .send()
                .await
                .expect("answer")
                .status()
                .as_u16(),
        );
    }
    assert!(
        statuses.iter().all(|s| *s == 502 || *s == 503),
        "dead upstreams give 502 then 503: {statuses:?}"
    );
    let last = http.get(&target).send().await.expect("answer");
    assert_eq!(last.status(), 503, "both upstreams ejected: {statuses:?}");
    assert!(last.headers().contains_key("retry-after"));
    // The other region is untouched.
    let other = http
        .get(router.url(&format!("/o/{}", iuid_for(2))))
        .send()
        .await
        .expect("answer");
    assert_eq!(other.status(), 200);
}
