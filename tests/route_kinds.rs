//! Issue 37's acceptance: the smuggling, desync, blame and timeout checks run for every route
//! kind — REST (`/v1/orders/<iuid>`), GraphQL (`POST /graphql`, `node(id:)`), a `fanout:` list
//! and a legacy id (`legacy: probe`, a UUIDv4) — and over both upstream transports: plain
//! `http://` regions and `https://` regions whose certificate the router verifies against a
//! private CA (`tls: { ca, server_name }`).
//!
//! Each check is one test over the table of cases (kind × transport). A case starts the real
//! router in front of two raw upstreams on loopback (regions named after the check and the
//! case, so that the process-wide metrics are the case's own) which record every byte and
//! every whole request they read, and talks raw HTTP/1.1 to the router: what is asserted is
//! what went over the wire. Every case runs; the failures are reported together.
//!
//! - **smuggling**: the kind's request with both `Content-Length` and `Transfer-Encoding:
//!   chunked` (either order) is 400 `bad-body-framing` problem+json, its connection closed
//!   after the answer, and nothing reaches any upstream.
//! - **desync**: the kind's requests pipelined in one write, with bytes a lax parser could
//!   take for a request (`GET /smuggled HTTP/1.1`) inside a declared body: the upstreams see
//!   only the whole requests the client sent, the client exactly their answers, in order.
//! - **blame**: a client that declares a body and leaves midway is counted as the client's
//!   error (`aborted`), never the upstream's; no upstream sees a whole request; the router
//!   goes on serving.
//! - **timeout**: an upstream that accepts and never answers is 504 problem+json within
//!   `response_headers_ms`, counted against it; for a fan-out (docs/fanout.md) the page is
//!   answered within the route's `timeout_ms`, the region named with `error: timeout`.

mod common;

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{iuid_for, ConfigYaml, Router};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// `timeouts.response_headers_ms`: a silent upstream's request is 504 after it.
const RESPONSE_HEADERS_MS: u64 = 400;
/// The fan-out route's `timeout_ms`: a silent region is named in the page after it.
const FANOUT_TIMEOUT_MS: u64 = 400;
/// What a timed answer may take beyond its limit on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(800);
/// The fan-out route's path.
const LIST: &str = "/v1/list";
/// Bytes a lax parser would read as a request of its own.
const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: t\r\n\r\n";

// ---------------------------------------------------------------------------------------
// The table: route kinds × upstream transports.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Rest,
    Graphql,
    Fanout,
    Legacy,
}

const KINDS: [Kind; 4] = [Kind::Rest, Kind::Graphql, Kind::Fanout, Kind::Legacy];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    Plain,
    Tls,
}

const TRANSPORTS: [Transport; 2] = [Transport::Plain, Transport::Tls];

#[derive(Debug, Clone, Copy)]
struct Case {
    kind: Kind,
    transport: Transport,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Rest => "rest",
            Kind::Graphql => "graphql",
            Kind::Fanout => "fanout",
            Kind::Legacy => "legacy",
        }
    }

    /// How the case's two regions (`a`, the default region, owner of country 1; `b`) answer:
    /// REST and GraphQL ids are `a`'s; a fan-out asks both for a list; a legacy id is asked
    /// of `a` first, which holds nothing (404), then found in `b` by probing.
    fn regions(self) -> [Reply; 2] {
        match self {
            Kind::Rest | Kind::Graphql => [Reply::Echo, Reply::Echo],
            Kind::Fanout => [Reply::List { seed: 1 }, Reply::List { seed: 2 }],
            Kind::Legacy => [Reply::NotFound, Reply::Echo],
        }
    }

    /// The start of the kind's request: request line, `Host`, and the kind's own fields,
    /// without framing fields or the blank line. REST `POST /v1/orders/<iuid>`; GraphQL
    /// `POST /graphql` (JSON); fan-out `GET /v1/list`; legacy `GET /v1/orders/<uuid v4>`.
    fn head(self) -> String {
        match self {
            Kind::Rest => format!("POST {} HTTP/1.1\r\nHost: t\r\n", rest_path("")),
            Kind::Graphql => {
                "POST /graphql HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n".into()
            }
            Kind::Fanout => format!("GET {LIST} HTTP/1.1\r\nHost: t\r\n"),
            Kind::Legacy => format!("GET /v1/orders/{} HTTP/1.1\r\nHost: t\r\n", legacy_id()),
        }
    }

    /// A whole, valid request of the kind on a connection of its own (`Connection: close`).
    fn request(self) -> String {
        match self {
            Kind::Graphql => graphql_post(&graphql_json("order", None), "Connection: close\r\n"),
            _ => format!("{}Connection: close\r\n\r\n", self.head()).replacen("POST ", "GET ", 1),
        }
    }
}

impl Transport {
    fn name(self) -> &'static str {
        match self {
            Transport::Plain => "plain",
            Transport::Tls => "tls",
        }
    }
}

impl fmt::Display for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} over {}", self.kind.name(), self.transport.name())
    }
}

/// Runs `check` for every kind over every transport, one case after another, and fails
/// with every failed case's reason.
async fn every_case<F, Fut>(check: &str, run: F)
where
    F: Fn(Case, Arc<Certs>) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let certs = Arc::new(Certs::make());
    let mut failures = Vec::new();
    let mut ran = 0;
    for kind in KINDS {
        for transport in TRANSPORTS {
            let case = Case { kind, transport };
            ran += 1;
            let started = Instant::now();
            let verdict = tokio::time::timeout(Duration::from_secs(30), run(case, certs.clone()))
                .await
                .unwrap_or_else(|_| Err("no verdict within 30 s".to_owned()));
            println!(
                "{check}, {case}: {} in {:?}",
                if verdict.is_ok() { "ok" } else { "FAILED" },
                started.elapsed()
            );
            if let Err(why) = verdict {
                failures.push(format!("- {check}, {case}: {why}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {ran} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// `return Err(...)` unless `cond`: a case's assertion.
macro_rules! ensure {
    ($cond:expr, $($why:tt)+) => {
        if !$cond {
            return Err(format!($($why)+));
        }
    };
}

// ---------------------------------------------------------------------------------------
// 1. Smuggling.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_is_refused_for_every_route_kind_and_transport() {
    every_case("smuggling", smuggling).await;
}

/// The kind's request framed both by `Content-Length` and by `Transfer-Encoding: chunked`,
/// in the two classic shapes: CL.TE (a length that covers the chunked body's end and a
/// request behind it) and TE.CL (a chunk that holds a request, a length covering its size
/// line only). Either is 400 `bad-body-framing`, the connection closed after it, nothing
/// forwarded; then the kind's ordinary request is served (the case's world works).
async fn smuggling(case: Case, certs: Arc<Certs>) -> Result<(), String> {
    let w = World::start("smuggling", case, case.kind.regions(), &certs).await;
    let kind = case.kind;
    let cl_te_body = format!("0\r\n\r\n{SMUGGLED}");
    let cl_te = format!(
        "{}Content-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{cl_te_body}",
        kind.head(),
        cl_te_body.len()
    );
    let te_cl = format!(
        "{}Transfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n{:x}\r\n{SMUGGLED}\r\n0\r\n\r\n",
        kind.head(),
        SMUGGLED.len()
    );
    for (shape, request) in [("CL.TE", cl_te), ("TE.CL", te_cl)] {
        let mut conn = Conn::open(&w).await?;
        conn.send(request.as_bytes()).await?;
        let answer = conn.answer().await.map_err(|e| format!("{shape}: {e}"))?;
        answer
            .problem(400, "bad-body-framing")
            .map_err(|e| format!("{shape}: {e}"))?;
        conn.closed(Duration::from_secs(3))
            .await
            .map_err(|e| format!("{shape}: after its 400, {e}"))?;
    }
    // What was refused would have reached an upstream by now.
    tokio::time::sleep(Duration::from_millis(200)).await;
    ensure!(
        w.bytes_read() == 0,
        "bytes reached an upstream: {}",
        w.describe()
    );
    w.served(kind).await
}

// ---------------------------------------------------------------------------------------
// 2. Desync.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn desync_is_impossible_for_every_route_kind_and_transport() {
    every_case("desync", desync).await;
}

/// One request of a pipeline and the answer it must get.
struct Step {
    request: String,
    status: u16,
    expect: Expect,
}

/// What an answer's body must be.
enum Expect {
    /// The echo upstream's: the request line as the upstream read it, `\n`, and the body it
    /// read after it.
    Echo { line: String, body: String },
    /// Exactly this text.
    Text(&'static str),
    /// A fan-out page of this many items, none of its regions failed.
    Page { items: usize },
    /// A problem+json of this type.
    Problem(&'static str),
}

/// The kind's requests, pipelined in one write with `GET /smuggled` inside a declared body,
/// and the request lines each region must have read, in order. The router's `unrouted`
/// policy is `default_region`: a smuggled request the router itself parsed would be
/// forwarded to `a` and answered, so it would show on both sides.
fn desync_plan(kind: Kind) -> (Vec<Step>, [Vec<String>; 2]) {
    let post_smuggled = |path: &str| {
        format!(
            "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{SMUGGLED}",
            SMUGGLED.len()
        )
    };
    match kind {
        Kind::Rest => {
            let second = rest_path("?second");
            let steps = vec![
                Step {
                    request: post_smuggled(&rest_path("")),
                    status: 200,
                    expect: Expect::Echo {
                        line: format!("POST {} HTTP/1.1", rest_path("")),
                        body: SMUGGLED.to_owned(),
                    },
                },
                Step {
                    request: format!(
                        "GET {second} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                    ),
                    status: 200,
                    expect: Expect::Echo {
                        line: format!("GET {second} HTTP/1.1"),
                        body: String::new(),
                    },
                },
            ];
            let lines = vec![
                format!("POST {} HTTP/1.1", rest_path("")),
                format!("GET {second} HTTP/1.1"),
            ];
            (steps, [lines, vec![]])
        }
        Kind::Graphql => {
            // In JSON a string holds no raw line break: the smuggled request, escaped, in
            // a variable; and, raw, in a block string of an `application/graphql` document.
            let json = graphql_json("order", Some(SMUGGLED));
            let document = format!(
                "{{ node(id: \"{}\") {{ id note(text: \"\"\"\r\n{SMUGGLED}\"\"\") }} }}",
                iuid_for(1)
            );
            let raw = format!(
                "POST /graphql HTTP/1.1\r\nHost: t\r\nContent-Type: application/graphql\r\nContent-Length: {}\r\n\r\n{document}",
                document.len()
            );
            let last = graphql_json("second", None);
            let echo = |body: &str| Expect::Echo {
                line: "POST /graphql HTTP/1.1".to_owned(),
                body: body.to_owned(),
            };
            let steps = vec![
                Step {
                    request: graphql_post(&json, ""),
                    status: 200,
                    expect: echo(&json),
                },
                Step {
                    request: raw,
                    status: 200,
                    expect: echo(&document),
                },
                Step {
                    request: graphql_post(&last, "Connection: close\r\n"),
                    status: 200,
                    expect: echo(&last),
                },
            ];
            (
                steps,
                [vec!["POST /graphql HTTP/1.1".to_owned(); 3], vec![]],
            )
        }
        Kind::Fanout => {
            // A fan-out's GET with a body takes another path: a bodiless GET, then a POST
            // whose body holds the smuggled request (405, its body read and dropped), then
            // a GET again.
            let steps = vec![
                Step {
                    request: format!("GET {LIST}?limit=1 HTTP/1.1\r\nHost: t\r\n\r\n"),
                    status: 200,
                    expect: Expect::Page { items: 1 },
                },
                Step {
                    request: post_smuggled(LIST),
                    status: 405,
                    expect: Expect::Problem("method-not-allowed"),
                },
                Step {
                    request: format!(
                        "GET {LIST}?limit=2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                    ),
                    status: 200,
                    expect: Expect::Page { items: 2 },
                },
            ];
            let lines = vec![
                format!("GET {LIST}?limit=1 HTTP/1.1"),
                format!("GET {LIST}?limit=2 HTTP/1.1"),
            ];
            (steps, [lines.clone(), lines])
        }
        Kind::Legacy => {
            // A legacy GET with a body is asked of the default region only: a probe would
            // carry the head without the body (`Proxy::phases` keeps a probe head only for
            // an empty held body), so the default region's 404 is its answer. The bodiless
            // GET after it is probed and found in `b`.
            let (one, two) = (legacy_id(), legacy_id());
            let steps = vec![
                Step {
                    request: format!(
                        "GET /v1/orders/{one} HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{SMUGGLED}",
                        SMUGGLED.len()
                    ),
                    status: 404,
                    expect: Expect::Text("no such order"),
                },
                Step {
                    request: format!(
                        "GET /v1/orders/{two} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
                    ),
                    status: 200,
                    expect: Expect::Echo {
                        line: format!("GET /v1/orders/{two} HTTP/1.1"),
                        body: String::new(),
                    },
                },
            ];
            let a = vec![
                format!("GET /v1/orders/{one} HTTP/1.1"),
                format!("GET /v1/orders/{two} HTTP/1.1"),
            ];
            (steps, [a, vec![format!("GET /v1/orders/{two} HTTP/1.1")]])
        }
    }
}

async fn desync(case: Case, certs: Arc<Certs>) -> Result<(), String> {
    let w = World::start("desync", case, case.kind.regions(), &certs).await;
    let (steps, want_lines) = desync_plan(case.kind);
    let mut conn = Conn::open(&w).await?;
    let all: String = steps.iter().map(|s| s.request.as_str()).collect();
    conn.send(all.as_bytes()).await?;
    for (n, step) in steps.iter().enumerate() {
        let answer = conn
            .answer()
            .await
            .map_err(|e| format!("answer {} of {}: {e}", n + 1, steps.len()))?;
        let what = format!("answer {} of {}", n + 1, steps.len());
        ensure!(
            answer.status == step.status,
            "{what}: status {}, not {}: {answer}",
            answer.status,
            step.status
        );
        let body = answer.text();
        match &step.expect {
            Expect::Echo { line, body: sent } => {
                let want = format!("{line}\n{sent}");
                ensure!(body == want, "{what}: {body:?}, not {want:?}");
            }
            Expect::Text(text) => ensure!(body == *text, "{what}: {body:?}, not {text:?}"),
            Expect::Page { items } => {
                let page = answer.json()?;
                let got = page["items"].as_array().map_or(0, Vec::len);
                ensure!(
                    got == *items && page["partial"] == false,
                    "{what}: a page of {got} items, not {items}: {page}"
                );
            }
            Expect::Problem(kind) => answer
                .problem(step.status, kind)
                .map_err(|e| format!("{what}: {e}"))?,
        }
    }
    conn.closed(Duration::from_secs(3))
        .await
        .map_err(|e| format!("after the last answer, {e}"))?;
    for (up, want) in w.upstreams.iter().zip(&want_lines) {
        let got = up.lines();
        ensure!(
            !got.iter().any(|l| l.contains("/smuggled")),
            "the smuggled request reached region {}: {got:?}",
            up.region
        );
        ensure!(
            got == *want,
            "region {} read the requests {got:?}, not {want:?}",
            up.region
        );
        ensure!(
            up.pending() == 0,
            "region {} read bytes that are no whole request: {}",
            up.region,
            w.describe()
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 3. Blame.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_leaving_midway_is_blamed_for_every_route_kind_and_transport() {
    every_case("blame", blame).await;
}

/// The kind's request with a declared body (for the `GET` kinds too), of which the client
/// sends a part and then resets the connection: a mobile client gone mid-upload. A REST body
/// over `retries.buffer_bytes` streams (its upstream reads a part); GraphQL's is held until
/// whole (nothing is forwarded). A `fanout:` `GET`'s body is read and dropped before any
/// region is asked (this suite found the router fanning out on the head alone, the body
/// unread and the client's leaving uncounted).
async fn blame(case: Case, certs: Arc<Certs>) -> Result<(), String> {
    let w = World::start("blame", case, case.kind.regions(), &certs).await;
    let (declared, part) = match case.kind {
        Kind::Graphql => {
            let json = graphql_json("order", None);
            let body = format!("{json:<1000}");
            (body.len(), body.as_bytes()[..100].to_vec())
        }
        _ => (1 << 20, vec![b'x'; 1024]),
    };
    let aborted = "kind=\"aborted\"";
    let before = w.router.metric(CLIENT_ERRORS, &[aborted]).await;
    let head = format!("{}Content-Length: {declared}\r\n\r\n", case.kind.head());
    let mut stream = TcpStream::connect(w.router.addr)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(|e| format!("head: {e}"))?;
    stream
        .write_all(&part)
        .await
        .map_err(|e| format!("part: {e}"))?;
    // Let the router start on the request before the client vanishes; keep what it wrote
    // meanwhile (nothing, unless it answered a request whose body had not come), for the
    // report.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut early = vec![0u8; 16 << 10];
    let early = match tokio::time::timeout(Duration::from_millis(10), stream.read(&mut early)).await
    {
        Ok(Ok(n)) => String::from_utf8_lossy(&early[..n]).into_owned(),
        _ => String::new(),
    };
    // Deprecated for blocking on drop with a timeout; a zero linger resets at once instead.
    #[allow(deprecated)]
    stream
        .set_linger(Some(Duration::ZERO))
        .map_err(|e| format!("linger: {e}"))?;
    drop(stream);

    // Every property is checked, and all that fail are reported.
    let mut wrong = Vec::new();
    let counted = common::eventually(Duration::from_secs(5), || async {
        w.router.metric(CLIENT_ERRORS, &[aborted]).await > before
    })
    .await;
    if counted.is_none() {
        let metrics = w.router.metrics().await;
        let counts: Vec<&str> = metrics
            .lines()
            .filter(|l| l.starts_with(CLIENT_ERRORS))
            .collect();
        wrong.push(format!(
            "not counted in {CLIENT_ERRORS}{{{aborted}}} within 5 s (its counts: {counts:?})"
        ));
    }
    for up in &w.upstreams {
        let label = format!("region=\"{}\"", up.region);
        let errors = w.router.metric(UPSTREAM_ERRORS, &[&label]).await;
        if errors != 0.0 {
            wrong.push(format!(
                "{errors} {UPSTREAM_ERRORS} counted against region {}",
                up.region
            ));
        }
    }
    if w.upstreams.iter().any(|up| !up.lines().is_empty()) {
        wrong.push(format!(
            "an upstream read a whole request of a client that left midway: {}",
            w.describe()
        ));
    }
    if let Err(why) = w.served(case.kind).await {
        wrong.push(why);
    }
    if !wrong.is_empty() && !early.is_empty() {
        let status = early.lines().next().unwrap_or_default();
        wrong.push(format!(
            "the router had answered before the body came: {status:?}"
        ));
    }
    ensure!(wrong.is_empty(), "{}", wrong.join("; "));
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 4. Timeout.
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_upstream_times_out_for_every_route_kind_and_transport() {
    every_case("timeout", timeout).await;
}

/// An upstream that accepts (and completes its TLS handshake), reads the request and never
/// answers. REST, GraphQL and legacy (its default region is the silent one: a timeout is no
/// 404, so nothing is probed): 504 `gateway-timeout` after `response_headers_ms`, counted
/// against the region as `timeout`, not retried. A fan-out whose region `b` is silent: the
/// page (docs/fanout.md) after the route's `timeout_ms`, `partial`, `b` named with `error:
/// timeout` and counted in `iuid_router_fanout_legs_total{outcome="timeout"}`.
async fn timeout(case: Case, certs: Arc<Certs>) -> Result<(), String> {
    let regions = match case.kind {
        Kind::Fanout => [Reply::List { seed: 1 }, Reply::Silent],
        _ => [Reply::Silent, Reply::Echo],
    };
    let w = World::start("timeout", case, regions, &certs).await;
    let [a, b] = &w.upstreams;
    let mut conn = Conn::open(&w).await?;
    let sent = Instant::now();
    conn.send(case.kind.request().as_bytes()).await?;
    let answer = conn.answer().await?;
    let took = sent.elapsed();
    let limit_ms = match case.kind {
        Kind::Fanout => FANOUT_TIMEOUT_MS,
        _ => RESPONSE_HEADERS_MS,
    };
    ensure!(
        took >= Duration::from_millis(limit_ms - 20)
            && took <= Duration::from_millis(limit_ms) + SLACK,
        "answered after {took:?}, not at {limit_ms} ms: {answer}"
    );
    if case.kind == Kind::Fanout {
        ensure!(answer.status == 200, "status {}: {answer}", answer.status);
        let page = answer.json()?;
        ensure!(page["partial"] == true, "not partial: {page}");
        ensure!(
            page["regions"][&b.region]["error"] == "timeout",
            "region {} not named as timed out: {page}",
            b.region
        );
        ensure!(
            page["regions"][&a.region]["status"] == 200
                && page["items"].as_array().map_or(0, Vec::len) == 5,
            "region {}'s items missing: {page}",
            a.region
        );
        let legs = w
            .router
            .metric(
                "iuid_router_fanout_legs_total",
                &[&format!("region=\"{}\"", b.region), "outcome=\"timeout\""],
            )
            .await;
        ensure!(
            legs == 1.0,
            "fanout_legs_total{{outcome=timeout}} of {}: {legs}",
            b.region
        );
        return Ok(());
    }
    answer.problem(504, "gateway-timeout")?;
    let label = format!("region=\"{}\"", a.region);
    let counted = common::eventually(Duration::from_secs(2), || async {
        w.router
            .metric(UPSTREAM_ERRORS, &[&label, "kind=\"timeout\""])
            .await
            == 1.0
    })
    .await;
    let errors = w.router.metric(UPSTREAM_ERRORS, &[&label]).await;
    ensure!(
        counted.is_some() && errors == 1.0,
        "not one {UPSTREAM_ERRORS}{{kind=timeout}} against region {} ({errors} in all)",
        a.region
    );
    ensure!(
        a.lines().len() == 1 && b.lines().is_empty(),
        "the silent region should have read the request once (no retry) and no other region any: {}",
        w.describe()
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The case's world: two regions of raw upstreams (plain or TLS) and the router.
// ---------------------------------------------------------------------------------------

const CLIENT_ERRORS: &str = "iuid_router_client_errors_total";
const UPSTREAM_ERRORS: &str = "iuid_router_upstream_errors_total";

/// Every route kind at once: `/v1/orders/{id}`, `graphql: /graphql`, a `fanout:` list at
/// [`LIST`], `legacy: probe`; unrouted requests to the default region; 1 s to connect,
/// [`RESPONSE_HEADERS_MS`] for response headers, 5 s idle.
fn config() -> String {
    ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .route_graphql("/graphql")
        .route(&format!(
            "{{ fanout: {LIST}, scheme: iuid, items: /items, id_field: id, timeout_ms: {FANOUT_TIMEOUT_MS}, limit: {{ param: limit, default: 5, max: 20 }} }}"
        ))
        .unrouted("default_region")
        .timeouts(1000, RESPONSE_HEADERS_MS, 5000)
        .watch(false)
        .extra("workers: 2")
        .extra("legacy: probe")
        .extra("legacy_probe: { budget_percent: 100, min_per_second: 1000 }")
        .yaml()
}

struct World {
    router: Router,
    /// Regions `<check>_<kind>_<transport>_a` (the default, country 1) and `…_b` (country 2).
    upstreams: [Upstream; 2],
}

impl World {
    async fn start(check: &str, case: Case, replies: [Reply; 2], certs: &Certs) -> World {
        let tls = (case.transport == Transport::Tls).then_some(certs);
        let prefix = format!("{check}_{}_{}", case.kind.name(), case.transport.name());
        let upstreams = [
            Upstream::start(format!("{prefix}_a"), replies[0], tls).await,
            Upstream::start(format!("{prefix}_b"), replies[1], tls).await,
        ];
        let mut table = "version: route-kinds\nregions:\n".to_owned();
        for up in &upstreams {
            let tls = match case.transport {
                Transport::Plain => String::new(),
                Transport::Tls => format!(
                    ", tls: {{ ca: \"{}\", server_name: localhost }}",
                    certs.ca.display()
                ),
            };
            table += &format!("  {}: {{ upstreams: [\"{}\"]{tls} }}\n", up.region, up.url);
        }
        table += &format!(
            "countries:\n  1: {}\n  2: {}\ndefault_region: {}\n",
            upstreams[0].region, upstreams[1].region, upstreams[0].region
        );
        let router = Router::start(&config(), &table).await;
        World { router, upstreams }
    }

    fn bytes_read(&self) -> usize {
        self.upstreams.iter().map(Upstream::bytes).sum()
    }

    /// What each region read, for a failure's message.
    fn describe(&self) -> String {
        let parts: Vec<String> = self.upstreams.iter().map(Upstream::describe).collect();
        parts.join("; ")
    }

    /// The kind's ordinary request, on a connection of its own, is answered 200.
    async fn served(&self, kind: Kind) -> Result<(), String> {
        let mut conn = Conn::open(self).await?;
        conn.send(kind.request().as_bytes()).await?;
        let answer = conn
            .answer()
            .await
            .map_err(|e| format!("then an ordinary request: {e}"))?;
        ensure!(
            answer.status == 200,
            "then an ordinary request is {}, not 200: {answer}",
            answer.status
        );
        Ok(())
    }
}

/// The path of `/v1/orders/<the REST id>` with `rest` after it (a query).
fn rest_path(rest: &str) -> String {
    format!("/v1/orders/{}{rest}", iuid_for(1))
}

/// A UUIDv4 no region has seen before (legacy ids are remembered once probed).
fn legacy_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!(
        "9b2e4c1a-7d3f-4e8b-a6c5-{:012x}",
        NEXT.fetch_add(1, Ordering::SeqCst)
    )
}

/// A GraphQL JSON body asking `<alias>: node(id: <the REST id>)`, with a `note` variable.
fn graphql_json(alias: &str, note: Option<&str>) -> String {
    let query = format!("{{ {alias}: node(id: \"{}\") {{ id }} }}", iuid_for(1));
    match note {
        None => json!({ "query": query }).to_string(),
        Some(note) => json!({ "query": query, "variables": { "note": note } }).to_string(),
    }
}

/// `POST /graphql` with the JSON `body` and `fields` (each ending in CRLF).
fn graphql_post(body: &str, fields: &str) -> String {
    format!(
        "POST /graphql HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n{fields}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

// ---------------------------------------------------------------------------------------
// Raw upstreams, plain or TLS.
// ---------------------------------------------------------------------------------------

/// How an upstream answers each whole request it reads.
#[derive(Debug, Clone, Copy)]
enum Reply {
    /// 200, the body: the request line, `\n`, and the request's body as read.
    Echo,
    /// 404: holds nothing.
    NotFound,
    /// 200, a JSON list (docs/fanout.md) of `limit` items (5 by default), newest first, ids
    /// made from `seed` so that each region's are its own.
    List { seed: u64 },
    /// Never answers; keeps reading.
    Silent,
}

/// What an upstream read, over all its connections.
#[derive(Default)]
struct Log {
    /// Every byte read.
    bytes: usize,
    /// Each whole request (head and body), in the order they were read.
    requests: Vec<Vec<u8>>,
    /// For each connection: bytes read that are (so far) no whole request.
    pending: Vec<Vec<u8>>,
}

/// A raw HTTP/1.1 upstream standing for one region: it frames what it reads itself (by
/// `Content-Length` or chunked, strictly), records it and answers by its [`Reply`].
struct Upstream {
    region: String,
    url: String,
    log: Arc<Mutex<Log>>,
}

impl Upstream {
    async fn start(region: String, reply: Reply, tls: Option<&Certs>) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let log: Arc<Mutex<Log>> = Arc::default();
        let acceptor = tls.map(|certs| certs.acceptor.clone());
        let scheme = if tls.is_some() { "https" } else { "http" };
        let shared = log.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (log, acceptor) = (shared.clone(), acceptor.clone());
                tokio::spawn(async move {
                    match acceptor {
                        None => serve_connection(tcp, reply, log).await,
                        Some(acceptor) => {
                            if let Ok(tls) = acceptor.accept(tcp).await {
                                serve_connection(tls, reply, log).await;
                            }
                        }
                    }
                });
            }
        });
        Upstream {
            region,
            url: format!("{scheme}://127.0.0.1:{port}"),
            log,
        }
    }

    fn bytes(&self) -> usize {
        self.log.lock().expect("log").bytes
    }

    /// The request line of each whole request read.
    fn lines(&self) -> Vec<String> {
        let log = self.log.lock().expect("log");
        log.requests.iter().map(|r| request_line(r)).collect()
    }

    /// Bytes read that are no whole request, over all connections.
    fn pending(&self) -> usize {
        let log = self.log.lock().expect("log");
        log.pending.iter().map(Vec::len).sum()
    }

    fn describe(&self) -> String {
        let log = self.log.lock().expect("log");
        let requests: Vec<String> = log
            .requests
            .iter()
            .map(|r| String::from_utf8_lossy(r).into_owned())
            .collect();
        let pending: Vec<String> = log
            .pending
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| String::from_utf8_lossy(&p[..p.len().min(300)]).into_owned())
            .collect();
        format!(
            "region {} read {} bytes: whole requests {requests:?}, not whole {pending:?}",
            self.region, log.bytes
        )
    }
}

async fn serve_connection<S>(mut stream: S, reply: Reply, log: Arc<Mutex<Log>>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let conn = {
        let mut log = log.lock().expect("log");
        log.pending.push(Vec::new());
        log.pending.len() - 1
    };
    let mut got = Vec::new();
    let mut buf = vec![0u8; 16 << 10];
    loop {
        while let Frame::Whole(len) = frame(&got, false) {
            let request: Vec<u8> = got.drain(..len).collect();
            let answer = answer_to(reply, &request);
            log.lock().expect("log").requests.push(request);
            if let Some(answer) = answer {
                if stream.write_all(&answer).await.is_err() || stream.flush().await.is_err() {
                    return;
                }
            }
        }
        log.lock().expect("log").pending[conn] = got.clone();
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                log.lock().expect("log").bytes += n;
                got.extend_from_slice(&buf[..n]);
            }
        }
    }
}

fn answer_to(reply: Reply, request: &[u8]) -> Option<Vec<u8>> {
    let line = request_line(request);
    let (status, content_type, body) = match reply {
        Reply::Silent => return None,
        Reply::Echo => {
            let head_end = find(request, b"\r\n\r\n").map_or(request.len(), |i| i + 4);
            let mut body = format!("{line}\n").into_bytes();
            body.extend_from_slice(&request[head_end..]);
            ("200 OK", "text/plain", body)
        }
        Reply::NotFound => ("404 Not Found", "text/plain", b"no such order".to_vec()),
        Reply::List { seed } => {
            let target = line.split(' ').nth(1).unwrap_or_default();
            let limit: u64 = target
                .split_once('?')
                .and_then(|(_, query)| query.split('&').find_map(|p| p.strip_prefix("limit=")))
                .and_then(|v| v.parse().ok())
                .unwrap_or(5);
            let items: Vec<Value> = (0..limit)
                .map(|k| {
                    let ms = common::MINTED_MS - seed - 10 * k;
                    json!({ "id": common::iuid(ms, 3, 1, seed * 1000 + k) })
                })
                .collect();
            let body = json!({ "items": items }).to_string().into_bytes();
            ("200 OK", "application/json", body)
        }
    };
    let mut answer = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    Some(answer)
}

fn request_line(message: &[u8]) -> String {
    let end = find(message, b"\r\n").unwrap_or(message.len());
    String::from_utf8_lossy(&message[..end]).into_owned()
}

/// The CA, and the TLS acceptor of the upstreams' certificate for `localhost` (ALPN
/// `http/1.1`), made with the shipped `config/make-certs.sh`.
struct Certs {
    _dir: tempfile::TempDir,
    ca: PathBuf,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl Certs {
    fn make() -> Certs {
        let dir = tempfile::tempdir().expect("tempdir");
        let certs = dir.path().join("certs");
        common::make_certs(&certs, false, &["localhost"]);
        let chain: Vec<CertificateDer<'static>> =
            CertificateDer::pem_file_iter(certs.join("localhost.pem"))
                .expect("cert")
                .collect::<Result<_, _>>()
                .expect("der");
        let key = PrivateKeyDer::from_pem_file(certs.join("localhost-key.pem")).expect("key");
        let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .expect("server config");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Certs {
            ca: certs.join("ca.pem"),
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            _dir: dir,
        }
    }
}

// ---------------------------------------------------------------------------------------
// HTTP/1.1 framing, strict, for both sides.
// ---------------------------------------------------------------------------------------

enum Frame {
    /// More bytes are needed.
    Partial,
    /// A whole message of this many bytes starts the buffer.
    Whole(usize),
    /// An answer delimited by its connection's close.
    UntilClose,
    /// Framing a strict reader refuses.
    Bad(String),
}

/// How the message at the start of `buf` is framed (RFC 9112 §6): `Transfer-Encoding:
/// chunked` alone, one `Content-Length`, or neither (no body in a request; until the close
/// in an answer other than 1xx, 204 and 304).
fn frame(buf: &[u8], answer: bool) -> Frame {
    let Some(end) = find(buf, b"\r\n\r\n") else {
        return Frame::Partial;
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or_default();
    let fields: Vec<(&str, &str)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n, v.trim()))
        .collect();
    let body_at = end + 4;
    if answer {
        let status = first.get(9..12).unwrap_or_default();
        if status.starts_with('1') || status == "204" || status == "304" {
            return Frame::Whole(body_at);
        }
    }
    let lengths: Vec<&str> = fields
        .iter()
        .filter(|(n, _)| *n == "content-length")
        .map(|(_, v)| *v)
        .collect();
    let codings: Vec<&str> = fields
        .iter()
        .filter(|(n, _)| *n == "transfer-encoding")
        .map(|(_, v)| *v)
        .collect();
    match (codings.as_slice(), lengths.as_slice()) {
        ([], []) if answer => Frame::UntilClose,
        ([], []) => whole(buf, body_at),
        ([], [length]) => match length.parse::<usize>() {
            Ok(n) => whole(buf, body_at + n),
            Err(_) => Frame::Bad(format!("Content-Length: {length}")),
        },
        (["chunked"], []) => chunked_end(buf, body_at).map_or(Frame::Partial, |r| match r {
            Ok(len) => Frame::Whole(len),
            Err(why) => Frame::Bad(why),
        }),
        _ => Frame::Bad(format!(
            "Transfer-Encoding {codings:?} with Content-Length {lengths:?}"
        )),
    }
}

fn whole(buf: &[u8], len: usize) -> Frame {
    if buf.len() >= len {
        Frame::Whole(len)
    } else {
        Frame::Partial
    }
}

/// Where a chunked body starting at `at` ends (after its trailer section); `None` until it
/// has come whole.
fn chunked_end(buf: &[u8], mut at: usize) -> Option<Result<usize, String>> {
    loop {
        let eol = find(&buf[at..], b"\r\n")?;
        let line = String::from_utf8_lossy(&buf[at..at + eol]).into_owned();
        let digits = line.split(';').next().unwrap_or_default();
        let Ok(size) = usize::from_str_radix(digits, 16) else {
            return Some(Err(format!("chunk size line {line:?}")));
        };
        at += eol + 2;
        if size == 0 {
            loop {
                let eol = find(&buf[at..], b"\r\n")?;
                at += eol + 2;
                if eol == 0 {
                    return Some(Ok(at));
                }
            }
        }
        if buf.len() < at + size + 2 {
            return None;
        }
        if &buf[at + size..at + size + 2] != b"\r\n" {
            return Some(Err("a chunk without its CRLF".to_owned()));
        }
        at += size + 2;
    }
}

/// The data of a whole chunked body.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut data = Vec::new();
    while let Some(eol) = find(body, b"\r\n") {
        let line = String::from_utf8_lossy(&body[..eol]).into_owned();
        let size = usize::from_str_radix(line.split(';').next().unwrap_or_default(), 16)
            .unwrap_or_default();
        if size == 0 || body.len() < eol + 2 + size {
            break;
        }
        data.extend_from_slice(&body[eol + 2..eol + 2 + size]);
        body = &body[(eol + 4 + size).min(body.len())..];
    }
    data
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

// ---------------------------------------------------------------------------------------
// The client side: one connection to the router, answers read one by one.
// ---------------------------------------------------------------------------------------

/// An answer as read off the wire.
struct Answer {
    status: u16,
    /// The head, lower-cased.
    head: String,
    /// The body (decoded, if it came chunked).
    body: Vec<u8>,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn json(&self) -> Result<Value, String> {
        serde_json::from_slice(&self.body).map_err(|e| format!("not JSON ({e}): {self}"))
    }

    /// It is a problem+json of `status` and `urn:iuid-router:problem:<kind>`.
    fn problem(&self, status: u16, kind: &str) -> Result<(), String> {
        ensure!(
            self.status == status,
            "status {}, not {status}: {self}",
            self.status
        );
        ensure!(
            self.head
                .contains("\r\ncontent-type: application/problem+json"),
            "not application/problem+json: {self}"
        );
        let problem = self.json()?;
        let want = format!("urn:iuid-router:problem:{kind}");
        ensure!(
            problem["type"] == want.as_str(),
            "not of type {want}: {self}"
        );
        Ok(())
    }
}

impl fmt::Display for Answer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", format!("{}{}", self.head, self.text()))
    }
}

struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Conn {
    async fn open(w: &World) -> Result<Conn, String> {
        let stream = TcpStream::connect(w.router.addr)
            .await
            .map_err(|e| format!("connect to the router: {e}"))?;
        Ok(Conn {
            stream,
            buf: Vec::new(),
        })
    }

    async fn send(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.stream
            .write_all(bytes)
            .await
            .map_err(|e| format!("send: {e}"))
    }

    /// Reads more into the buffer within 5 s; `Ok(false)` at the connection's end.
    async fn fill(&mut self) -> Result<bool, String> {
        let mut chunk = [0u8; 16 << 10];
        match tokio::time::timeout(Duration::from_secs(5), self.stream.read(&mut chunk)).await {
            Err(_) => Err(format!(
                "nothing more within 5 s after {:?}",
                String::from_utf8_lossy(&self.buf)
            )),
            Ok(Ok(0)) => Ok(false),
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(false),
            Ok(Err(e)) => Err(format!("read: {e}")),
        }
    }

    /// The next final answer (1xx skipped).
    async fn answer(&mut self) -> Result<Answer, String> {
        loop {
            let len = match frame(&self.buf, true) {
                Frame::Whole(len) => len,
                Frame::Bad(why) => return Err(format!("an answer framed badly: {why}")),
                Frame::Partial => {
                    if !self.fill().await? {
                        return Err(format!(
                            "the connection closed before a whole answer: {:?}",
                            String::from_utf8_lossy(&self.buf)
                        ));
                    }
                    continue;
                }
                Frame::UntilClose => {
                    while self.fill().await? {}
                    self.buf.len()
                }
            };
            let message: Vec<u8> = self.buf.drain(..len).collect();
            let head_end = find(&message, b"\r\n\r\n").expect("a head") + 4;
            let head = String::from_utf8_lossy(&message[..head_end]).to_ascii_lowercase();
            let status: u16 = head
                .get(9..12)
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| format!("no status line: {head:?}"))?;
            if status < 200 {
                continue;
            }
            let mut body = message[head_end..].to_vec();
            if head.contains("\r\ntransfer-encoding: chunked") {
                body = dechunk(&body);
            }
            return Ok(Answer { status, head, body });
        }
    }

    /// The router closes the connection within `within`, with nothing more written.
    async fn closed(&mut self, within: Duration) -> Result<(), String> {
        let deadline = Instant::now() + within;
        loop {
            ensure!(
                self.buf.is_empty(),
                "more was written: {:?}",
                String::from_utf8_lossy(&self.buf)
            );
            let mut chunk = [0u8; 4096];
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.stream.read(&mut chunk)).await {
                Err(_) => return Err(format!("the connection is still open after {within:?}")),
                Ok(Ok(0)) => return Ok(()),
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => return Ok(()),
                Ok(Err(e)) => return Err(format!("read: {e}")),
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}
