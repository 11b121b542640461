//! The router's memory under fan-out load (SPEC §11: "memory is bounded"): the real binary
//! in its own process, three regions of 500 items each, 50 concurrent fan-outs of 3 × 500
//! items, five rounds. Its peak resident set (`VmHWM` in `/proc/<pid>/status`) must stay
//! bounded and must not grow round after round. Prints the figures (`--nocapture`).

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
