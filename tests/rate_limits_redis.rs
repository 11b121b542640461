//! `store.redis` (docs/rate-limits.md "Shared by every edge") with a real `redis-server`
//! started here (CI installs it from Debian; `#[ignore]`d, as the grpcio tests are, so
//! `cargo test` passes without it): three router processes share one 50/s budget and
//! together admit 50/s ± 10 %; Redis killed mid-run, each edge falls back to its own
//! counters with no 5xx; Redis back, the budget is shared again.

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::lists::ListRegion;
use common::{free_port, iuid_for, lettered_table, orders_config, ChildGuard};

const RATE: f64 = 50.0;
const BURST: usize = 4;

/// `redis-server` on `port`, nothing saved; waits until it answers `PING`.
async fn redis(port: u16) -> ChildGuard {
    let child = ChildGuard::spawn(
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "redis-server (apt-get install redis-server)",
    );
    let up = common::eventually(Duration::from_secs(10), || async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let Ok(mut conn) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
            return false;
        };
        let mut pong = [0u8; 7];
        conn.write_all(b"PING\r\n").await.is_ok()
            && conn.read_exact(&mut pong).await.is_ok()
            && &pong == b"+PONG\r\n"
    })
    .await;
    assert!(up.is_some(), "redis-server did not start");
    child
}

struct Edge {
    _child: ChildGuard,
    addr: SocketAddr,
    admin: SocketAddr,
}

/// One router process sharing the budget through Redis at `port`.
async fn edge(dir: &tempfile::TempDir, n: usize, upstream: &str, port: u16) -> Edge {
    let (addr, admin) = (free_port(), free_port());
    let sub = dir.path().join(format!("edge{n}"));
    std::fs::create_dir_all(&sub).expect("dir");
    std::fs::write(
        sub.join("routing-table.yaml"),
        lettered_table("r", &[&[upstream.to_owned()]]),
    )
    .expect("table");
    let config = orders_config()
        .listen(addr)
        .admin_listen(admin)
        .extra(&format!(
            "rate_limits:\n  - {{ key: region, rate: {RATE}/s, burst: {BURST} }}\n\
             store: {{ redis: \"redis://127.0.0.1:{port}/0\", on_error: local }}\nworkers: 1\n"
        ))
        .yaml();
    std::fs::write(sub.join("router.yaml"), config).expect("config");
    let log = std::fs::File::create(sub.join("router.log")).expect("log");
    let child = ChildGuard::spawn(
        Command::new(env!("CARGO_BIN_EXE_iuid-router"))
            .args(["serve", "--config"])
            .arg(sub.join("router.yaml"))
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log)),
        "router",
    );
    common::wait_ready(admin).await;
    Edge {
        _child: child,
        addr,
        admin,
    }
}

/// Statuses seen while load runs: 200s, 429s, anything else.
#[derive(Default)]
struct Tally {
    ok: AtomicUsize,
    limited: AtomicUsize,
    other: AtomicUsize,
}

/// Two clients per edge sending as fast as they are answered until `stop`.
fn load(
    edges: &[Edge],
    tally: &Arc<Tally>,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let path = format!("/v1/orders/{}", iuid_for(1));
    let mut tasks = Vec::new();
    for edge in edges {
        for _ in 0..2 {
            let (tally, stop) = (tally.clone(), stop.clone());
            let url = format!("http://{}{}", edge.addr, path);
            tasks.push(tokio::spawn(async move {
                let client = common::client();
                while !stop.load(Ordering::Relaxed) {
                    let status = client.get(&url).send().await.map(|r| r.status().as_u16());
                    let slot = match status {
                        Ok(200) => &tally.ok,
                        Ok(429) => &tally.limited,
                        _ => &tally.other,
                    };
                    slot.fetch_add(1, Ordering::Relaxed);
                }
            }));
        }
    }
    tasks
}

/// Requests admitted per second over `window`, the run's tally.
async fn measure(edges: &[Edge], window: Duration) -> (f64, Arc<Tally>) {
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks = load(edges, &tally, &stop);
    tokio::time::sleep(window).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = t.await;
    }
    let secs = started.elapsed().as_secs_f64();
    // The burst passes at once from idle, on top of the rate.
    let ok = tally.ok.load(Ordering::Relaxed).saturating_sub(BURST + 1);
    (ok as f64 / secs, tally)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (CI installs it)"]
async fn three_edges_share_one_budget_and_fall_back_to_their_own_while_redis_is_away() {
    let upstream = ListRegion::start("a").await;
    let port = free_port().port();
    let mut server = redis(port).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut edges = Vec::new();
    for n in 0..3 {
        edges.push(edge(&dir, n, &upstream.url(), port).await);
    }

    let (shared, tally) = measure(&edges, Duration::from_secs(4)).await;
    eprintln!(
        "shared: {shared:.1}/s admitted by 3 edges ({} refused)",
        tally.limited.load(Ordering::Relaxed)
    );
    assert_eq!(tally.other.load(Ordering::Relaxed), 0, "only 200 and 429");
    assert!(
        tally.limited.load(Ordering::Relaxed) > 0,
        "the load was over the rate"
    );
    assert!(
        (RATE * 0.9..=RATE * 1.1).contains(&shared),
        "three edges admitted {shared:.1}/s together, not {RATE} ± 10 %"
    );

    // Redis killed: every edge decides alone (`on_error: local`), never a 5xx.
    let _ = server.get_mut().kill();
    let _ = server.get_mut().wait();
    let (alone, tally) = measure(&edges, Duration::from_secs(3)).await;
    eprintln!("redis away: {alone:.1}/s admitted");
    assert_eq!(
        tally.other.load(Ordering::Relaxed),
        0,
        "no 5xx while Redis is away"
    );
    assert!(
        alone > RATE * 2.0,
        "each edge admits its own {RATE}/s without Redis: {alone:.1}/s"
    );
    let mut errors = 0.0;
    for edge in &edges {
        let text = common::metrics_text(edge.admin).await;
        errors += common::metric_sum(
            &text,
            "iuid_router_rate_limit_store_errors_total",
            &["on_error=\"local\""],
        );
    }
    assert!(errors > 0.0, "decisions made without Redis are counted");

    // Redis back on the same port: shared again once the edges reconnect.
    let _server = redis(port).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let _ = measure(&edges, Duration::from_millis(500)).await;
    let (again, tally) = measure(&edges, Duration::from_secs(4)).await;
    eprintln!("redis back: {again:.1}/s admitted");
    for n in 0..3 {
        let log = std::fs::read_to_string(dir.path().join(format!("edge{n}/router.log")));
        for line in log
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("store.redis"))
        {
            eprintln!("edge{n}: {line}");
        }
    }
    assert_eq!(tally.other.load(Ordering::Relaxed), 0);
    assert!(
        (RATE * 0.9..=RATE * 1.1).contains(&again),
        "shared again: {again:.1}/s, not {RATE} ± 10 %"
    );
    let v = common::get_json(&format!("http://{}/admin/rate-limits", edges[0].admin)).await;
    assert_eq!(v["store"]["kind"], "redis");
    assert_eq!(v["store"]["reachable"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs redis-server (CI installs it)"]
async fn a_request_no_rule_counts_stays_on_the_head_path_and_one_a_rule_counts_asks_redis() {
    let port = free_port().port();
    let _server = redis(port).await;
    let upstream = common::Upstream::start("a").await;
    let table = lettered_table("rh", &[&[upstream.url()]]);
    let config = orders_config()
        .extra(&format!(
            "rate_limits:\n  - {{ name: key, key: {{ header: x-api-key }}, rate: 1/min }}\n\
             store: {{ redis: \"redis://127.0.0.1:{port}/0\" }}\n"
        ))
        .yaml();
    let router = common::Router::start(&config, &table).await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let shared = || async {
        router
            .metric("iuid_router_http1_shared_phases_total", &[])
            .await
    };
    let get = |key: Option<&'static str>| {
        let mut req = common::client().get(router.url(&path));
        if let Some(key) = key {
            req = req.header("x-api-key", key);
        }
        async move { req.send().await.expect("answer").status().as_u16() }
    };
    let before = shared().await;
    assert_eq!(get(None).await, 200);
    assert_eq!(
        shared().await,
        before,
        "no rule applies: the head path carried it"
    );
    assert_eq!(get(Some("k")).await, 200);
    assert_eq!(get(Some("k")).await, 429, "Redis counted the first");
    assert!(
        shared().await >= before + 2.0,
        "Redis's decisions are awaited by the shared phases"
    );
    assert_eq!(upstream.count(), 2);
}
