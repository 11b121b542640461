//! Request heads a strict parser rejects are refused here too, never forwarded (issue 29's
//! differential review, on the hyper engine): `chunked` applied twice, and a request target
//! with raw bytes outside US-ASCII; and upstream answers that cannot be relayed as they are
//! (an unsolicited 101, broken chunked framing) are 502. Raw bytes over loopback.

mod common;

use std::io::{Read, Write};

use common::{iuid_for, lettered_table, orders_config, Router, Upstream};

async fn raw(router: &Router, request: Vec<u8>) -> String {
    common::raw_http(router.addr, request).await
}

async fn world() -> (Router, Upstream) {
    let upstream = Upstream::start("a").await;
    let table = lettered_table("framing", &[&[upstream.url()]]);
    let router = Router::start(&orders_config().yaml(), &table).await;
    (router, upstream)
}

/// RFC 9112 §6.1: chunked must not be applied more than once, whether in two lines or in two
/// entries of one; either is 400 and nothing reaches the upstream.
#[tokio::test]
async fn chunked_twice_is_400_and_not_forwarded() {
    let (router, upstream) = world().await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    for te in [
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked, chunked\r\n",
    ] {
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: t\r\n{te}Connection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
        );
        let answer = raw(&router, request.into_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{te:?}: {answer}");
        assert!(answer.contains("bad-body-framing"), "{answer}");
    }
    assert_eq!(upstream.count(), 0, "nothing was forwarded");
    // One chunked line is the usual framing and is forwarded with its body.
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    );
    let answer = raw(&router, request.into_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(&upstream.last().body[..], b"hello");
}

/// A target with raw non-ASCII bytes (`GET /δ¶/δt/pope`) is 400, as strict parsers (h11,
/// llhttp) answer; its percent-encoded form is routed as usual.
#[tokio::test]
async fn a_raw_non_ascii_target_is_400_and_not_forwarded() {
    let (router, upstream) = world().await;
    let id = iuid_for(1);
    let request =
        format!("GET /v1/orders/{id}/δ¶/δt/pope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let answer = raw(&router, request.into_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("invalid-target"), "{answer}");
    assert_eq!(upstream.count(), 0);
    let request = format!(
        "GET /v1/orders/{id}/%CE%B4%C2%B6/pope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    );
    let answer = raw(&router, request.into_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        upstream.last().target,
        format!("/v1/orders/{id}/%CE%B4%C2%B6/pope")
    );
}

/// An upstream that answers `101 Switching Protocols` to a request that asked for no upgrade
/// (RFC 9110 §15.2.2) gets 502 sent to the client, and the error counts against it; nothing
/// of its 101 reaches the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsolicited_101_is_502_and_counted_against_the_upstream() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let upstream = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: x-private\r\n\r\nswitched")
                    .await;
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            });
        }
    });
    let table = lettered_table("switch", &[&[common::url(upstream)]]);
    let router = Router::start(&orders_config().yaml(), &table).await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let before = router
        .metric("iuid_router_upstream_errors_total", &["region=\"a\""])
        .await;
    let answer = raw(
        &router,
        format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").into_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(answer.contains("bad-gateway"), "{answer}");
    assert!(!answer.contains("switched"), "{answer}");
    let after = router
        .metric("iuid_router_upstream_errors_total", &["region=\"a\""])
        .await;
    assert_eq!(after, before + 1.0, "counted against the upstream");
}

/// A body goes upstream with its framing whatever the method (search APIs send a GET with a
/// body): a GET with a chunked body arrives with it, and one whose chunked body turns out
/// malformed is not completed upstream as a bare GET: the client gets 400.
#[tokio::test]
async fn a_get_with_a_chunked_body_keeps_it_and_a_malformed_one_is_400() {
    let (router, upstream) = world().await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    );
    let answer = raw(&router, request.into_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let got = upstream.last();
    assert_eq!(got.method, "GET");
    assert_eq!(&got.body[..], b"hello");

    for bad in ["5\r\nhello\r\nzz\r\n", "5\r\nhello\r\n0_2e\r\n\r\n"] {
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{bad}"
        );
        let answer = raw(&router, request.into_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{bad:?}: {answer}");
    }
}

/// One region per upstream, named after the test so its metrics are its own (the recorder is
/// process-wide); country `k + 1` belongs to the `k`th.
fn named_table(regions: &[(&str, String)]) -> String {
    let mut text = format!(
        "version: framing\ndefault_region: {}\nregions:\n",
        regions[0].0
    );
    for (name, url) in regions {
        text.push_str(&format!("  {name}: {{ upstreams: [\"{url}\"] }}\n"));
    }
    text.push_str("countries:\n");
    for (k, (name, _)) in regions.iter().enumerate() {
        text.push_str(&format!("  {}: {name}\n", k + 1));
    }
    text
}

/// An upstream answer whose chunked framing is broken in what arrived with its head (a chunk
/// size that is not hex, `0x2`, `+2`; `Transfer-Encoding: ,chunked` beside a `Content-Length`
/// body) is 502 problem+json while nothing of it has gone to the client, counted against the
/// upstream, and the router goes on serving. Valid chunked answers, whole or empty, pass.
#[tokio::test]
async fn a_broken_chunked_answer_is_502_and_counted_against_the_upstream() {
    use std::time::Duration;
    let good = Upstream::start("good").await;
    let broken: [&'static [u8]; 4] = [
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2zz\r\nhi\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\nhi\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+2\r\nhi\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: ,chunked\r\nContent-Length: 2\r\n\r\nhi",
    ];
    let good_path = format!("/v1/orders/{}", iuid_for(2));
    let region = "region=\"framing_broken\"";
    for answer in broken {
        let upstream = common::scripted_upstream(&[answer], Duration::ZERO).await;
        let table = named_table(&[
            ("framing_broken", common::url(upstream)),
            ("framing_good", good.url()),
        ]);
        let router = Router::start(&orders_config().yaml(), &table).await;
        let what = String::from_utf8_lossy(answer);
        let before = router
            .metric("iuid_router_upstream_errors_total", &[region])
            .await;
        let path = format!("/v1/orders/{}", iuid_for(1));
        let got = raw(
            &router,
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").into_bytes(),
        )
        .await;
        assert!(got.starts_with("HTTP/1.1 502"), "{what:?}: {got:?}");
        assert!(got.contains("application/problem+json"), "{got}");
        assert!(got.contains("bad-gateway"), "{got}");
        assert!(!got.contains("hi"), "nothing of the body relayed: {got}");
        let after = router
            .metric("iuid_router_upstream_errors_total", &[region])
            .await;
        assert_eq!(
            after,
            before + 1.0,
            "{what:?}: counted against the upstream"
        );
        let resp = common::client()
            .get(router.url(&good_path))
            .send()
            .await
            .expect("the router still answers");
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.text().await.expect("body"), "good");
    }
    let valid: [(&'static [u8], &str); 3] = [
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n",
            "hi",
        ),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            "",
        ),
        // Its first frame is the trailers.
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nx-sum: 7\r\n\r\n",
            "",
        ),
    ];
    for (answer, body) in valid {
        let upstream = common::scripted_upstream(&[answer], Duration::ZERO).await;
        let table = named_table(&[("framing_valid", common::url(upstream))]);
        let router = Router::start(&orders_config().yaml(), &table).await;
        let path = format!("/v1/orders/{}", iuid_for(1));
        let resp = common::client()
            .get(router.url(&path))
            .send()
            .await
            .expect("response");
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.text().await.expect("the whole body"), body);
    }
}

/// The first chunk is looked for only as far as it has already arrived: a chunked answer
/// whose first chunk comes 300 ms after its head (a stream, server-sent events) has its head
/// relayed at once, not held until the chunk.
#[tokio::test]
async fn a_slow_first_chunk_does_not_hold_the_head() {
    use std::time::{Duration, Instant};
    const PAUSE: Duration = Duration::from_millis(300);
    let upstream = common::scripted_upstream(
        &[
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"2\r\nhi\r\n0\r\n\r\n",
        ],
        PAUSE,
    )
    .await;
    let table = named_table(&[("framing_slow", common::url(upstream))]);
    let router = Router::start(&orders_config().yaml(), &table).await;
    let addr = router.addr;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let (head_after, whole) = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let sent = Instant::now();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .expect("write");
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        let mut head_after = None;
        loop {
            match s.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
            if head_after.is_none() && out.windows(4).any(|w| w == b"\r\n\r\n") {
                head_after = Some(sent.elapsed());
            }
        }
        (head_after, String::from_utf8_lossy(&out).into_owned())
    })
    .await
    .expect("join");
    assert!(whole.starts_with("HTTP/1.1 200"), "{whole}");
    assert!(whole.ends_with("2\r\nhi\r\n0\r\n\r\n"), "{whole:?}");
    // The upstream sends the chunk PAUSE after it has the request: a head read sooner than
    // that was relayed before the chunk existed.
    let head_after = head_after.expect("a head");
    assert!(head_after < PAUSE, "the head took {head_after:?}");
}

/// The connection that carried a broken chunked answer is not used again, even when the
/// upstream keeps it open: the next request goes on a new one (and is 502 again here).
#[tokio::test]
async fn a_broken_chunked_answers_connection_is_not_reused() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let upstream = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                loop {
                    // One answer per request head, the connection kept open.
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    let answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2zz\r\nhi\r\n0\r\n\r\n";
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    let table = named_table(&[("framing_reuse", common::url(upstream))]);
    let router = Router::start(&orders_config().yaml(), &table).await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    for _ in 0..2 {
        let got = raw(
            &router,
            format!("GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n").into_bytes(),
        )
        .await;
        assert!(got.starts_with("HTTP/1.1 502"), "{got}");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "one connection per answer"
    );
}
