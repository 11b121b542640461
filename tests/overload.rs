//! Issue 38 (docs/overload.md): a sick region never holds more than
//! `limits.region_max_in_flight` requests of this edge. Over real sockets: a region whose
//! upstream accepts and never answers (a black hole) fills its limit; the next request for it
//! is answered 503 `region-overloaded` at once with `Retry-After`, on the own engine's head
//! path and on HTTP/2 alike (a gRPC call: UNAVAILABLE), and a fan-out names it `overloaded`; nothing more reaches the
//! black hole, the shed requests are counted as shed and never against the region, the
//! healthy region is served throughout, and the limit frees as the waiting requests end.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::lists::ListRegion;
use common::{eventually, iuid_for, Router};
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncReadExt;

const LIMIT: usize = 4;

/// An upstream that accepts, reads, and never answers; it counts the requests it read the
/// start of (one per connection: nothing is ever answered, so none is reused).
async fn black_hole() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen = Arc::new(AtomicUsize::new(0));
    let count = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let mut counted = false;
                while let Ok(n) = stream.read(&mut buf).await {
                    if n == 0 {
                        return;
                    }
                    if !counted {
                        counted = true;
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
    });
    (addr, seen)
}

/// A client that sends `request` to `addr` and keeps its connection open, unread.
async fn hold(addr: SocketAddr, request: &str) -> TcpStream {
    let request = request.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut c = TcpStream::connect(addr).expect("connect");
        c.write_all(request.as_bytes()).expect("send");
        c
    })
    .await
    .expect("client")
}

/// An HTTP/2 client connection to `addr` (h2c, prior knowledge).
async fn h2c(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<Empty<Bytes>> {
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (h2, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .expect("h2c handshake");
    tokio::spawn(conn);
    h2
}

/// Regions `<name>sick` (the black hole, country 1) and `<name>well` (country 2), names of
/// their own (metrics are per process); a fan-out over both at `/v1/list`.
async fn world(name: &str) -> (Router, Arc<AtomicUsize>, ListRegion) {
    let (hole, seen) = black_hole().await;
    let well = ListRegion::start("well").await;
    let table = format!(
        "version: o\nregions:\n  {name}sick: {{ upstreams: [\"http://{hole}\"] }}\n  {name}well: {{ upstreams: [\"{}\"] }}\ncountries:\n  1: {name}sick\n  2: {name}well\ndefault_region: {name}well\n",
        well.url()
    );
    let config = common::orders_config()
        .route("{ fanout: /v1/list, scheme: iuid, items: /items, id_field: id, timeout_ms: 3000 }")
        .limits(&format!("region_max_in_flight: {LIMIT}"))
        // The waiting requests end (504) after 1.5 s, freeing the limit.
        .timeouts(1000, 1500, 60_000)
        .yaml();
    (Router::start(&config, &table).await, seen, well)
}

/// `LIMIT` requests for the sick region, each on its own connection, left waiting.
fn fill(router: SocketAddr) -> Vec<TcpStream> {
    (0..LIMIT)
        .map(|_| {
            let mut c = TcpStream::connect(router).expect("connect");
            let request = format!("GET /v1/orders/{} HTTP/1.1\r\nHost: t\r\n\r\n", iuid_for(1));
            c.write_all(request.as_bytes()).expect("send");
            c
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_at_its_limit_is_shed_at_once_on_every_protocol_and_frees_after() {
    let (router, seen, _well) = world("ov").await;
    let addr = router.addr;
    let waiting = tokio::task::spawn_blocking(move || fill(addr))
        .await
        .expect("fill");
    let all_in = eventually(Duration::from_secs(5), || async {
        seen.load(Ordering::SeqCst) >= LIMIT
    })
    .await;
    assert!(
        all_in.is_some(),
        "{} reached the black hole",
        seen.load(Ordering::SeqCst)
    );

    // HTTP/1.1 on the head path: 503 at once, and the connection closed after it (the
    // client comes back after `Retry-After`; a shed client holds no descriptor meanwhile).
    let sick = format!("/v1/orders/{}", iuid_for(1));
    let target = sick.clone();
    let (answers, took) = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let request = format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n");
        let mut answers = Vec::new();
        for _ in 0..2 {
            let mut c = TcpStream::connect(addr).expect("connect");
            c.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            c.write_all(request.as_bytes()).expect("send");
            answers.push(common::read_answer(&mut c));
            let mut rest = [0u8; 16];
            let closed = std::io::Read::read(&mut c, &mut rest);
            assert!(matches!(closed, Ok(0)), "closed after the 503: {closed:?}");
        }
        (answers, started.elapsed())
    })
    .await
    .expect("client");
    for answer in &answers {
        let lower = answer.to_ascii_lowercase();
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(
            lower.contains("content-type: application/problem+json"),
            "{answer}"
        );
        assert!(lower.contains("retry-after: 1\r\n"), "{answer}");
        assert!(lower.contains("connection: close\r\n"), "{answer}");
        assert!(
            answer.contains("urn:iuid-router:problem:region-overloaded"),
            "{answer}"
        );
    }
    assert!(took < Duration::from_secs(1), "answered at once: {took:?}");

    // HTTP/1.1 off the head path (an absolute-form target: the shared phases through the
    // bridge): the same answer, the connection closed after it too.
    let absolute = format!("GET http://t{sick} HTTP/1.1\r\nHost: t\r\n\r\n");
    let (bridged, closed) = tokio::task::spawn_blocking(move || {
        let mut c = TcpStream::connect(addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        c.write_all(absolute.as_bytes()).expect("send");
        let answer = common::read_answer(&mut c);
        let mut rest = [0u8; 16];
        (answer, std::io::Read::read(&mut c, &mut rest))
    })
    .await
    .expect("client");
    assert!(bridged.starts_with("HTTP/1.1 503 "), "{bridged}");
    assert!(bridged.contains("region-overloaded"), "{bridged}");
    assert!(matches!(closed, Ok(0)), "closed after the 503: {closed:?}");

    // HTTP/2 (hyper's server, the shared phases): the same.
    let mut h2 = h2c(addr).await;
    let req = hyper::Request::get(router.url(&sick))
        .body(Empty::<Bytes>::new())
        .expect("request");
    let resp = h2.send_request(req).await.expect("h2 answer");
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("region-overloaded"), "{body}");
    // A gRPC call is told UNAVAILABLE (14), in a trailers-only answer.
    let call = hyper::Request::post(router.url(&sick))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(Empty::<Bytes>::new())
        .expect("request");
    let resp = h2.send_request(call).await.expect("gRPC answer");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["grpc-status"], "14");
    let message = resp.headers()["grpc-message"].to_str().expect("ascii");
    assert!(message.contains("region_max_in_flight"), "{message}");

    // A fan-out names the sick region `overloaded` and asks it nothing.
    let page = reqwest::get(router.url("/v1/list")).await.expect("fan-out");
    let page: serde_json::Value = page.json().await.expect("json");
    assert_eq!(page["partial"], true, "{page}");
    assert_eq!(page["regions"]["ovsick"]["error"], "overloaded", "{page}");

    // The healthy region is served meanwhile.
    let well = reqwest::get(router.url(&format!("/v1/orders/{}", iuid_for(2))))
        .await
        .expect("well");
    assert_eq!(well.status(), 200);

    // Shed, not failed: nothing more reached the black hole, nothing counted against it.
    assert_eq!(
        seen.load(Ordering::SeqCst),
        LIMIT,
        "no shed request was sent"
    );
    let shed = router
        .metric(
            "iuid_router_shed_total",
            &["region=\"ovsick\"", "reason=\"max_in_flight\""],
        )
        .await;
    assert_eq!(
        shed, 6.0,
        "three HTTP/1.1 (one through the bridge), one HTTP/2, one gRPC, one fan-out leg"
    );
    let blamed = router
        .metric("iuid_router_upstream_errors_total", &["region=\"ovsick\""])
        .await;
    assert_eq!(blamed, 0.0, "shedding is not the region's failure");

    // The waiting requests time out (504, the region's fault) and free the limit: the
    // next request for the region reaches it again.
    let freed = eventually(Duration::from_secs(10), || async {
        router
            .metric("iuid_router_upstream_errors_total", &["region=\"ovsick\""])
            .await
            >= LIMIT as f64
    })
    .await;
    assert!(freed.is_some(), "the waiting requests ended");
    let again = tokio::task::spawn_blocking(move || fill(addr))
        .await
        .expect("refill");
    let reached = eventually(Duration::from_secs(5), || async {
        seen.load(Ordering::SeqCst) >= 2 * LIMIT
    })
    .await;
    assert!(
        reached.is_some(),
        "the limit freed: {}",
        seen.load(Ordering::SeqCst)
    );
    drop((waiting, again));
}

/// The real binary serving with a table of one region `name` on `upstream`, started with
/// `RLIMIT_NOFILE` set to `soft`/`hard` (`extra`: more config lines): the child, its public
/// address, and the directory its files are in.
async fn serve_with_nofile(
    name: &str,
    table: &str,
    extra: &str,
    soft: u64,
    hard: u64,
) -> (
    common::ChildGuard,
    SocketAddr,
    SocketAddr,
    tempfile::TempDir,
) {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let (public, admin) = (common::free_port(), common::free_port());
    std::fs::write(
        dir.path().join("t.yaml"),
        format!("version: {name}\n{table}"),
    )
    .expect("write");
    let config = dir.path().join("router.yaml");
    std::fs::write(
        &config,
        format!("listen: {public}\nadmin_listen: {admin}\nregion: edge\nrouting_table: t.yaml\nreload: {{ watch: false }}\n{extra}"),
    )
    .expect("write");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_iuid-router"));
    command
        .args(["serve", "--config", config.to_str().expect("utf8")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    // SAFETY: between fork and exec only setrlimit runs, which is async-signal-safe.
    unsafe {
        command.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: soft,
                rlim_max: hard,
            };
            match libc::setrlimit(libc::RLIMIT_NOFILE, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let child = common::ChildGuard::spawn(&mut command, "start router");
    common::wait_ready(admin).await;
    (child, public, admin, dir)
}

/// A table (without its `version`) of one region, `name`, at `upstream`, owning country 1.
fn one_region(name: &str, upstream: &str) -> String {
    format!("regions:\n  {name}: {{ upstreams: [\"{upstream}\"] }}\ncountries:\n  1: {name}\ndefault_region: {name}\n")
}

/// The soft `RLIMIT_NOFILE` a service starts with (often 1,024) is raised to the hard one
/// at start (docs/overload.md): the real binary, started with a soft limit of 256 under a
/// higher hard one, runs with soft = hard.
#[tokio::test]
async fn the_open_files_limit_is_raised_to_the_hard_one_at_start() {
    let mut current = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut current) },
        0
    );
    let hard = current.rlim_max;
    if hard <= 256 {
        eprintln!("skipped: the hard limit here is {hard}");
        return;
    }
    let table = one_region("n", "http://127.0.0.1:1");
    let (child, _public, _admin, _dir) = serve_with_nofile("n", &table, "", 256, hard).await;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", child.id())).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let numbers: Vec<&str> = line.split_whitespace().skip(3).take(2).collect();
    let want = match hard {
        libc::RLIM_INFINITY => "unlimited".to_owned(),
        n => n.to_string(),
    };
    assert_eq!(numbers, [want.clone(), want], "{line}");
}

/// A client that leaves while its request waits on a silent upstream ends the request: its
/// upstream connection is closed and its place in the region's limit freed at once (as
/// nginx does), not when `response_headers_ms` runs out; counted as the client's, never
/// against the region. Here the limit is 1: the next request reaches the region instead of
/// being shed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_frees_its_place_at_once() {
    let (hole, seen) = black_hole().await;
    let table = format!(
        "version: g\n{}",
        one_region("gone", &format!("http://{hole}"))
    );
    let config = common::orders_config()
        .limits("region_max_in_flight: 1")
        .timeouts(1000, 60_000, 60_000)
        .yaml();
    let router = Router::start(&config, &table).await;
    let addr = router.addr;
    let before = router
        .metric("iuid_router_client_errors_total", &["kind=\"aborted\""])
        .await;
    let request = format!("GET /v1/orders/{} HTTP/1.1\r\nHost: t\r\n\r\n", iuid_for(1));
    let leaving = hold(addr, &request).await;
    let reached = eventually(Duration::from_secs(5), || async {
        seen.load(Ordering::SeqCst) >= 1
    })
    .await;
    assert!(reached.is_some(), "the request reached the region");
    // Waiting past the router's first look at the upstream alone, then gone.
    tokio::time::sleep(Duration::from_millis(400)).await;
    drop(leaving);
    let counted = eventually(Duration::from_secs(5), || async {
        router
            .metric("iuid_router_client_errors_total", &["kind=\"aborted\""])
            .await
            > before
    })
    .await;
    assert!(counted.is_some(), "the client's leaving is counted");
    // Its place is free: the next request reaches the region (not a 503).
    let _waiting = hold(addr, &request).await;
    let again = eventually(Duration::from_secs(5), || async {
        seen.load(Ordering::SeqCst) >= 2
    })
    .await;
    assert!(
        again.is_some(),
        "the limit was freed by the client's leaving"
    );
    let blamed = router
        .metric("iuid_router_upstream_errors_total", &["region=\"gone\""])
        .await;
    assert_eq!(blamed, 0.0, "not the region's failure");
    let shed = router
        .metric("iuid_router_shed_total", &["region=\"gone\""])
        .await;
    assert_eq!(shed, 0.0);
}

/// CPU time (user + system) of `pid` so far, in clock ticks (`/proc/PID/stat`).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    // After the command's `)`: state is field 3, utime 14 and stime 15.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| fields[i - 3].parse::<u64>().expect("ticks");
    tick(14) + tick(15)
}

/// Near the descriptor limit (a hard `RLIMIT_NOFILE` of 64, so none to raise to; the
/// reserve starts at descriptor 57, docs/overload.md): 128 clients each send a request for a
/// black-hole region, more than the router has descriptors for (each waiting request holds
/// two). The router stops accepting at the reserve instead of running into `EMFILE`, closes
/// its idle kept-alive connection first, and waits without spinning (under 10 % of a core);
/// the admin API still answers from the reserve; once the clients leave, the healthy
/// region is served again on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_ninety_percent_of_the_descriptors_accepts_pause_and_idle_connections_close() {
    let (up, _seen) = common::recording_upstream().await;
    let (hole, seen) = black_hole().await;
    let table = format!(
        "regions:\n  ok: {{ upstreams: [\"{up}\"] }}\n  sick: {{ upstreams: [\"http://{hole}\"] }}\ncountries:\n  1: ok\n  2: sick\ndefault_region: ok\n"
    );
    let extra = "workers: 1\n";
    let (child, public, admin, _dir) = serve_with_nofile("fd", &table, extra, 64, 64).await;
    let pid = child.id();
    let healthy = format!("GET /v1/x/{} HTTP/1.1\r\nHost: t\r\n\r\n", iuid_for(1));
    let sick = format!("GET /v1/x/{} HTTP/1.1\r\nHost: t\r\n\r\n", iuid_for(2));
    // A kept-alive client, idle after its answer.
    let mut kept = tokio::task::spawn_blocking(move || {
        let mut c = TcpStream::connect(public).expect("connect");
        c.write_all(healthy.as_bytes()).expect("send");
        c.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut buf = [0u8; 4096];
        let n = std::io::Read::read(&mut c, &mut buf).expect("answer");
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        c
    })
    .await
    .expect("kept-alive client");
    let clients: Vec<TcpStream> = tokio::task::spawn_blocking(move || {
        (0..128)
            .map(|_| {
                let mut c = TcpStream::connect(public).expect("connect");
                c.write_all(sick.as_bytes()).expect("send");
                c
            })
            .collect()
    })
    .await
    .expect("clients");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The idle connection was closed first.
    let closed = tokio::task::spawn_blocking(move || {
        let mut buf = [0u8; 64];
        std::io::Read::read(&mut kept, &mut buf)
    })
    .await
    .expect("read");
    assert!(
        matches!(closed, Ok(0)),
        "the idle kept-alive connection is closed: {closed:?}"
    );
    let waiting = seen.load(Ordering::SeqCst);
    assert!(
        waiting < 128,
        "not every client got in: {waiting} of 128 requests reached the region"
    );
    let before = cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_ticks(pid) - before;
    // SAFETY: sysconf reads a constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    assert!(
        used * 10 < 2 * hz,
        "{used} ticks of CPU in 2 s while at the descriptor reserve ({hz} a second)"
    );
    // The admin API answers from the reserve meanwhile.
    let health = reqwest::get(format!("http://{admin}/healthz")).await;
    assert!(
        health.as_ref().is_ok_and(|r| r.status().is_success()),
        "the admin API answers while accepts pause: {health:?}"
    );
    // A connection to the region that found no descriptor is the router's, not the region's.
    let metrics = reqwest::get(format!("http://{admin}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text");
    let blamed: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("iuid_router_upstream_errors_total") && l.contains("sick"))
        .collect();
    assert!(blamed.is_empty(), "never against the region: {blamed:?}");
    drop(clients);
    let path = format!("/v1/x/{}", iuid_for(1));
    let served = eventually(Duration::from_secs(15), || async {
        reqwest::get(format!("http://{public}{path}"))
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(served.is_some(), "served again once the clients left");
}

/// Above `overload.max_memory_mb` (here 1 MiB, below any process's resident size) every new
/// exchange with a region is shed with 503 `overloaded` and `Retry-After`, counted as shed
/// for `memory`, never against the region; the admin API still answers.
#[tokio::test]
async fn above_max_memory_new_requests_are_shed() {
    let (up, seen) = common::recording_upstream().await;
    let table = one_region("mem", &up);
    let extra = "overload: { max_memory_mb: 1 }\n";
    let (_child, public, admin, _dir) = serve_with_nofile("mem", &table, extra, 4096, 4096).await;
    let url = format!("http://{public}/v1/x/{}", iuid_for(1));
    // The guard's first reading comes within 100 ms of the start.
    let shed = eventually(Duration::from_secs(5), || async {
        reqwest::get(&url).await.is_ok_and(|r| r.status() == 503)
    })
    .await;
    assert!(shed.is_some(), "shed above the bound");
    let answer = reqwest::get(&url).await.expect("answer");
    assert_eq!(answer.status(), 503);
    assert_eq!(
        answer.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"1"[..])
    );
    let body = answer.text().await.expect("body");
    assert!(
        body.contains("urn:iuid-router:problem:overloaded"),
        "{body}"
    );
    assert!(body.contains("overload.max_memory_mb"), "{body}");
    assert!(
        seen.lock().expect("seen").is_empty(),
        "nothing reached the region"
    );
    let metrics = common::metrics_text(admin).await;
    assert!(
        common::metric_sum(&metrics, "iuid_router_shed_total", &["reason=\"memory\""]) >= 2.0,
        "{metrics}"
    );
    assert!(
        common::metric_sum(&metrics, "iuid_router_overloaded", &["resource=\"memory\""]) == 1.0,
        "{metrics}"
    );
}

/// `limits.region_max_pending_connects`: a region whose upstream takes TCP connections and
/// never finishes the TLS handshake (a black hole behind `https://`) holds each new
/// connection until `connect_ms`; with a bound of 2, the third request is shed at once
/// (503 `region-overloaded`, `Retry-After: 1`, `reason="pending_connects"`), never counted
/// against the region.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_being_made_to_a_region_are_bounded() {
    let (hole, seen) = black_hole().await;
    let table = format!(
        "version: pc\n{}",
        one_region("pcsick", &format!("https://{hole}"))
    );
    let config = common::orders_config()
        .limits("region_max_pending_connects: 2")
        .timeouts(10_000, 60_000, 60_000)
        .yaml();
    let router = Router::start(&config, &table).await;
    let addr = router.addr;
    let request = format!("GET /v1/orders/{} HTTP/1.1\r\nHost: t\r\n\r\n", iuid_for(1));
    let waiting = [hold(addr, &request).await, hold(addr, &request).await];
    // Both handshakes begun (the black hole read their ClientHello) and hanging.
    let begun = eventually(Duration::from_secs(5), || async {
        seen.load(Ordering::SeqCst) >= 2
    })
    .await;
    assert!(begun.is_some(), "two connects in progress");
    let third = request.clone();
    let (answer, took) = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let mut c = TcpStream::connect(addr).expect("connect");
        c.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        c.write_all(third.as_bytes()).expect("send");
        (common::read_answer(&mut c), started.elapsed())
    })
    .await
    .expect("client");
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.contains("region-overloaded"), "{answer}");
    assert!(answer.contains("region_max_pending_connects"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1\r\n"),
        "{answer}"
    );
    assert!(took < Duration::from_secs(2), "shed at once: {took:?}");
    // HTTP/2 (the shared phases, hyper's client to the upstream): the same.
    let mut h2 = h2c(addr).await;
    let req = hyper::Request::get(router.url(&format!("/v1/orders/{}", iuid_for(1))))
        .body(Empty::<Bytes>::new())
        .expect("request");
    let resp = tokio::time::timeout(Duration::from_secs(2), h2.send_request(req))
        .await
        .expect("shed at once")
        .expect("h2 answer");
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body = resp.into_body().collect().await.expect("body").to_bytes();
    assert!(String::from_utf8_lossy(&body).contains("region_max_pending_connects"));
    assert_eq!(seen.load(Ordering::SeqCst), 2, "no third connect was made");
    let shed = router
        .metric(
            "iuid_router_shed_total",
            &["region=\"pcsick\"", "reason=\"pending_connects\""],
        )
        .await;
    assert_eq!(shed, 2.0, "one HTTP/1.1, one HTTP/2");
    let blamed = router
        .metric("iuid_router_upstream_errors_total", &["region=\"pcsick\""])
        .await;
    assert_eq!(blamed, 0.0, "not the region's failure");
    drop(waiting);
}
