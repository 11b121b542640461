//! The admin API the support console reads (docs/admin.md): `/admin/upstreams` and
//! `/admin/decode/{id}`, over real sockets.

mod common;

use std::time::Duration;

use common::{client, free_port, iuid_for, url, ConfigYaml, Router, Upstream};
use serde_json::Value;

async fn get(router: &Router, path: &str) -> Value {
    let resp = client()
        .get(router.admin_url(path))
        .send()
        .await
        .expect("admin");
    assert_eq!(resp.status(), 200, "{path}");
    resp.json().await.expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_report_health_and_decode_reads_every_scheme() {
    let up = Upstream::start("a").await;
    let dead = url(free_port());
    let table = format!(
        "version: console\nregions:\n  a: {{ upstreams: [\"{}\"] }}\n  b: {{ upstreams: [\"{dead}\"] }}\ncountries:\n  1: a\n  2: b\nschemes:\n  posts: {{ kind: snowflake, layout: instagram, route_by: {{ field: shard }}, map: {{ \"0-8191\": a }} }}\ndefault_region: a\n",
        up.url()
    );
    let config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .timeouts(300, 2000, 10_000)
        .watch(false)
        .extra("health: { eject_after: 1, ejection_ms: 60000 }")
        .yaml();
    let router = Router::start(&config, &table).await;
    // One failed request to b ejects its only upstream.
    let resp = client()
        .get(router.url(&format!("/v1/orders/{}", iuid_for(2))))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), 502);
    let report = common::eventually(Duration::from_secs(2), || async {
        let v = get(&router, "/admin/upstreams").await;
        v["regions"][1]["upstreams"][0]["state"] == "ejected"
    })
    .await;
    assert!(report.is_some(), "b's upstream shows as ejected");
    let v = get(&router, "/admin/upstreams").await;
    assert_eq!(v["regions"][0]["name"], "a");
    assert_eq!(v["regions"][0]["upstreams"][0]["state"], "healthy");
    assert_eq!(v["regions"][0]["upstreams"][0]["protocol"], "http1");
    assert!(v["regions"][1]["upstreams"][0]["ejected_for_ms"]
        .as_u64()
        .is_some());
    assert_eq!(v["regions"][1]["upstreams"][0]["ejections"], 1);

    // An iUID: valid as `iuid` (owned by a), not a snowflake.
    let d = get(&router, &format!("/admin/decode/{}", iuid_for(1))).await;
    let readings = d["readings"].as_array().expect("readings");
    assert_eq!(readings[0]["scheme"], "iuid");
    assert_eq!(readings[0]["valid"], true);
    assert_eq!(readings[0]["reading"]["region"], "a");
    assert!(readings[0]["reading"]["created_at"].is_string());
    assert_eq!(readings[1]["scheme"], "posts");
    assert_eq!(readings[1]["valid"], false);
    assert!(readings[1]["error"].is_string());

    // A country no region owns: valid, unowned, with why.
    let nobody = common::iuid(common::MINTED_MS, 9, 1, 7);
    let d = get(&router, &format!("/admin/decode/{nobody}")).await;
    assert_eq!(d["readings"][0]["valid"], true);
    assert!(d["readings"][0]["unowned"].is_string(), "{d}");

    // A snowflake: not an iUID, a post of shard 0 in a.
    let d = get(&router, "/admin/decode/1234567890123").await;
    assert_eq!(d["readings"][0]["valid"], false);
    assert_eq!(d["readings"][1]["valid"], true);
    assert_eq!(d["readings"][1]["reading"]["region"], "a");
}

/// What the console shows besides ids: the table at a glance, per-region rates over the
/// last minute, and the last reloads with their errors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn summary_rates_and_reload_history() {
    let up = Upstream::start("a").await;
    let dead = url(free_port());
    let table = |version: &str| {
        format!(
            "version: {version}\nregions:\n  a: {{ upstreams: [\"{}\"] }}\n  b: {{ upstreams: [\"{dead}\"], protocol: h2 }}\ncountries:\n  1: {{ code: KZ, region: a }}\n  2: b\nservices:\n  1: Order\n  2: Wallet\nschemes:\n  posts: {{ kind: snowflake, layout: instagram, route_by: {{ field: shard }}, map: {{ \"0-8191\": a }} }}\noverrides:\n  - {{ service: Wallet, region: a }}\ndefault_region: a\n",
            up.url()
        )
    };
    let config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .timeouts(300, 2000, 10_000)
        .watch(false)
        .yaml();
    let router = Router::start(&config, &table("one")).await;

    let s = get(&router, "/admin/routing-table/summary").await;
    assert_eq!(s["version"], "one");
    assert_eq!(s["default_region"], "a");
    assert_eq!(s["regions"][0]["upstreams"][0], up.url());
    assert_eq!(s["regions"][1]["protocol"], "h2");
    assert_eq!(
        s["countries"],
        serde_json::json!([{"id": 1, "code": "KZ", "region": "a"}, {"id": 2, "code": null, "region": "b"}])
    );
    assert_eq!(s["services"][1]["name"], "Wallet");
    assert_eq!(s["schemes"][1]["kind"], "snowflake");
    assert_eq!(s["overrides"][0]["service"], 2);
    assert_eq!(s["overrides"][0]["region"], "a");

    // 3 answered by a, 2 failed for b (its upstream is down): 5xx count against b only.
    for (country, n, want) in [(1, 3, 200), (2, 2, 502)] {
        for _ in 0..n {
            let resp = client()
                .get(router.url(&format!("/v1/orders/{}", iuid_for(country))))
                .send()
                .await
                .expect("request");
            assert_eq!(resp.status(), want);
        }
    }
    let r = get(&router, "/admin/rates").await;
    assert_eq!(r["window_s"], 60);
    assert_eq!(r["regions"][0]["region"], "a");
    assert_eq!(r["regions"][0]["requests"], 3);
    assert_eq!(r["regions"][0]["errors"], 0);
    assert_eq!(r["regions"][1]["requests"], 2);
    assert_eq!(r["regions"][1]["errors"], 2);
    assert_eq!(r["regions"][1]["error_ratio"], 1.0);

    // A refused reload, a good one, then the same bytes again: newest first.
    let path = router.dir.path().join("routing-table.yaml");
    std::fs::write(&path, "version: broken\nregions: {}\n").expect("write");
    let reload = || async {
        client()
            .post(router.admin_url("/admin/reload"))
            .send()
            .await
            .expect("reload")
            .status()
    };
    assert_eq!(reload().await, 422);
    std::fs::write(&path, table("two")).expect("write");
    assert_eq!(reload().await, 200);
    assert_eq!(reload().await, 200);
    let st = get(&router, "/admin/routing-table").await;
    let recent = st["recent_reloads"].as_array().expect("recent_reloads");
    let outcomes: Vec<&str> = recent
        .iter()
        .map(|r| r["outcome"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(outcomes, ["unchanged", "installed", "refused"]);
    assert_eq!(recent[0]["version"], "two");
    assert_eq!(
        recent[2]["version"], "one",
        "a refused reload leaves the old table"
    );
    let errors = recent[2]["errors"].as_array().expect("errors");
    assert!(
        errors
            .iter()
            .any(|e| e.as_str().unwrap_or("").contains("routing-table.yaml:")),
        "{errors:?}"
    );
}
