//! Owners learned from the regions (docs/failover.md "Owners learned from the regions"), over
//! every protocol the router serves: HTTP/1.1 on the own engine's head path and bridged to the
//! shared phases (an absolute-form target), h2c, TLS h2, HTTP/3 (aioquic) and gRPC.
//!
//! Region `a`'s upstream answers `421 Misdirected Request` with `X-Iuid-Owner: b` for the ids a
//! test names; region `b`'s is a normal one (or answers `421` too, when told). Shown:
//!
//! - a GET and a small POST whose first answer is that `421` are answered by `b`, and the next
//!   request for the same id goes straight to `b` (`a` sees only the first);
//! - `b` answering `421` as well, an owner the table does not know, no `X-Iuid-Owner` at all, or
//!   a body streamed because it is over `retries.buffer_bytes`: 502
//!   `urn:iuid-router:problem:misdirected`, nothing sent again;
//! - `iuid_router_owner_hints_total{from="a",to="b"}` counts the hints followed, and only those;
//! - a client's own `X-Iuid-Owner` never reaches an upstream and changes nothing;
//! - a gRPC call is followed the same way, and gets `grpc-status: 14` (UNAVAILABLE, gRPC's code
//!   for the 502, `problem/grpc.rs`) where a request gets 502;
//! - the owners learned are the owner cache's (`legacy_cache`: bounded, `ttl_s`), by the id's
//!   value whatever its spelling, over every protocol; with no cache each hint is still followed;
//! - a hint is followed whatever the retry budget (it is not a retry of a failure), also for a
//!   burst of them under the default budget.

mod common;

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{
    lettered_table, metric_sum, metrics_text, orders_config, ConfigYaml, Received, Router,
};
use http::{HeaderValue, StatusCode};
use http_body_util::{BodyExt, Either, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

const HINTS: &str = "iuid_router_owner_hints_total";
const MISDIRECTED: &str = "urn:iuid-router:problem:misdirected";
/// `retries.buffer_bytes` of these routers: a body over it streams (is not held).
const BUFFER_BYTES: usize = 1024;

/// The tests of this file one at a time: the counters are the process's.
async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    LOCK.lock().await
}

/// What a [`Regional`] upstream answers a request naming an id it was told about.
#[derive(Debug, Clone, Copy)]
enum Misdirect {
    /// `421` with `X-Iuid-Owner: <region>`.
    To(&'static str),
    /// `421` with no `X-Iuid-Owner`.
    Nowhere,
}

type AnswerBody = Either<
    Full<Bytes>,
    StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>,
>;

/// A region's upstream over HTTP/1.1 and h2c (prior knowledge): it reads each request whole,
/// records it, and answers `421` for the ids it was told ([`Regional::misdirect`]); any other
/// request gets `200` with its name as the body (a gRPC one: one message, then trailers
/// `grpc-status: 0` and `x-served-by: <name>`). Every answer carries `x-upstream: <name>`.
#[derive(Clone)]
struct Regional {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    rules: Arc<Mutex<Vec<(String, Misdirect)>>>,
}

impl Regional {
    async fn start(name: &'static str) -> Regional {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let rules: Arc<Mutex<Vec<(String, Misdirect)>>> = Arc::default();
        let (log, told) = (received.clone(), rules.clone());
        let service = service_fn(move |req: hyper::Request<Incoming>| {
            let (log, told) = (log.clone(), told.clone());
            async move {
                let (parts, body) = req.into_parts();
                let body = body
                    .collect()
                    .await
                    .map(|b| b.to_bytes())
                    .unwrap_or_default();
                let target = parts
                    .uri
                    .path_and_query()
                    .map(|pq| pq.as_str().to_owned())
                    .unwrap_or_default();
                let names = |id: &str| {
                    target.contains(id)
                        || parts
                            .headers
                            .values()
                            .any(|v| v.as_bytes() == id.as_bytes())
                };
                let rule = told
                    .lock()
                    .expect("rules")
                    .iter()
                    .find(|(id, _)| names(id))
                    .map(|(_, m)| *m);
                let grpc = parts
                    .headers
                    .get("content-type")
                    .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
                log.lock().expect("log").push(Received {
                    method: parts.method.to_string(),
                    target,
                    headers: parts.headers,
                    body,
                });
                Ok::<_, Infallible>(answer(name, rule, grpc))
            }
        });
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let service = service.clone();
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Regional {
            addr,
            received,
            rules,
        }
    }

    fn url(&self) -> String {
        common::url(self.addr)
    }

    /// From now on, requests naming `id` (in the target or as a field's value) get `how`.
    fn misdirect(&self, id: &str, how: Misdirect) {
        self.rules.lock().expect("rules").push((id.to_owned(), how));
    }

    /// The requests that named `id`, in order.
    fn seen(&self, id: &str) -> Vec<Received> {
        self.received
            .lock()
            .expect("log")
            .iter()
            .filter(|r| {
                r.target.contains(id) || r.headers.values().any(|v| v.as_bytes() == id.as_bytes())
            })
            .cloned()
            .collect()
    }
}

/// What a [`Regional`] named `name` answers: `rule`'s `421`, else `200` (gRPC-style if `grpc`).
fn answer(name: &'static str, rule: Option<Misdirect>, grpc: bool) -> hyper::Response<AnswerBody> {
    let mut resp = match rule {
        Some(how) => {
            let mut resp =
                hyper::Response::new(Either::Left(Full::new(Bytes::from_static(b"misdirected"))));
            *resp.status_mut() = StatusCode::MISDIRECTED_REQUEST;
            if let Misdirect::To(owner) = how {
                resp.headers_mut()
                    .insert("x-iuid-owner", HeaderValue::from_static(owner));
            }
            resp
        }
        None if grpc => {
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            trailers.insert("x-served-by", HeaderValue::from_static(name));
            let frames = vec![
                Ok(Frame::data(common::grpc::frame(
                    format!("from {name}").as_bytes(),
                ))),
                Ok(Frame::trailers(trailers)),
            ];
            let mut resp = hyper::Response::new(Either::Right(StreamBody::new(
                futures_util::stream::iter(frames),
            )));
            resp.headers_mut()
                .insert("content-type", HeaderValue::from_static("application/grpc"));
            resp
        }
        None => hyper::Response::new(Either::Left(Full::new(Bytes::from_static(name.as_bytes())))),
    };
    resp.headers_mut()
        .insert("x-upstream", HeaderValue::from_static(name));
    resp
}

/// How a request reaches the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proto {
    /// HTTP/1.1 on the own engine's head path (an origin-form target).
    Head,
    /// HTTP/1.1 handed to the shared phases: an absolute-form target.
    Bridged,
    /// HTTP/2 prior knowledge over plain TCP.
    H2c,
    /// HTTP/2 over TLS (ALPN `h2`).
    TlsH2,
    /// HTTP/3 over QUIC, aioquic's client (`tests/h3_py/client.py`), with `http3:` on.
    H3,
}

/// An answer as the client got it: names lowercased, the first value of each.
#[derive(Debug)]
struct Answer {
    status: u16,
    headers: HashMap<String, String>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

/// Region `a` (country 1) and `b` (country 2), each on a [`Regional`], behind a router that
/// holds bodies up to [`BUFFER_BYTES`] and remembers owners (`legacy_cache`), with TLS (and
/// HTTP/3) when `proto` needs them.
struct World {
    router: Router,
    a: Regional,
    b: Regional,
    certs: Option<tempfile::TempDir>,
    proto: Proto,
}

/// The config lines every router here has besides its routes.
fn hint_lines() -> String {
    format!(
        "retries: {{ buffer_bytes: {BUFFER_BYTES} }}\nlegacy_cache: {{ entries: 1000, ttl_s: 600 }}\n"
    )
}

impl World {
    async fn start(proto: Proto) -> World {
        World::start_with(proto, &hint_lines()).await
    }

    /// [`World::start`] with `lines` in place of [`hint_lines`].
    async fn start_with(proto: Proto, lines: &str) -> World {
        let (a, b) = (Regional::start("a").await, Regional::start("b").await);
        let table = lettered_table("hints", &[&[a.url()], &[b.url()]]);
        let mut config = orders_config().extra(lines);
        let certs = match proto {
            Proto::TlsH2 | Proto::H3 => {
                let certs = tempfile::tempdir().expect("certs");
                common::make_certs(certs.path(), false, &["localhost"]);
                config = config.extra(&common::tls_lines(certs.path()));
                if proto == Proto::H3 {
                    config = config.extra("http3: {}\n");
                }
                Some(certs)
            }
            _ => None,
        };
        let router = Router::start(&config.yaml(), &table).await;
        World {
            router,
            a,
            b,
            certs,
            proto,
        }
    }

    /// `iuid_router_owner_hints_total{from="a",to="b"}`.
    async fn hints(&self) -> f64 {
        hints_a_to_b(&self.router).await
    }

    /// `method` of the order `id` with `fields` and `body` (a `Content-Length` with any body).
    async fn send(&self, method: &str, id: &str, fields: &[(&str, &str)], body: &[u8]) -> Answer {
        self.send_as(self.proto, method, id, fields, body).await
    }

    /// [`World::send`] over `proto` (one this world's router serves).
    async fn send_as(
        &self,
        proto: Proto,
        method: &str,
        id: &str,
        fields: &[(&str, &str)],
        body: &[u8],
    ) -> Answer {
        let path = format!("/v1/orders/{id}");
        let addr = self.router.addr;
        let length = body.len().to_string();
        let mut fields: Vec<(&str, &str)> = fields.to_vec();
        if !body.is_empty() {
            fields.push(("content-length", &length));
        }
        match proto {
            Proto::Head => h1(addr, method, &path, &fields, body).await,
            Proto::Bridged => {
                h1(addr, method, &format!("http://{addr}{path}"), &fields, body).await
            }
            Proto::H2c | Proto::TlsH2 => {
                let (uri, io): (String, Box<dyn IoStream>) = match proto {
                    Proto::TlsH2 => (
                        format!("https://localhost:{}{path}", addr.port()),
                        Box::new(common::tls_to_localhost(addr, self.certs(), b"h2").await),
                    ),
                    _ => (
                        self.router.url(&path),
                        Box::new(tokio::net::TcpStream::connect(addr).await.expect("connect")),
                    ),
                };
                let (mut sender, conn) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
                        .await
                        .expect("h2 handshake");
                tokio::spawn(conn);
                let mut req = http::Request::builder().method(method).uri(uri);
                for (name, value) in &fields {
                    req = req.header(*name, *value);
                }
                let req = req
                    .body(Full::new(Bytes::copy_from_slice(body)))
                    .expect("request");
                let resp = sender.send_request(req).await.expect("response");
                let status = resp.status().as_u16();
                let headers = first_values(resp.headers());
                let body = resp.into_body().collect().await.expect("body").to_bytes();
                Answer {
                    status,
                    headers,
                    body: String::from_utf8_lossy(&body).into_owned(),
                }
            }
            Proto::H3 => {
                let headers: serde_json::Map<String, serde_json::Value> = fields
                    .iter()
                    .map(|(n, v)| ((*n).to_owned(), serde_json::json!(v)))
                    .collect();
                let mut step = serde_json::json!({
                    "op": "request", "method": method, "path": path, "headers": headers,
                });
                if !body.is_empty() {
                    step["body"] = serde_json::json!(String::from_utf8_lossy(body));
                }
                let plan = common::h3::plan(addr.port(), self.certs(), serde_json::json!([step]));
                let out = common::h3::run(plan).await;
                let got = &out["results"][0];
                let headers = got["headers"]
                    .as_object()
                    .map(|h| {
                        h.iter()
                            .map(|(n, v)| {
                                (n.to_ascii_lowercase(), v.as_str().unwrap_or("").to_owned())
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                Answer {
                    status: got["status"].as_u64().unwrap_or(0) as u16,
                    headers,
                    body: got["body"].as_str().unwrap_or("").to_owned(),
                }
            }
        }
    }

    fn certs(&self) -> &std::path::Path {
        self.certs.as_ref().expect("TLS certificates").path()
    }
}

trait IoStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> IoStream for T {}

fn first_values(headers: &http::HeaderMap) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for (name, value) in headers {
        out.entry(name.as_str().to_owned())
            .or_insert_with(|| String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    out
}

/// HTTP/1.1 on a new connection (`Connection: close`): `method target` with `fields` and `body`.
async fn h1(
    addr: SocketAddr,
    method: &str,
    target: &str,
    fields: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    let mut request =
        format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n").into_bytes();
    for (name, value) in fields {
        request.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    request.extend_from_slice(b"\r\n");
    request.extend_from_slice(body);
    let answer = common::raw_http(addr, request).await;
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no answer to {method} {target}: {answer:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.get(9..12))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status: {answer:?}"));
    let mut headers = HashMap::new();
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            headers
                .entry(name.trim().to_ascii_lowercase())
                .or_insert_with(|| value.trim().to_owned());
        }
    }
    Answer {
        status,
        headers,
        body: body.to_owned(),
    }
}

async fn hints_a_to_b(router: &Router) -> f64 {
    metric_sum(
        &metrics_text(router.admin).await,
        HINTS,
        &["from=\"a\"", "to=\"b\""],
    )
}

/// An order of region `a` (country 1), told apart by `n`.
fn order_of_a(n: u64) -> String {
    common::iuid(common::MINTED_MS, 1, 1, n)
}

/// Asserts a 502 `misdirected` answer.
fn assert_misdirected(proto: Proto, what: &str, got: &Answer) {
    assert_eq!(got.status, 502, "{proto:?} {what}: {got:?}");
    assert!(
        got.body.contains(MISDIRECTED),
        "{proto:?} {what}: not `misdirected`: {got:?}"
    );
}

/// Every case of the file's header over `w.proto`.
async fn hints_are_followed_once(w: &World) {
    let p = w.proto;
    let start = w.hints().await;
    let (a, b) = (&w.a, &w.b);

    // A read of an entity `a` does not own: `b` answers it, and owns it from then on.
    let id = order_of_a(101);
    a.misdirect(&id, Misdirect::To("b"));
    let got = w.send("GET", &id, &[], b"").await;
    assert_eq!(
        (got.status, got.body.as_str()),
        (200, "b"),
        "{p:?} GET: {got:?}"
    );
    assert_eq!(got.header("x-upstream"), Some("b"), "{p:?} GET");
    assert_eq!(
        (a.seen(&id).len(), b.seen(&id).len()),
        (1, 1),
        "{p:?} GET: asked a, then b"
    );
    let at_b = b.seen(&id).remove(0);
    assert_eq!(at_b.method, "GET", "{p:?}");
    assert_eq!(at_b.target, format!("/v1/orders/{id}"), "{p:?}");
    assert!(
        at_b.headers.get("x-iuid-owner").is_none(),
        "{p:?}: the hint is the router's"
    );
    assert_eq!(w.hints().await - start, 1.0, "{p:?}: the hint counted");
    let again = w.send("GET", &id, &[], b"").await;
    assert_eq!(
        (again.status, again.body.as_str()),
        (200, "b"),
        "{p:?} GET again: {again:?}"
    );
    assert_eq!(
        (a.seen(&id).len(), b.seen(&id).len()),
        (1, 2),
        "{p:?}: the owner was remembered: straight to b"
    );
    assert_eq!(
        w.hints().await - start,
        1.0,
        "{p:?}: no hint followed the second time"
    );

    // A small write, held: the same, its body sent twice.
    let id = order_of_a(102);
    a.misdirect(&id, Misdirect::To("b"));
    let got = w.send("POST", &id, &[], b"qty=2").await;
    assert_eq!(
        (got.status, got.body.as_str()),
        (200, "b"),
        "{p:?} POST: {got:?}"
    );
    let (at_a, at_b) = (a.seen(&id), b.seen(&id));
    assert_eq!(
        (at_a.len(), at_b.len()),
        (1, 1),
        "{p:?} POST: asked a, then b"
    );
    assert_eq!(at_a[0].body, "qty=2", "{p:?} POST at a");
    assert_eq!(
        (at_b[0].method.as_str(), &at_b[0].body[..]),
        ("POST", &b"qty=2"[..]),
        "{p:?} POST at b"
    );
    let again = w.send("POST", &id, &[], b"qty=3").await;
    assert_eq!(
        (again.status, again.body.as_str()),
        (200, "b"),
        "{p:?} POST again: {again:?}"
    );
    assert_eq!(
        (a.seen(&id).len(), b.seen(&id).len()),
        (1, 2),
        "{p:?} POST again: straight to b"
    );
    assert_eq!(w.hints().await - start, 2.0, "{p:?}");

    // The owner says it is not the owner either: 502, `b` asked once.
    let id = order_of_a(103);
    a.misdirect(&id, Misdirect::To("b"));
    b.misdirect(&id, Misdirect::To("a"));
    let got = w.send("GET", &id, &[], b"").await;
    assert_misdirected(p, "a second 421", &got);
    assert_eq!(
        (a.seen(&id).len(), b.seen(&id).len()),
        (1, 1),
        "{p:?}: a second 421 is not followed"
    );
    assert_eq!(
        w.hints().await - start,
        3.0,
        "{p:?}: the first hint was followed"
    );

    // An owner the table does not know, and none named: 502, nothing sent again.
    for (n, how, what) in [
        (104, Misdirect::To("zz"), "an unknown owner"),
        (105, Misdirect::Nowhere, "no X-Iuid-Owner"),
    ] {
        let id = order_of_a(n);
        a.misdirect(&id, how);
        let got = w.send("GET", &id, &[], b"").await;
        assert_misdirected(p, what, &got);
        assert_eq!(
            (a.seen(&id).len(), b.seen(&id).len()),
            (1, 0),
            "{p:?} {what}"
        );
        let got = w.send("POST", &id, &[], b"qty=1").await;
        assert_misdirected(p, what, &got);
        assert_eq!(
            (a.seen(&id).len(), b.seen(&id).len()),
            (2, 0),
            "{p:?} {what} (POST)"
        );
    }
    assert_eq!(
        w.hints().await - start,
        3.0,
        "{p:?}: none of those followed"
    );

    // A body over `retries.buffer_bytes` streams: it cannot be sent again.
    let id = order_of_a(106);
    a.misdirect(&id, Misdirect::To("b"));
    let big = vec![b'x'; 4 * BUFFER_BYTES];
    let got = w.send("POST", &id, &[], &big).await;
    assert_misdirected(p, "a streamed body", &got);
    let at_a = a.seen(&id);
    assert_eq!(
        (at_a.len(), b.seen(&id).len()),
        (1, 0),
        "{p:?}: a streamed body is sent once"
    );
    assert_eq!(at_a[0].body.len(), big.len(), "{p:?}: all of it went to a");
    assert_eq!(
        w.hints().await - start,
        3.0,
        "{p:?}: a streamed body's hint is not followed"
    );

    // A client's `X-Iuid-Owner` is not passed on, and sends nothing anywhere.
    let id = order_of_a(107);
    let got = w.send("GET", &id, &[("x-iuid-owner", "b")], b"").await;
    assert_eq!(
        (got.status, got.body.as_str()),
        (200, "a"),
        "{p:?} a client's X-Iuid-Owner: {got:?}"
    );
    let at_a = a.seen(&id);
    assert_eq!((at_a.len(), b.seen(&id).len()), (1, 0), "{p:?}");
    assert!(
        at_a[0].headers.get("x-iuid-owner").is_none(),
        "{p:?}: a client's X-Iuid-Owner was passed on"
    );
    // Nor does it overrule the region's hint.
    let id = order_of_a(108);
    a.misdirect(&id, Misdirect::To("b"));
    let got = w.send("GET", &id, &[("x-iuid-owner", "zz")], b"").await;
    assert_eq!(
        (got.status, got.body.as_str()),
        (200, "b"),
        "{p:?}: {got:?}"
    );
    let (at_a, at_b) = (a.seen(&id), b.seen(&id));
    assert_eq!((at_a.len(), at_b.len()), (1, 1), "{p:?}");
    assert!(
        at_a[0].headers.get("x-iuid-owner").is_none()
            && at_b[0].headers.get("x-iuid-owner").is_none(),
        "{p:?}: a client's X-Iuid-Owner was passed on"
    );
    assert_eq!(
        w.hints().await - start,
        4.0,
        "{p:?}: the followed hints, counted once each"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_over_http1_head_path() {
    let _serial = serial().await;
    hints_are_followed_once(&World::start(Proto::Head).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_over_http1_bridged() {
    let _serial = serial().await;
    let w = World::start(Proto::Bridged).await;
    let before = w
        .router
        .metric("iuid_router_http1_shared_phases_total", &[])
        .await;
    hints_are_followed_once(&w).await;
    let after = w
        .router
        .metric("iuid_router_http1_shared_phases_total", &[])
        .await;
    assert!(
        after > before,
        "the bridged requests took the shared phases"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_over_h2c() {
    let _serial = serial().await;
    hints_are_followed_once(&World::start(Proto::H2c).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hints_over_tls_h2() {
    let _serial = serial().await;
    hints_are_followed_once(&World::start(Proto::TlsH2).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn hints_over_h3() {
    let _serial = serial().await;
    hints_are_followed_once(&World::start(Proto::H3).await).await;
}

/// A unary gRPC call over h2c naming `id` in `x-entity-id`: its body held (a
/// `Content-Length`), or streamed (none). The HTTP status, the headers (a trailers-only
/// answer's status is there) and the trailers.
async fn grpc_call(
    router: &Router,
    id: &str,
    held: bool,
) -> (u16, http::HeaderMap, Option<http::HeaderMap>) {
    let tcp = tokio::net::TcpStream::connect(router.addr)
        .await
        .expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let message = common::grpc::frame(b"\x0a\x03abc");
    let mut req = http::Request::post(router.url("/orders.v1.Orders/GetOrder"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-entity-id", id);
    let body = if held {
        req = req.header("content-length", message.len());
        Either::Left(Full::new(message))
    } else {
        // No `Content-Length` (a stream of frames, as gRPC libraries send): streamed.
        let frames = vec![Ok::<_, Infallible>(Frame::data(message))];
        Either::Right(StreamBody::new(futures_util::stream::iter(frames)))
    };
    let resp = sender.send_request(req.body(body).expect("request")).await;
    let resp = resp.expect("response");
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let mut body = resp.into_body();
    let mut trailers = None;
    while let Some(frame) = body.frame().await {
        if let Ok(t) = frame.expect("frame").into_trailers() {
            trailers = Some(t);
        }
    }
    (status, headers, trailers)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_call_follows_the_hint_and_an_unfollowed_one_is_unavailable() {
    let _serial = serial().await;
    let (a, b) = (Regional::start("a").await, Regional::start("b").await);
    let table = format!(
        "version: grpc\nregions:\n  a: {{ upstreams: [\"{}\"], protocol: h2 }}\n  b: {{ upstreams: [\"{}\"], protocol: h2 }}\ncountries:\n  1: a\n  2: b\ndefault_region: a\n",
        a.url(),
        b.url()
    );
    let config = ConfigYaml::new()
        .route_header("x-entity-id")
        .timeouts(500, 2000, 10_000)
        .watch(false)
        .extra(&hint_lines())
        .yaml();
    let router = Router::start(&config, &table).await;
    let start = hints_a_to_b(&router).await;

    // Followed to `b`, which serves it; the next call goes straight there.
    let id = order_of_a(201);
    a.misdirect(&id, Misdirect::To("b"));
    let (status, headers, trailers) = grpc_call(&router, &id, true).await;
    assert_eq!(status, 200, "{headers:?}");
    let trailers = trailers.unwrap_or_else(|| panic!("no trailers: {headers:?}"));
    assert_eq!(trailers["grpc-status"], "0", "{trailers:?}");
    assert_eq!(trailers["x-served-by"], "b");
    assert_eq!((a.seen(&id).len(), b.seen(&id).len()), (1, 1));
    assert_eq!(b.seen(&id)[0].target, "/orders.v1.Orders/GetOrder");
    assert_eq!(hints_a_to_b(&router).await - start, 1.0);
    let (_, _, trailers) = grpc_call(&router, &id, true).await;
    assert_eq!(trailers.expect("trailers")["x-served-by"], "b");
    assert_eq!(
        (a.seen(&id).len(), b.seen(&id).len()),
        (1, 2),
        "straight to b"
    );

    // Not followed: UNAVAILABLE (502's code), trailers-only, nothing sent again.
    let cases = [
        (
            202,
            Misdirect::To("b"),
            Some(Misdirect::To("a")),
            true,
            "a second 421",
        ),
        (203, Misdirect::Nowhere, None, true, "no X-Iuid-Owner"),
        (204, Misdirect::To("zz"), None, true, "an unknown owner"),
        (205, Misdirect::To("b"), None, false, "a streamed body"),
    ];
    for (n, at_a, at_b, held, what) in cases {
        let id = order_of_a(n);
        a.misdirect(&id, at_a);
        if let Some(how) = at_b {
            b.misdirect(&id, how);
        }
        let (status, headers, trailers) = grpc_call(&router, &id, held).await;
        assert_eq!(status, 200, "{what}: {headers:?}");
        assert_eq!(
            headers
                .get("grpc-status")
                .map(|v| v.to_str().unwrap_or("?")),
            Some("14"),
            "{what}: UNAVAILABLE, trailers-only: {headers:?} {trailers:?}"
        );
        assert!(trailers.is_none(), "{what}: trailers-only");
        let asked_b = usize::from(at_b.is_some());
        assert_eq!(
            (a.seen(&id).len(), b.seen(&id).len()),
            (1, asked_b),
            "{what}"
        );
    }
    assert_eq!(
        hints_a_to_b(&router).await - start,
        2.0,
        "the hints followed: the first call's and the second 421's first"
    );
}

/// `GET /admin/resolve/<id>`'s `learned_owner`, if any.
async fn learned_owner(router: &Router, id: &str) -> Option<serde_json::Value> {
    let resolved = common::get_json(&router.admin_url(&format!("/admin/resolve/{id}"))).await;
    resolved.get("learned_owner").cloned()
}

/// The owners learned are kept in the owner cache (`legacy_cache`): the least recently used
/// forgotten first, each for `ttl_s`; by the id's value, whatever its spelling; learned over
/// one protocol, followed over any.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn learned_owners_are_bounded_expire_and_hold_for_every_spelling_and_protocol() {
    let _serial = serial().await;
    let lines = format!(
        "retries: {{ buffer_bytes: {BUFFER_BYTES} }}\nlegacy_cache: {{ entries: 1, ttl_s: 2 }}\n"
    );
    let w = World::start_with(Proto::Head, &lines).await;
    let (a, b) = (&w.a, &w.b);
    let (x, y) = (order_of_a(301), order_of_a(302));
    a.misdirect(&x, Misdirect::To("b"));
    a.misdirect(&y, Misdirect::To("b"));

    // Learned over h2c, followed on the head path and bridged.
    let got = w.send_as(Proto::H2c, "GET", &x, &[], b"").await;
    assert_eq!((got.status, got.body.as_str()), (200, "b"), "{got:?}");
    assert_eq!(
        learned_owner(&w.router, &x).await,
        Some(serde_json::json!({"region": "b", "source": "hint"}))
    );
    for proto in [Proto::Head, Proto::Bridged] {
        let got = w.send_as(proto, "GET", &x, &[], b"").await;
        assert_eq!((got.status, got.body.as_str()), (200, "b"), "{proto:?}");
    }
    assert_eq!((a.seen(&x).len(), b.seen(&x).len()), (1, 3), "learned once");

    // Another spelling of the same id (simple, upper case): the same owner.
    let simple = x.replace('-', "").to_ascii_uppercase();
    let got = w.send("GET", &simple, &[], b"").await;
    assert_eq!(
        (got.status, got.body.as_str()),
        (200, "b"),
        "{simple}: {got:?}"
    );
    assert_eq!(a.seen(&simple).len(), 0, "{simple}: straight to b");

    // One entry: learning `y` forgets `x`, which asks `a` again (and is learned again).
    let got = w.send("GET", &y, &[], b"").await;
    assert_eq!((got.status, got.body.as_str()), (200, "b"));
    assert_eq!(a.seen(&y).len(), 1);
    let got = w.send("GET", &x, &[], b"").await;
    assert_eq!((got.status, got.body.as_str()), (200, "b"));
    assert_eq!(a.seen(&x).len(), 2, "x was forgotten for y: a asked again");
    let got = w.send("GET", &x, &[], b"").await;
    assert_eq!((got.status, got.body.as_str()), (200, "b"));
    assert_eq!(a.seen(&x).len(), 2, "learned again");

    // After `ttl_s`, forgotten.
    tokio::time::sleep(std::time::Duration::from_millis(2100)).await;
    assert_eq!(learned_owner(&w.router, &x).await, None, "expired");
    let got = w.send("GET", &x, &[], b"").await;
    assert_eq!((got.status, got.body.as_str()), (200, "b"));
    assert_eq!(a.seen(&x).len(), 3, "expired: a asked again");
}

/// `legacy_cache: { entries: 0 }` keeps no owner, but each hint is still followed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_owner_cache_every_hint_is_still_followed() {
    let _serial = serial().await;
    let w = World::start_with(Proto::Head, "legacy_cache: { entries: 0 }\n").await;
    let start = w.hints().await;
    let id = order_of_a(401);
    w.a.misdirect(&id, Misdirect::To("b"));
    for n in 1..=2 {
        let got = w.send("GET", &id, &[], b"").await;
        assert_eq!((got.status, got.body.as_str()), (200, "b"), "{n}: {got:?}");
        assert_eq!((w.a.seen(&id).len(), w.b.seen(&id).len()), (n, n));
    }
    assert_eq!(w.hints().await - start, 2.0);
    assert_eq!(learned_owner(&w.router, &id).await, None);
}

/// A hint is not a retry of a failure: the upstream said it did nothing. With the retry budget
/// spent (here: none at all) the request is still sent to the owner, and in no case answered
/// as if its region were unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_is_followed_whatever_the_retry_budget() {
    let _serial = serial().await;
    let lines = "retries: { budget_percent: 0, min_per_second: 0 }\n";
    for proto in [Proto::Head, Proto::H2c] {
        let w = World::start_with(proto, lines).await;
        let id = order_of_a(501);
        w.a.misdirect(&id, Misdirect::To("b"));
        let got = w.send("GET", &id, &[], b"").await;
        assert_eq!(
            (got.status, got.body.as_str()),
            (200, "b"),
            "{proto:?}: a 421 with the retry budget spent: {got:?}"
        );
        assert_eq!(
            (w.a.seen(&id).len(), w.b.seen(&id).len()),
            (1, 1),
            "{proto:?}"
        );
    }
}

/// The same under the default retry budget (20 %, 10 a second): a burst of 421s, as when
/// a batch of entities moved before the tables said so, is followed for every request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_hints_is_followed_under_the_default_retry_budget() {
    let _serial = serial().await;
    let w = World::start_with(Proto::Head, "").await;
    let start = w.hints().await;
    let mut statuses = Vec::new();
    for n in 0..30 {
        let id = order_of_a(600 + n);
        w.a.misdirect(&id, Misdirect::To("b"));
        let got = w.send("GET", &id, &[], b"").await;
        statuses.push((got.status, w.b.seen(&id).len()));
    }
    let followed = statuses.iter().filter(|s| **s == (200, 1)).count();
    assert_eq!(followed, 30, "(status, asked b) per request: {statuses:?}");
    assert_eq!(w.hints().await - start, 30.0);
}
