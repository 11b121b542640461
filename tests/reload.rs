//! docs/routing-table.md#hot-reload hot reload and §8 admin API, with the router in this process: file changes, the
//! ConfigMap symlink swap, refused tables, POST /admin/reload, and reloads under load.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{client, eventually, iuid_for, write, ConfigYaml, Router, Upstream};

/// A table where country 2 belongs to `owner`.
fn table(version: &str, us: &Upstream, ap: &Upstream, owner: &str) -> String {
    format!(
        "version: \"{version}\"\nregions:\n  us: {{ upstreams: [\"{}\"] }}\n  ap: {{ upstreams: [\"{}\"] }}\ncountries:\n  2: {owner}\ndefault_region: us\n",
        us.url(),
        ap.url()
    )
}

/// Like [`table`], with a third region `eu` as the default: no version sends country 2 there,
/// so a request for country 2 that `eu` answers was misrouted.
fn table_with_eu(
    version: &str,
    us: &Upstream,
    ap: &Upstream,
    eu: &Upstream,
    owner: &str,
) -> String {
    format!(
        "version: \"{version}\"\nregions:\n  us: {{ upstreams: [\"{}\"] }}\n  ap: {{ upstreams: [\"{}\"] }}\n  eu: {{ upstreams: [\"{}\"] }}\ncountries:\n  2: {owner}\ndefault_region: eu\n",
        us.url(),
        ap.url(),
        eu.url()
    )
}

/// `/o/{id}`, the file watched (debounced 100 ms) or not.
fn config(watch: bool) -> String {
    ConfigYaml::new()
        .route_path("/o/{id}")
        .watch(watch)
        .debounce_ms(100)
        .yaml()
}

async fn admin_json(router: &Router, path: &str) -> serde_json::Value {
    client()
        .get(router.admin_url(path))
        .send()
        .await
        .expect("admin answers")
        .json()
        .await
        .expect("json")
}

/// `POST /admin/reload`.
async fn post_reload(router: &Router) -> reqwest::Response {
    client()
        .post(router.admin_url("/admin/reload"))
        .send()
        .await
        .expect("reload")
}

async fn served_by(router: &Router, country: u8) -> String {
    let resp = client()
        .get(router.url(&format!("/o/{}", iuid_for(country))))
        .send()
        .await
        .expect("answer");
    resp.headers()
        .get("x-upstream")
        .map(|v| v.to_str().expect("ascii").to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_table_change_on_disk_serves_within_two_seconds() {
    let (us, ap) = (Upstream::start("us").await, Upstream::start("ap").await);
    let router = Router::start(&config(true), &table("v1", &us, &ap, "us")).await;
    assert_eq!(served_by(&router, 2).await, "us");
    // Editors save by writing a temp file and renaming it over the old one.
    let tmp = write(
        &router.dir,
        ".routing-table.yaml.swp",
        &table("v2", &us, &ap, "ap"),
    );
    std::fs::rename(&tmp, router.dir.path().join("routing-table.yaml")).expect("rename");
    let took = eventually(Duration::from_secs(2), || async {
        served_by(&router, 2).await == "ap"
    })
    .await;
    assert!(took.is_some(), "the new table was not serving within 2 s");
    let status = admin_json(&router, "/admin/routing-table").await;
    assert_eq!(status["version"], "v2");
    assert_eq!(status["reloads"], 1);
}

/// A reload reads the file, and reading is not a change: with the watch on, one reload stays
/// one (inotify reports opens too; counting them made every reload trigger the next).
#[tokio::test]
async fn a_reload_does_not_trigger_another() {
    let (us, ap) = (Upstream::start("us").await, Upstream::start("ap").await);
    let router = Router::start(&config(true), &table("v1", &us, &ap, "us")).await;
    assert_eq!(post_reload(&router).await.status(), 200);
    // Ten debounce periods (100 ms) for a loop to show.
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let status = admin_json(&router, "/admin/routing-table").await;
    let recent = status["recent_reloads"].as_array().expect("recent_reloads");
    assert_eq!(recent.len(), 1, "{recent:?}");
    assert_eq!(recent[0]["outcome"], "unchanged");
}

#[tokio::test]
async fn a_configmap_symlink_swap_serves_within_two_seconds() {
    let (us, ap) = (Upstream::start("us").await, Upstream::start("ap").await);
    // The layout the kubelet makes: file → ..data/file, ..data → ..<timestamp>/.
    let dir = tempfile::tempdir().expect("tempdir");
    let v1 = dir.path().join("..2026_11_22_10_00_00.1");
    std::fs::create_dir(&v1).expect("mkdir");
    std::fs::write(v1.join("routing-table.yaml"), table("v1", &us, &ap, "us")).expect("write");
    std::os::unix::fs::symlink("..2026_11_22_10_00_00.1", dir.path().join("..data")).expect("ln");
    std::os::unix::fs::symlink(
        "..data/routing-table.yaml",
        dir.path().join("routing-table.yaml"),
    )
    .expect("ln");
    let router = Router::start_in(dir, &config(true)).await;
    assert_eq!(served_by(&router, 2).await, "us");

    // The update: a new timestamped dir, a new ..data_tmp link, renamed over ..data.
    let v2 = router.dir.path().join("..2026_11_22_10_05_00.2");
    std::fs::create_dir(&v2).expect("mkdir");
    std::fs::write(v2.join("routing-table.yaml"), table("v2", &us, &ap, "ap")).expect("write");
    let tmp = router.dir.path().join("..data_tmp");
    std::os::unix::fs::symlink("..2026_11_22_10_05_00.2", &tmp).expect("ln");
    std::fs::rename(&tmp, router.dir.path().join("..data")).expect("swap");
    std::fs::remove_dir_all(router.dir.path().join("..2026_11_22_10_00_00.1")).expect("rm old");

    let took = eventually(Duration::from_secs(2), || async {
        served_by(&router, 2).await == "ap"
    })
    .await;
    assert!(
        took.is_some(),
        "the swapped table was not serving within 2 s"
    );
    assert_eq!(
        admin_json(&router, "/admin/routing-table").await["version"],
        "v2"
    );
}

#[tokio::test]
async fn an_invalid_table_is_refused_and_the_old_one_keeps_serving() {
    let (us, ap) = (Upstream::start("us").await, Upstream::start("ap").await);
    let router = Router::start(&config(true), &table("v1", &us, &ap, "us")).await;
    let good_hash = admin_json(&router, "/admin/routing-table").await["content_sha256"].clone();
    write(
        &router.dir,
        "routing-table.yaml",
        &table("v2", &us, &ap, "mars"),
    );
    // Written in place: the watch may also see the truncated file first; either way the
    // last refusal must be the final content's.
    let seen = eventually(Duration::from_secs(2), || async {
        admin_json(&router, "/admin/routing-table").await["last_reload_error"]
            .to_string()
            .contains("mars")
    })
    .await;
    assert!(seen.is_some(), "the refusal was not reported");
    let status = admin_json(&router, "/admin/routing-table").await;
    assert_eq!(status["version"], "v1");
    assert_eq!(status["content_sha256"], good_hash);
    assert!(status["failed_reloads"].as_u64() >= Some(1));
    assert!(
        status["source"]
            .as_str()
            .is_some_and(|s| s.ends_with("routing-table.yaml")),
        "{status}"
    );
    let loaded_at = status["loaded_at"].as_str().expect("loaded_at");
    assert!(
        time::OffsetDateTime::parse(loaded_at, &time::format_description::well_known::Rfc3339)
            .is_ok(),
        "loaded_at {loaded_at} is RFC 3339"
    );
    // The refusal is counted in the metrics too (the registry is process-wide: at least one).
    let failures = router
        .metric("iuid_router_table_reloads_total", &["result=\"failure\""])
        .await;
    assert!(failures >= 1.0, "reload failures counted: {failures}");
    let error = status["last_reload_error"]["errors"][0]
        .as_str()
        .expect("error text");
    assert!(
        error.contains("routing-table.yaml:6:6: region `mars` is not defined"),
        "{error}"
    );
    assert_eq!(
        served_by(&router, 2).await,
        "us",
        "the old table keeps serving"
    );

    // Fixing the file clears the error.
    write(
        &router.dir,
        "routing-table.yaml",
        &table("v3", &us, &ap, "ap"),
    );
    let fixed = eventually(Duration::from_secs(2), || async {
        admin_json(&router, "/admin/routing-table").await["version"] == "v3"
    })
    .await;
    assert!(fixed.is_some());
    assert!(admin_json(&router, "/admin/routing-table").await["last_reload_error"].is_null());
}

#[tokio::test]
async fn post_admin_reload_reloads_and_reports_errors() {
    let (us, ap) = (Upstream::start("us").await, Upstream::start("ap").await);
    let router = Router::start(&config(false), &table("v1", &us, &ap, "us")).await;
    write(
        &router.dir,
        "routing-table.yaml",
        &table("v2", &us, &ap, "ap"),
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        served_by(&router, 2).await,
        "us",
        "no watch: nothing changes by itself"
    );

    let resp = post_reload(&router).await;
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(
        (body["version"].as_str(), body["outcome"].as_str()),
        (Some("v2"), Some("installed"))
    );
    assert_eq!(served_by(&router, 2).await, "ap");

    let resp = post_reload(&router).await;
    assert_eq!(
        resp.json::<serde_json::Value>().await.expect("json")["outcome"],
        "unchanged"
    );

    write(
        &router.dir,
        "routing-table.yaml",
        "version: v3\nregions: {}\ntypo: 1\n",
    );
    let resp = post_reload(&router).await;
    assert_eq!(resp.status(), 422);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    let problem: serde_json::Value = resp.json().await.expect("json");
    assert!(
        problem["errors"][0]
            .as_str()
            .expect("error")
            .contains("routing-table.yaml:"),
        "{problem}"
    );
    assert_eq!(served_by(&router, 2).await, "ap");
}

#[tokio::test]
async fn admin_resolve_health_and_readiness() {
    let (us, ap) = (Upstream::start("us").await, Upstream::start("ap").await);
    let router = Router::start(&config(false), &table("v1", &us, &ap, "ap")).await;
    let v = admin_json(&router, &format!("/admin/resolve/{}", iuid_for(2))).await;
    assert_eq!(v["region"], "ap");
    assert_eq!(v["rule"]["kind"], "country");
    assert_eq!(v["upstreams"][0], ap.url());
    assert_eq!(v["country"], 2);
    let resp = client()
        .get(router.admin_url("/admin/resolve/nope"))
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 400);
    let resp = client()
        .get(router.admin_url(&format!("/admin/resolve/{}", iuid_for(99))))
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 404);
    for path in ["/healthz", "/readyz"] {
        let resp = client()
            .get(router.admin_url(path))
            .send()
            .await
            .expect("answer");
        assert_eq!(resp.status(), 200, "{path}");
    }
    // The admin API is not on the public listener.
    let resp = client()
        .get(router.url("/admin/routing-table"))
        .send()
        .await
        .expect("answer");
    assert_ne!(
        resp.headers().get("content-type").map(|v| v.as_bytes()),
        Some(&b"application/json"[..])
    );
}

#[tokio::test]
async fn twenty_rewrites_under_load_fail_no_request() {
    let (us, ap, eu) = (
        Upstream::start("us").await,
        Upstream::start("ap").await,
        Upstream::start("eu").await,
    );
    let router =
        Arc::new(Router::start(&config(true), &table_with_eu("v0", &us, &ap, &eu, "us")).await);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (router, stop, sent) = (router.clone(), stop.clone(), sent.clone());
        clients.push(tokio::spawn(async move {
            let http = client();
            let url = router.url(&format!("/o/{}", iuid_for(2)));
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match http.get(&url).send().await {
                    Ok(resp) => {
                        let status = resp.status().as_u16();
                        let from = resp
                            .headers()
                            .get("x-upstream")
                            .map(|v| v.to_str().unwrap_or("?").to_owned())
                            .unwrap_or_default();
                        // Either table version allows only us or ap for country 2; eu (the
                        // default region) or anything else is a misroute.
                        if status != 200 || !(from == "us" || from == "ap") {
                            failures.push(format!("{status} from {from:?}"));
                        }
                    }
                    Err(e) => failures.push(e.to_string()),
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
            failures
        }));
    }
    for i in 1..=20 {
        let owner = if i % 2 == 0 { "us" } else { "ap" };
        let tmp = write(
            &router.dir,
            ".next",
            &table_with_eu(&format!("v{i}"), &us, &ap, &eu, owner),
        );
        std::fs::rename(&tmp, router.dir.path().join("routing-table.yaml")).expect("rename");
        // Every rewrite is installed, by the watch or by this explicit reload.
        let resp = post_reload(&router).await;
        assert_eq!(resp.status(), 200);
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for c in clients {
        failures.extend(c.await.expect("client"));
    }
    assert!(
        failures.is_empty(),
        "{} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    let status = admin_json(&router, "/admin/routing-table").await;
    assert_eq!(status["version"], "v20");
    assert_eq!(status["reloads"], 20, "{status}");
    assert!(
        sent.load(Ordering::Relaxed) > 40,
        "the clients kept sending"
    );
    assert!(us.count() > 0 && ap.count() > 0, "both versions served");
    assert_eq!(eu.count(), 0, "no request went to the default region");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_flight_finishes_on_the_table_it_started_with() {
    let (us, ap) = (Upstream::start("us").await, Upstream::start("ap").await);
    let router = Router::start(&config(false), &table("v1", &us, &ap, "us")).await;
    let target = router.url(&format!("/o/{}", iuid_for(2)));
    // The upstream holds this request for 1.5 s; the table changes meanwhile.
    let slow = tokio::spawn(async move {
        let resp = client()
            .get(target)
            .header("x-delay-ms", "1500")
            .send()
            .await
            .expect("answer");
        let upstream = resp.headers()["x-upstream"]
            .to_str()
            .expect("ascii")
            .to_owned();
        (resp.status().as_u16(), upstream)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // v2 drops region `us` altogether: country 2 now belongs to `ap`.
    write(
        &router.dir,
        "routing-table.yaml",
        &format!(
            "version: v2\nregions:\n  ap: {{ upstreams: [\"{}\"] }}\ncountries:\n  2: ap\ndefault_region: ap\n",
            ap.url()
        ),
    );
    let resp = post_reload(&router).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(
        served_by(&router, 2).await,
        "ap",
        "new requests: the new table"
    );
    assert_eq!(
        slow.await.expect("join"),
        (200, "us".to_owned()),
        "the request in flight finished where the old table sent it"
    );
}

#[tokio::test]
async fn the_data_path_and_the_admin_api_name_a_problem_alike() {
    let (us, ap) = (Upstream::start("us").await, Upstream::start("ap").await);
    let router = Router::start(&config(false), &table("v1", &us, &ap, "ap")).await;
    for (id, status, urn) in [
        (
            "nope".to_owned(),
            400,
            "urn:iuid-router:problem:malformed-id",
        ),
        (iuid_for(99), 404, "urn:iuid-router:problem:unowned-country"),
    ] {
        for url in [
            router.url(&format!("/o/{id}")),
            router.admin_url(&format!("/admin/resolve/{id}")),
        ] {
            let resp = client().get(&url).send().await.expect("answer");
            assert_eq!(resp.status(), status, "{url}");
            assert_eq!(resp.headers()["content-type"], "application/problem+json");
            let problem: serde_json::Value = resp.json().await.expect("json");
            assert_eq!(problem["type"], urn, "{url}: {problem}");
            assert_eq!(problem["status"], status);
            assert!(!problem["detail"].as_str().expect("detail").is_empty());
        }
    }
}
