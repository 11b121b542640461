//! The shared phases' exchange with an HTTP/1.1 upstream (`src/upstream/h1.rs`): what an
//! HTTP/2 client's request becomes on the upstream's socket, and how the answer comes back.
//! A raw upstream reads each request (head, then the body by its framing) and answers as
//! the test says, so that what crosses the wire is checked, not what a library makes of it.

mod common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{iuid_for, orders_config, Router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One request as the upstream read it: its head (field names as sent) and decoded body.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: Vec<u8>,
    chunked: bool,
}

/// What the upstream read: connections accepted, requests in order.
#[derive(Default)]
struct Log {
    connections: usize,
    requests: Vec<Seen>,
}

/// A keep-alive HTTP/1.1 upstream answering every request with `answer`; with `close`, it
/// closes the connection after writing it.
async fn upstream(answer: &'static [u8], close: bool) -> (SocketAddr, Arc<Mutex<Log>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let log: Arc<Mutex<Log>> = Arc::default();
    let shared = log.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            shared.lock().expect("log").connections += 1;
            let shared = shared.clone();
            tokio::spawn(async move {
                let mut conn = Conn {
                    stream,
                    buf: Vec::new(),
                };
                while let Some(seen) = conn.request().await {
                    shared.lock().expect("log").requests.push(seen);
                    if conn.stream.write_all(answer).await.is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    (addr, log)
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn more(&mut self) -> Option<()> {
        let mut chunk = [0u8; 16384];
        match self.stream.read(&mut chunk).await {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Some(())
            }
        }
    }

    /// Bytes up to and with the next `\r\n` (without it).
    async fn line(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(at) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.buf[..at].to_vec();
                self.buf.drain(..at + 2);
                return Some(line);
            }
            self.more().await?;
        }
    }

    async fn take(&mut self, n: usize) -> Option<Vec<u8>> {
        while self.buf.len() < n {
            self.more().await?;
        }
        Some(self.buf.drain(..n).collect())
    }

    async fn request(&mut self) -> Option<Seen> {
        let mut head = String::new();
        loop {
            let line = String::from_utf8(self.line().await?).ok()?;
            if line.is_empty() {
                break;
            }
            head += &line;
            head += "\n";
        }
        let field = |name: &str| {
            head.lines().find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
        };
        let chunked = field("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked"));
        let mut body = Vec::new();
        if chunked {
            loop {
                let size = String::from_utf8(self.line().await?).ok()?;
                let size = usize::from_str_radix(size.trim(), 16).ok()?;
                if size == 0 {
                    self.line().await?;
                    break;
                }
                body.extend(self.take(size).await?);
                self.line().await?;
            }
        } else if let Some(length) = field("content-length") {
            body = self.take(length.parse().ok()?).await?;
        }
        Some(Seen {
            head,
            body,
            chunked,
        })
    }
}

async fn router_to(upstream: SocketAddr) -> Router {
    let table = format!(
        "version: s\nregions:\n  eu: {{ upstreams: [\"http://{upstream}\"] }}\ncountries:\n  3: eu\ndefault_region: eu\n"
    );
    Router::start(&orders_config().yaml(), &table).await
}

fn h2c() -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("client")
}

#[tokio::test]
async fn http2_requests_go_upstream_in_origin_form_on_one_kept_connection() {
    let (addr, log) = upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false).await;
    let router = router_to(addr).await;
    let client = h2c();
    let path = format!("/v1/orders/{}", iuid_for(3));
    for _ in 0..5 {
        let resp = client.get(router.url(&path)).send().await.expect("send");
        assert_eq!(resp.version(), reqwest::Version::HTTP_2);
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.text().await.expect("body"), "ok");
    }
    let log = log.lock().expect("log");
    assert_eq!(
        log.connections, 1,
        "the upstream connection is pooled and used again"
    );
    assert_eq!(log.requests.len(), 5);
    let head = &log.requests[0].head;
    assert!(
        head.starts_with(&format!("GET {path} HTTP/1.1\n")),
        "origin form, HTTP/1.1: {head}"
    );
    assert!(
        head.to_ascii_lowercase()
            .contains(&format!("\nhost: {addr}\n")),
        "{head}"
    );
    assert!(
        !head.to_ascii_lowercase().contains("content-length"),
        "no body, no length: {head}"
    );
}

#[tokio::test]
async fn a_streamed_http2_upload_goes_chunked_and_a_chunked_answer_comes_back_decoded() {
    let answer = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n";
    let (addr, log) = upstream(answer, false).await;
    let router = router_to(addr).await;
    // Larger than `retries.buffer_bytes`, so it is streamed, not held; no length is sent.
    let piece = bytes::Bytes::from(vec![b'x'; 64 << 10]);
    let frames: Vec<Result<http_body::Frame<bytes::Bytes>, std::io::Error>> = (0..4)
        .map(|_| Ok(http_body::Frame::data(piece.clone())))
        .collect();
    let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
    let stream = TcpStream::connect(router.addr).await.expect("connect");
    let (mut h2, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .expect("h2c handshake");
    tokio::spawn(conn);
    let req = http::Request::post(format!("http://s/v1/orders/{}", iuid_for(3)))
        .body(body)
        .expect("request");
    let resp = h2.send_request(req).await.expect("send");
    assert_eq!(resp.status(), 200);
    let answer = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .expect("body")
        .to_bytes();
    assert_eq!(&answer[..], b"hello world");
    let log = log.lock().expect("log");
    let seen = &log.requests[0];
    assert!(
        seen.chunked,
        "a body of no known length goes chunked: {}",
        seen.head
    );
    assert_eq!(seen.body.len(), 4 * (64 << 10));
    assert!(seen.body.iter().all(|b| *b == b'x'));
}

#[tokio::test]
async fn an_answer_cut_midway_is_never_completed_and_its_connection_not_used_again() {
    let (addr, log) = upstream(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345", true).await;
    let router = router_to(addr).await;
    let client = h2c();
    let url = router.url(&format!("/v1/orders/{}", iuid_for(3)));
    // Twice: the second on a connection of its own (the upstream cuts every answer). The
    // stream is reset (RST_STREAM), with or without the head before it: never a short body
    // that ends as if whole.
    for _ in 0..2 {
        let got = tokio::time::timeout(Duration::from_secs(5), async {
            client.get(&url).send().await?.bytes().await
        })
        .await
        .expect("the cut is seen at once");
        assert!(
            got.is_err(),
            "a cut body ends in an error, not short: {got:?}"
        );
    }
    let log = log.lock().expect("log");
    assert_eq!(log.requests.len(), 2);
    assert_eq!(log.connections, 2, "the cut connection was not pooled");
}

/// An answer head of 80 fields, each `x-f<n>: v`.
fn answer_with_80_fields() -> &'static [u8] {
    let mut answer = String::from("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n");
    for n in 0..79 {
        answer += &format!("x-f{n}: v\r\n");
    }
    answer += "\r\nok";
    Box::leak(answer.into_boxed_str()).as_bytes()
}

/// The answer head's bounds are `limits.max_headers` on both HTTP/1.1 exchanges: an answer
/// of 80 fields is relayed under the default 100 and refused as the upstream's (502) under
/// `max_headers: 50`, whether the client spoke HTTP/1.1 (the head path) or h2c (the shared
/// phases, which held it to a fixed 100 before).
#[tokio::test]
async fn an_answer_heads_fields_are_bounded_by_max_headers_on_every_path() {
    let (up, _) = upstream(answer_with_80_fields(), false).await;
    let table = format!(
        "version: s\nregions:\n  eu: {{ upstreams: [\"http://{up}\"] }}\ncountries:\n  3: eu\ndefault_region: eu\n"
    );
    let path = format!("/v1/orders/{}", iuid_for(3));
    for (max_headers, want) in [(100, 200), (50, 502)] {
        let config = orders_config()
            .limits(&format!("max_headers: {max_headers}"))
            .yaml();
        let router = Router::start(&config, &table).await;
        for (proto, client) in [("HTTP/1.1", common::client()), ("h2c", h2c())] {
            let resp = client.get(router.url(&path)).send().await.expect("answer");
            assert_eq!(
                resp.status().as_u16(),
                want,
                "{proto}, max_headers {max_headers}"
            );
            if want == 200 {
                assert_eq!(resp.headers()["x-f78"], "v", "{proto}");
            }
        }
    }
}
