//! Issue 61, "One reading of a request", the readers of request bodies (docs/data-path.md:
//! "JSON bodies", "GraphQL requests", "A stalled body"): a body the upstream's parser could
//! read otherwise is refused (400 `ambiguous-json`, `ambiguous-graphql`) and reaches no
//! upstream, or it is routed by the reading every parser gives; a stalled body is 408 after
//! `idle_ms` once. Each case over every protocol it arrives by: HTTP/1.1 on the own engine's
//! head path and bridged to the shared phases (a chunked body), h2c, TLS h2 and HTTP/3.
//! Then the JSON reader against Python's `json` on a generated corpus.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{iuid_for, ConfigYaml, Router, Upstream};
use futures_util::StreamExt as _;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Proto {
    /// A `Content-Length` body on the own engine: the head path reads it.
    Head,
    /// A chunked body: the own engine hands it to the shared phases (`Proxy::handle`).
    Bridged,
    H2c,
    TlsH2,
    /// aioquic's HTTP/3 client (`tests/h3_py/client.py`).
    H3,
}

/// One request of a case.
struct Req<'a> {
    method: &'a str,
    /// Path and query.
    target: String,
    content_type: &'a str,
    body: String,
}

/// What came back: the status, who answered (`-`: the router), the problem's slug.
#[derive(Debug, PartialEq)]
struct Got {
    status: u16,
    by: String,
    problem: String,
}

fn got(status: u16, by: Option<&str>, body: &str) -> Got {
    let problem = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v["type"].as_str().map(str::to_owned))
        .map(|t| t.trim_start_matches("urn:iuid-router:problem:").to_owned())
        .unwrap_or_default();
    Got {
        status,
        by: by.unwrap_or("-").to_owned(),
        problem,
    }
}

/// The parts of an HTTP/1.1 answer read off the wire: status, `x-upstream`, body.
fn parse_h1(answer: &str) -> Got {
    let status = answer.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer, ""));
    let by = head.lines().find_map(|l| {
        l.to_ascii_lowercase()
            .strip_prefix("x-upstream: ")
            .map(str::to_owned)
    });
    got(status, by.as_deref(), body)
}

trait IoStream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> IoStream for T {}

/// An HTTP/2 connection to the router, plain (h2c prior knowledge) or TLS (ALPN `h2`); the
/// scheme and authority of its requests.
async fn h2<B>(
    proto: Proto,
    router: &Router,
    certs: &std::path::Path,
) -> (hyper::client::conn::http2::SendRequest<B>, String)
where
    B: hyper::body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (base, io): (String, Box<dyn IoStream>) = match proto {
        Proto::TlsH2 => (
            format!("https://localhost:{}", router.addr.port()),
            Box::new(common::tls_to_localhost(router.addr, certs, b"h2").await),
        ),
        _ => (
            format!("http://{}", router.addr),
            Box::new(
                tokio::net::TcpStream::connect(router.addr)
                    .await
                    .expect("connect"),
            ),
        ),
    };
    let (sender, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    (sender, base)
}

/// Sends `req` over `proto`.
async fn send(proto: Proto, router: &Router, certs: &std::path::Path, req: &Req<'_>) -> Got {
    let addr = router.addr;
    let Req {
        method,
        target,
        content_type,
        body,
    } = req;
    match proto {
        Proto::Head => {
            let request = format!(
                "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\n\
                 Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            parse_h1(&common::raw_http(addr, request.into_bytes()).await)
        }
        Proto::Bridged => {
            let chunks = match body.is_empty() {
                true => "0\r\n\r\n".to_owned(),
                false => format!("{:x}\r\n{body}\r\n0\r\n\r\n", body.len()),
            };
            let request = format!(
                "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\n\
                 Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{chunks}"
            );
            parse_h1(&common::raw_http(addr, request.into_bytes()).await)
        }
        Proto::H2c | Proto::TlsH2 => {
            let (mut sender, base) = h2(proto, router, certs).await;
            let req = http::Request::builder()
                .method(*method)
                .uri(format!("{base}{target}"))
                .header("content-type", *content_type)
                .body(Full::new(Bytes::from(body.clone())))
                .expect("request");
            let resp = sender.send_request(req).await.expect("response");
            let status = resp.status().as_u16();
            let by = resp
                .headers()
                .get("x-upstream")
                .map(|v| v.to_str().unwrap_or("?").to_owned());
            let bytes = resp.into_body().collect().await.expect("body").to_bytes();
            got(status, by.as_deref(), &String::from_utf8_lossy(&bytes))
        }
        Proto::H3 => {
            let mut step = json!({"op": "request", "method": method, "path": target,
                "headers": {"content-type": content_type}});
            if !body.is_empty() {
                step["body"] = json!(body);
            }
            let plan = common::h3::plan(addr.port(), certs, json!([step]));
            let out = common::h3::run(plan).await;
            let answer = &out["results"][0];
            got(
                answer["status"].as_u64().unwrap_or(0) as u16,
                answer["headers"]["x-upstream"].as_str(),
                answer["body"].as_str().unwrap_or(""),
            )
        }
    }
}

/// Three regions (countries 1 → ap, 2 → us, 3 → eu) and their upstreams; the router with
/// the body routes, nothing unrouted (a request no route reads is 404, not a quiet default),
/// `idle_ms` 1000.
struct World {
    router: Router,
    certs: tempfile::TempDir,
    eu: Upstream,
    us: Upstream,
    ap: Upstream,
}

/// The snowflake scheme `counters` (13 bits of shard, 50 of sequence): shards 0–4095 are
/// ap's, 4096–8191 us's. Its id 2^62 − 1 is shard 4095 (ap); the nearest double is 2^62,
/// shard 4096 (us).
const COUNTERS: &str = "schemes:\n  counters:\n    kind: snowflake\n    fields: [{ name: shard, bits: 13 }, { name: seq, bits: 50 }]\n    route_by: { field: shard }\n    map: { \"0-4095\": ap, \"4096-8191\": us }\n";
const BIG_AP: &str = "4611686018427387903";

async fn world(tls: bool, http3: bool) -> World {
    let certs = tempfile::tempdir().expect("certs");
    let (eu, us, ap) = (
        Upstream::start("eu").await,
        Upstream::start("us").await,
        Upstream::start("ap").await,
    );
    let mut config = ConfigYaml::new()
        .route("{ path: /v1/payments, json: /order_id }")
        .route("{ path: /v1/orders, json: /order/id }")
        .route("{ path: /v1/counters, json: /id, scheme: counters }")
        .route("{ path: /v1/counters-exact, json: /id, scheme: counters, json_numbers: exact }")
        .route_graphql("/graphql")
        .unrouted("reject")
        .timeouts(500, 5000, 1000)
        .watch(false);
    if tls {
        common::make_certs(certs.path(), false, &["localhost"]);
        config = config.extra(&common::tls_lines(certs.path()));
    }
    if http3 {
        config = config.extra("http3: {}\n");
    }
    let table = common::three_regions("v1", &eu.url(), &us.url(), &ap.url()) + COUNTERS;
    let router = Router::start(&config.yaml(), &table).await;
    World {
        router,
        certs,
        eu,
        us,
        ap,
    }
}

impl World {
    fn counts(&self) -> [usize; 3] {
        [self.eu.count(), self.us.count(), self.ap.count()]
    }
}

fn post<'a>(target: &str, content_type: &'a str, body: String) -> Req<'a> {
    Req {
        method: "POST",
        target: target.to_owned(),
        content_type,
        body,
    }
}

fn get_query(pairs: &[(&str, &str)]) -> Req<'static> {
    let mut q = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        q.append_pair(k, v);
    }
    Req {
        method: "GET",
        target: format!("/graphql?{}", q.finish()),
        content_type: "application/json",
        body: String::new(),
    }
}

fn node(id: &str) -> String {
    format!(r#"{{ node(id: "{id}") {{ id }} }}"#)
}

/// The cases: each request with what must come of it, `(status, by, problem)`.
fn cases() -> Vec<(
    &'static str,
    Req<'static>,
    (u16, &'static str, &'static str),
)> {
    const JSON: &str = "application/json";
    let (ap, us) = (iuid_for(1), iuid_for(2));
    let refused_json = (400, "-", "ambiguous-json");
    let refused_gql = (400, "-", "ambiguous-graphql");
    let hash = r#""extensions":{"persistedQuery":{"version":1,"sha256Hash":"abc"}}"#;
    let url_query = |doc: &str| {
        form_urlencoded::Serializer::new(String::new())
            .append_pair("query", doc)
            .finish()
    };
    vec![
        // JSON bodies: Python, JavaScript and Go read the last of duplicate members.
        (
            "json: the same member twice",
            post(
                "/v1/payments",
                JSON,
                format!(r#"{{"order_id":"{ap}","order_id":"{us}"}}"#),
            ),
            refused_json,
        ),
        (
            "json: the member twice, once escaped",
            post(
                "/v1/payments",
                JSON,
                format!(r#"{{"order_id":"{ap}","order\u005fid":"{us}"}}"#),
            ),
            refused_json,
        ),
        (
            "json: a first null",
            post(
                "/v1/payments",
                JSON,
                format!(r#"{{"order_id":null,"order_id":"{us}"}}"#),
            ),
            refused_json,
        ),
        (
            "json: the parent object twice",
            post(
                "/v1/orders",
                JSON,
                format!(r#"{{"order":{{"id":"{ap}"}},"order":{{"id":"{us}"}}}}"#),
            ),
            refused_json,
        ),
        (
            "json: duplicates off the pointer's path",
            post(
                "/v1/payments",
                JSON,
                format!(r#"{{"note":1,"note":2,"order_id":"{ap}"}}"#),
            ),
            (200, "ap", ""),
        ),
        (
            "json: an integer id beyond 2^53 (JavaScript reads us's shard)",
            post("/v1/counters", JSON, format!(r#"{{"id":{BIG_AP}}}"#)),
            refused_json,
        ),
        (
            "json: the same id on a route with json_numbers: exact",
            post("/v1/counters-exact", JSON, format!(r#"{{"id":{BIG_AP}}}"#)),
            (200, "ap", ""),
        ),
        (
            "json: the same id as a string",
            post("/v1/counters", JSON, format!(r#"{{"id":"{BIG_AP}"}}"#)),
            (200, "ap", ""),
        ),
        // GraphQL.
        (
            "graphql: GET with query twice, different",
            get_query(&[("query", &node(&ap)), ("query", &node(&us))]),
            refused_gql,
        ),
        (
            "graphql: GET with query twice, the same",
            get_query(&[("query", &node(&ap)), ("query", &node(&ap))]),
            (200, "ap", ""),
        ),
        (
            "graphql: GET with variables twice",
            get_query(&[
                ("query", "query($id: ID!) { node(id: $id) { id } }"),
                ("variables", &json!({ "id": ap }).to_string()),
                ("variables", &json!({ "id": us }).to_string()),
            ]),
            refused_gql,
        ),
        (
            "graphql: POST whose URL query is another document",
            post(
                &format!("/graphql?{}", url_query(&node(&ap))),
                JSON,
                json!({ "query": node(&us) }).to_string(),
            ),
            refused_gql,
        ),
        (
            "graphql: POST whose URL query is the body's",
            post(
                &format!("/graphql?{}", url_query(&node(&ap))),
                JSON,
                json!({ "query": node(&ap) }).to_string(),
            ),
            (200, "ap", ""),
        ),
        (
            "graphql: POST with query twice in the body",
            post(
                "/graphql",
                JSON,
                format!(
                    r#"{{"query":{},"query":{}}}"#,
                    json!(node(&ap)),
                    json!(node(&us))
                ),
            ),
            refused_gql,
        ),
        (
            "graphql: POST with a variable twice",
            post(
                "/graphql",
                JSON,
                format!(
                    r#"{{"query":"query($id: ID!) {{ node(id: $id) {{ id }} }}","variables":{{"id":"{ap}","id":"{us}"}}}}"#
                ),
            ),
            refused_gql,
        ),
        (
            "graphql: a persisted query by hash with variables.input.id",
            post(
                "/graphql",
                JSON,
                format!(r#"{{{hash},"variables":{{"input":{{"id":"{us}"}}}}}}"#),
            ),
            (200, "us", ""),
        ),
    ]
}

/// Every case over `protos` against `w`: the answer, and that a refusal reached no upstream.
async fn every_case(w: &World, protos: &[Proto]) {
    let mut failures = Vec::new();
    for &proto in protos {
        for (name, req, (status, by, problem)) in cases() {
            let before = w.counts();
            let got = send(proto, &w.router, w.certs.path(), &req).await;
            let want = Got {
                status,
                by: by.to_owned(),
                problem: problem.to_owned(),
            };
            if got != want {
                failures.push(format!("{proto:?} {name}: want {want:?}, got {got:?}"));
            }
            if status != 200 && w.counts() != before {
                failures.push(format!(
                    "{proto:?} {name}: an upstream received the request"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_read_one_way_over_http1_head_path_bridged_and_h2c() {
    let w = world(false, false).await;
    let shared = || {
        w.router
            .metric("iuid_router_http1_shared_phases_total", &[])
    };
    let before = shared().await;
    every_case(&w, &[Proto::Head]).await;
    assert_eq!(
        shared().await,
        before,
        "the head path read every body itself"
    );
    every_case(&w, &[Proto::Bridged]).await;
    assert!(
        shared().await >= before + cases().len() as f64,
        "every chunked request took the shared phases"
    );
    every_case(&w, &[Proto::H2c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_read_one_way_over_tls_h2() {
    let w = world(true, false).await;
    every_case(&w, &[Proto::TlsH2]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic (.ci/run installs it)"]
async fn bodies_read_one_way_over_h3() {
    let w = world(true, true).await;
    every_case(&w, &[Proto::H3]).await;
}

/// A request whose body stalls after its first 100 bytes (of 1000): the status and problem,
/// and how long after the bytes the answer came.
async fn stall(proto: Proto, w: &World, path: &str) -> (Got, Duration) {
    let addr = w.router.addr;
    let first = format!("{{\"order_id\": \"{}\", {}", iuid_for(1), " ".repeat(100));
    let first = &first[..100];
    match proto {
        Proto::Head | Proto::Bridged => {
            let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
            let head = match proto {
                Proto::Head => format!(
                    "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
                     Content-Length: 1000\r\n\r\n{first}"
                ),
                _ => format!(
                    "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
                     Transfer-Encoding: chunked\r\n\r\n3e8\r\n{first}"
                ),
            };
            stream.write_all(head.as_bytes()).await.expect("head");
            let started = Instant::now();
            let mut answer = Vec::new();
            let mut buf = [0u8; 4096];
            // Until the answer's body is in (a problem's is JSON: it ends with `}`).
            while !answer.ends_with(b"}") {
                let read = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf));
                match read.await {
                    Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
            let took = started.elapsed();
            (parse_h1(&String::from_utf8_lossy(&answer)), took)
        }
        Proto::H2c | Proto::TlsH2 => {
            type Chunk = Result<Frame<Bytes>, std::convert::Infallible>;
            let bytes = Bytes::from(first.to_owned());
            let frames =
                futures_util::stream::iter([Ok::<_, std::convert::Infallible>(Frame::data(bytes))])
                    .chain(futures_util::stream::pending::<Chunk>());
            let (mut sender, base) = h2(proto, &w.router, w.certs.path()).await;
            let req = http::Request::post(format!("{base}{path}"))
                .header("content-type", "application/json")
                .header("content-length", "1000")
                .body(StreamBody::new(Box::pin(frames)))
                .expect("request");
            let started = Instant::now();
            let resp = tokio::time::timeout(Duration::from_secs(10), sender.send_request(req))
                .await
                .expect("answered within 10 s")
                .expect("response");
            let took = started.elapsed();
            let status = resp.status().as_u16();
            let body = resp.into_body().collect().await.expect("body").to_bytes();
            (got(status, None, &String::from_utf8_lossy(&body)), took)
        }
        Proto::H3 => {
            let step = json!({"op": "request", "method": "POST", "path": path, "end": false,
                "headers": {"content-type": "application/json", "content-length": "1000"},
                "body": first});
            let plan = common::h3::plan(addr.port(), w.certs.path(), json!([step]));
            let out = common::h3::run(plan).await;
            let answer = &out["results"][0];
            let took = Duration::from_millis(answer["ms"].as_u64().unwrap_or(u64::MAX / 2));
            let got = got(
                answer["status"].as_u64().unwrap_or(0) as u16,
                answer["headers"]["x-upstream"].as_str(),
                answer["body"].as_str().unwrap_or(""),
            );
            (got, took)
        }
    }
}

/// A stalled body on a `json:` and a `graphql:` route over `protos`: 408
/// `request-body-timeout` after `idle_ms` (1 s) without progress, once (it was twice on the
/// head path: the refused body was waited for again), and nothing forwarded.
async fn stalls(w: &World, protos: &[Proto]) {
    let mut failures = Vec::new();
    for &proto in protos {
        for path in ["/v1/payments", "/graphql"] {
            let before = w.counts();
            let (got, took) = stall(proto, w, path).await;
            eprintln!("{proto:?} {path}: {} after {took:?}", got.status);
            let want = (408, "request-body-timeout");
            if (got.status, got.problem.as_str()) != want {
                failures.push(format!("{proto:?} {path}: want {want:?}, got {got:?}"));
            }
            if took < Duration::from_millis(900) || took >= Duration::from_millis(1600) {
                failures.push(format!(
                    "{proto:?} {path}: 408 after {took:?}, not after idle_ms (1 s)"
                ));
            }
            if w.counts() != before {
                failures.push(format!("{proto:?} {path}: a stalled body was forwarded"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_408_after_idle_ms_once_over_http1_and_h2c() {
    let w = world(false, false).await;
    stalls(&w, &[Proto::Head, Proto::Bridged, Proto::H2c]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_is_408_after_idle_ms_once_over_tls_h2() {
    let w = world(true, false).await;
    stalls(&w, &[Proto::TlsH2]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic (.ci/run installs it)"]
async fn a_stalled_body_is_408_after_idle_ms_once_over_h3() {
    let w = world(true, true).await;
    stalls(&w, &[Proto::H3]).await;
}

/// A small deterministic generator (xorshift64*), so the corpus is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A JSON text of depth at most `depth`: objects whose members are named `a`, `id` or `b`
/// (a name may repeat, and may be written escaped), ids as strings, integers around 2^53 and
/// 2^64, nulls, arrays.
fn generate(rng: &mut Rng, depth: u32, out: &mut String) {
    let kind = match depth {
        0 => rng.below(3),
        // A body is an object.
        3 => 4,
        _ => [0, 1, 1, 2, 3, 4, 4][rng.below(7) as usize],
    };
    match kind {
        0 => {
            let ids = [
                "\"s1\"",
                "\" s2 \"",
                "\"q\\\"3\"",
                "\"\\u00e94\"",
                "\"a\\\\b\"",
            ];
            out.push_str(ids[rng.below(ids.len() as u64) as usize]);
        }
        1 => {
            let ints = [
                "0",
                "7",
                "-7",
                "9007199254740992",
                "-9007199254740992",
                "9007199254740993",
                "-9007199254740993",
                "4611686018427387903",
                "18446744073709551615",
                "18446744073709551616",
                "1.5",
                "1e2",
            ];
            out.push_str(ints[rng.below(ints.len() as u64) as usize]);
        }
        2 => out.push_str("null"),
        3 => {
            out.push('[');
            for i in 0..rng.below(3) {
                if i > 0 {
                    out.push(',');
                }
                generate(rng, depth - 1, out);
            }
            out.push(']');
        }
        _ => {
            out.push('{');
            for i in 0..1 + rng.below(3) {
                if i > 0 {
                    out.push(',');
                }
                let name = ["a", "id", "b"][rng.below(3) as usize];
                out.push('"');
                match rng.below(4) {
                    0 => name
                        .chars()
                        .for_each(|c| out.push_str(&format!("\\u{:04x}", c as u32))),
                    _ => out.push_str(name),
                }
                out.push_str("\":");
                generate(rng, depth - 1, out);
            }
            out.push('}');
        }
    }
}

/// Python's reading of every `(body, pointer)`: `json.loads` (the last of duplicate members),
/// then the pointer walked; each answer `{"str": s}`, `{"int": "digits", "double_same":
/// bool}` (whether JavaScript's double is the same integer), `{"none": true}` or `{"other":
/// true}`, and `dups_on_path` (whether a member on the pointer's path is given twice, seen
/// with `object_pairs_hook`).
const PYTHON: &str = r#"
import json, sys

def walk(value, tokens):
    for t in tokens:
        if isinstance(value, dict):
            if t not in value:
                return ("none",)
            value = value[t]
        elif isinstance(value, list):
            if not (t == "0" or (t[:1] in "123456789" and t.isdigit())) or int(t) >= len(value):
                return ("none",)
            value = value[int(t)]
        else:
            return ("none",)
    return ("value", value)

def dups(text, tokens):
    # Every object as its list of pairs, then the path walked through the first of each name.
    value = json.loads(text, object_pairs_hook=lambda pairs: ("obj", pairs))
    for t in tokens:
        if isinstance(value, tuple):
            named = [v for k, v in value[1] if k == t]
            if len(named) > 1:
                return True
            if not named:
                return False
            value = named[0]
        elif isinstance(value, list):
            if not (t == "0" or (t[:1] in "123456789" and t.isdigit())) or int(t) >= len(value):
                return False
            value = value[int(t)]
        else:
            return False
    return False

out = []
for case in json.load(sys.stdin):
    tokens = case["pointer"][1:].split("/")
    found = walk(json.loads(case["body"]), tokens)
    answer = {"dups_on_path": dups(case["body"], tokens)}
    if found[0] == "none" or found[1] is None:
        answer["none"] = True
    elif isinstance(found[1], str):
        answer["str"] = found[1]
    elif isinstance(found[1], int) and not isinstance(found[1], bool):
        answer["int"] = str(found[1])
        answer["double_same"] = int(float(found[1])) == found[1]
    else:
        answer["other"] = True
    out.append(answer)
json.dump(out, sys.stdout)
"#;

/// The JSON reader against Python's `json` on 3000 generated bodies: where the router reads
/// an id, Python reads the same (and, with safe numbers, so does JavaScript's double);
/// where it finds nothing, Python finds nothing or `null`; it refuses as ambiguous exactly
/// where a member on the path is given twice or an integer id is beyond 2^53.
#[test]
fn the_json_reader_reads_as_python_does_or_refuses() {
    use iuid_router::extract::json::{id_at, JsonError, Numbers, Pointer};
    let python = std::env::var("IUID_ROUTER_PYTHON3").unwrap_or_else(|_| "python3".to_owned());
    if std::process::Command::new(&python)
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("SKIPPED: no {python} to compare the JSON reader with");
        return;
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let pointers = ["/id", "/a/id", "/a/0/id", "/b/a"];
    let mut corpus = Vec::new();
    while corpus.len() < 3000 {
        let mut body = String::new();
        generate(&mut rng, 3, &mut body);
        let pointer = pointers[rng.below(pointers.len() as u64) as usize];
        // Python reads `1e2` and numbers beyond 64 bits too; only the JSON both accept.
        if serde_json::from_str::<Value>(&body).is_ok() {
            corpus.push(json!({"body": body, "pointer": pointer}));
        }
    }
    let mut child = std::process::Command::new(&python)
        .args(["-c", PYTHON])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let input = serde_json::to_vec(&corpus).expect("corpus");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        stdin.write_all(&input).expect("write");
    });
    let output = child.wait_with_output().expect("python3 ran");
    writer.join().expect("written");
    assert!(output.status.success(), "python3 failed");
    let readings: Vec<Value> = serde_json::from_slice(&output.stdout).expect("python's answers");
    assert_eq!(readings.len(), corpus.len());
    let (mut ids, mut refused) = (0, 0);
    for (case, python) in corpus.iter().zip(&readings) {
        let body = case["body"].as_str().expect("body");
        let pointer = Pointer::parse(case["pointer"].as_str().expect("p")).expect("pointer");
        for numbers in [Numbers::Safe, Numbers::Exact] {
            let read = id_at(body.as_bytes(), &pointer, numbers);
            let context = format!(
                "{body} at {}, {numbers:?}: {read:?}, python {python}",
                pointer.as_str()
            );
            let dups = python["dups_on_path"] == true;
            match read {
                Ok(Some(id)) => {
                    ids += 1;
                    assert!(!dups, "{context}");
                    let id = String::from_utf8(id.into_owned()).expect("utf-8");
                    match (&python["str"], &python["int"]) {
                        (Value::String(s), _) => assert_eq!(s.trim(), id, "{context}"),
                        (_, Value::String(i)) => {
                            assert_eq!(i, &id, "{context}");
                            if numbers == Numbers::Safe {
                                assert_eq!(python["double_same"], true, "{context}");
                            }
                        }
                        _ => panic!("python reads no id: {context}"),
                    }
                }
                Ok(None) => {
                    assert!(!dups, "{context}");
                    assert_eq!(python["none"], true, "{context}");
                }
                Err(JsonError::Ambiguous(_)) => {
                    refused += 1;
                    let inexact = python["double_same"] == false && numbers == Numbers::Safe;
                    assert!(dups || inexact, "refused without cause: {context}");
                }
                Err(JsonError::NotAnId(_)) => {
                    assert!(
                        python["other"] == true || dups || python["int"].is_string(),
                        "{context}"
                    );
                }
                Err(JsonError::NotJson(_)) => panic!("{context}"),
            }
        }
    }
    assert!(
        ids > 200 && refused > 200,
        "the corpus exercises both: {ids} ids, {refused} refusals"
    );
}
