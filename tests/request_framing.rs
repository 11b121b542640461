//! Request heads a strict parser rejects are refused here too, never forwarded (issue 29's
//! differential review, on the hyper engine): `chunked` applied twice, and a request target
//! with raw bytes outside US-ASCII. Raw bytes over loopback.

mod common;

use std::io::{Read, Write};

use common::{iuid_for, lettered_table, orders_config, Router, Upstream};

async fn raw(router: &Router, request: Vec<u8>) -> String {
    let addr = router.addr;
    tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(&request).expect("write");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .expect("join")
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
