//! The router's memory under fan-out load (docs/fanout.md: "memory is bounded"): the real binary
//! in its own process, three regions of 500 items each, 50 concurrent fan-outs of 3 × 500
//! items, five rounds. Its peak resident set (`VmHWM` in `/proc/<pid>/status`) must stay
//! bounded and must not grow round after round; and with large answers, the global byte
//! budget bounds it and it returns near idle after the load. Prints the figures
//! (`--nocapture`).

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::lists::{Item, ListRegion};
use common::{client, free_port, ChildGuard, ConfigYaml};

/// `VmHWM` and `VmRSS` of a process, in KiB.
fn memory_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .expect("field")
    };
    (field("VmHWM:"), field("VmRSS:"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rss_stays_bounded_under_50_concurrent_fanouts_of_3x500() {
    let regions = [
        ListRegion::start("a").await,
        ListRegion::start("b").await,
        ListRegion::start("c").await,
    ];
    for (k, region) in regions.iter().enumerate() {
        region.set(
            (0..500u64)
                .map(|n| Item::new(1_800_000_000_000 + n * 3 + k as u64, n))
                .collect(),
        );
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let table = common::lettered_table(
        "rss",
        &[
            &[regions[0].url()],
            &[regions[1].url()],
            &[regions[2].url()],
        ],
    );
    common::write(&dir, "routing-table.yaml", &table);
    let (public, admin) = (free_port(), free_port());
    let config = ConfigYaml::new()
        .listen(public)
        .admin_listen(admin)
        .route("{ fanout: /v1/orders, limit: { param: limit, default: 500, max: 500 }, timeout_ms: 10000 }")
        .watch(false)
        .extra("workers: 2\naccess_log: true\nlog_format: json");
    let log_path = dir.path().join("router.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let path = common::write(&dir, "router.yaml", &config.yaml());
    let child = ChildGuard::spawn(
        Command::new(env!("CARGO_BIN_EXE_iuid-router"))
            .args(["serve", "--config", path.to_str().expect("utf8")])
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log)),
        "start router",
    );
    let ready = common::eventually(Duration::from_secs(20), || async {
        reqwest::get(format!("http://{admin}/readyz"))
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(ready.is_some(), "the router did not start");

    let url = format!("http://{public}/v1/orders?limit=500");
    let one = client().get(&url).send().await.expect("fan-out");
    let page: serde_json::Value = one.json().await.expect("page");
    assert_eq!(page["items"].as_array().map(Vec::len), Some(500));
    let idle = memory_kib(child.id());

    let mut peaks = Vec::new();
    for _ in 0..5 {
        let requests = (0..50).map(|_| {
            let url = url.clone();
            tokio::spawn(async move {
                let resp = client().get(&url).send().await.expect("fan-out");
                assert_eq!(resp.status(), 200);
                let body = resp.bytes().await.expect("body");
                assert!(body.len() > 500 * 60, "a full page");
            })
        });
        for r in requests.collect::<Vec<_>>() {
            r.await.expect("join");
        }
        peaks.push(memory_kib(child.id()));
    }
    let (hwm, rss) = *peaks.last().expect("rounds");
    println!(
        "router memory: after one fan-out VmRSS {} KiB; under 50 concurrent fan-outs of 3 x 500 \
         items, peak VmHWM {hwm} KiB, VmRSS after each round {:?} KiB",
        idle.1,
        peaks.iter().map(|p| p.1).collect::<Vec<_>>()
    );
    // Each fan-out holds three answers of ~60 KiB, their parsed items and the page: about
    // 0.5 MiB, so 50 at once need some 25 MiB over the idle process.
    assert!(
        hwm < idle.1 + 96 * 1024,
        "peak {hwm} KiB over an idle {} KiB",
        idle.1
    );
    // The rounds do not accumulate: the last round's peak is where the first's was.
    let first_hwm = peaks[0].0;
    assert!(hwm < first_hwm + 16 * 1024, "peaks {peaks:?}");
    assert!(rss <= hwm);

    // The access log line of a fan-out names every region it asked.
    let log = std::fs::read_to_string(&log_path).expect("log");
    let line = log
        .lines()
        .find(|l| l.contains("iuid_router::access"))
        .unwrap_or_else(|| panic!("an access log line in\n{log}"));
    assert!(line.contains(r#""regions":"a,b,c""#), "{line}");
    assert!(line.contains(r#""route":"fanout""#), "{line}");
}

/// A region whose every answer is `bytes` long: 20 items and padding, made once (the
/// router's memory is measured, so the regions should not be what is slow).
async fn large_region(k: u64, bytes: usize) -> String {
    let items: Vec<serde_json::Value> = (0..20u64)
        .map(|n| serde_json::json!({ "id": Item::new(1_800_000_000_000 + n * 3 + k, n).id }))
        .collect();
    let mut body = serde_json::json!({ "items": items, "pad": "" }).to_string();
    body.truncate(body.len() - 2);
    body.push_str(&"x".repeat(bytes - body.len() - 2));
    body.push_str("\"}");
    let body = bytes::Bytes::from(body);
    let app = axum::Router::new().fallback(move || {
        let body = body.clone();
        async move { ([("content-type", "application/json")], body) }
    });
    common::url(common::serve(app).await)
}

/// Issue 25 item 5: 24 concurrent fan-outs of three 3.9 MB answers, three rounds, against a
/// router with `limits.fanout_buffer_bytes` of 32 MiB (the real binary in its own process).
/// The answers that do not fit are refused at once (503, `Retry-After`) rather than buffered,
/// so the peak stays near idle plus the budget; and once the load is over the router's
/// resident set returns near its idle level (the allocator's free memory is handed back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_global_byte_budget_bounds_fanout_memory_and_it_is_returned_after_the_load() {
    const ANSWER: usize = 3_900_000;
    let regions = [
        large_region(0, ANSWER).await,
        large_region(1, ANSWER).await,
        large_region(2, ANSWER).await,
    ];
    let dir = tempfile::tempdir().expect("tempdir");
    let table = common::lettered_table(
        "rss-budget",
        &[
            &[regions[0].clone()],
            &[regions[1].clone()],
            &[regions[2].clone()],
        ],
    );
    common::write(&dir, "routing-table.yaml", &table);
    let (public, admin) = (free_port(), free_port());
    // Generous timeouts: the test is about memory, on a machine that may be busy.
    let config = ConfigYaml::new()
        .listen(public)
        .admin_listen(admin)
        .route("{ fanout: /v1/orders, timeout_ms: 60000 }")
        .timeouts(5000, 60000, 60000)
        .limits("fanout_buffer_bytes: 33554432")
        .watch(false)
        .extra("workers: 2");
    let path = common::write(&dir, "router.yaml", &config.yaml());
    let child = ChildGuard::spawn(
        Command::new(env!("CARGO_BIN_EXE_iuid-router"))
            .args(["serve", "--config", path.to_str().expect("utf8")])
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
        "start router",
    );
    let ready = common::eventually(Duration::from_secs(20), || async {
        reqwest::get(format!("http://{admin}/readyz"))
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(ready.is_some(), "the router did not start");
    let url = format!("http://{public}/v1/orders?limit=20");
    let idle = memory_kib(child.id()).1;

    let (mut served, mut refused) = (0, 0);
    for _ in 0..3 {
        let requests: Vec<_> = (0..24)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move {
                    let resp = client().get(&url).send().await.expect("fan-out");
                    let status = resp.status().as_u16();
                    let retry = resp.headers().get("retry-after").cloned();
                    let _ = resp.bytes().await.expect("body");
                    (status, retry)
                })
            })
            .collect();
        for r in requests {
            match r.await.expect("join") {
                (200, _) => served += 1,
                (503, Some(retry)) => {
                    assert_eq!(retry, "1");
                    refused += 1;
                }
                other => panic!("a fan-out is served or refused with Retry-After: {other:?}"),
            }
        }
    }
    let (hwm, _) = memory_kib(child.id());
    // The last fan-out's memory is handed back off the event loop: give it a moment.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, after) = memory_kib(child.id());
    println!(
        "router memory: idle VmRSS {idle} KiB; 3 rounds of 24 concurrent fan-outs of 3 x {ANSWER} \
         bytes with a 32 MiB budget: {served} served, {refused} refused; peak VmHWM {hwm} KiB, \
         VmRSS after the load {after} KiB"
    );
    assert!(
        served > 0 && refused > 0,
        "{served} served, {refused} refused"
    );
    // The budget (32 MiB) and what the connections hold besides (measured: + 36 MiB; without
    // the budget, + 150 MiB and more).
    assert!(
        hwm < idle + 64 * 1024,
        "peak {hwm} KiB over an idle {idle} KiB"
    );
    // Measured: + 5 MiB (the pooled upstream connections' buffers); without handing the
    // memory back, + 100 MiB.
    assert!(
        after < idle + 12 * 1024,
        "after the load {after} KiB over an idle {idle} KiB"
    );
}
