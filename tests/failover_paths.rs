//! Failover (`regions.<name>.failover`, docs/failover.md) on the paths that ask several
//! regions or watch them, over real sockets: fan-out lists and GraphQL `nodes` splits
//! (docs/fanout.md), the legacy probe, the admin API's `GET /admin/regions`, the metrics, and a
//! move's fence (docs/moves.md). tests/failover.rs covers one request to one region over every
//! protocol; this file covers what is built on top of it.
//!
//! A dead upstream is a loopback port where nothing listens (connect refused); a region is
//! "dark" when none of its upstreams is in rotation (ejected, or failing its active check).
//! What is shown:
//!
//! - A fan-out page with region `b` dark and failing over to `a` is 200 and not partial; its
//!   `regions` entry for `b` is `{"status": 200, "items": N, "served_by": "a", "failover":
//!   true}`; the items `a` answered for both legs appear once; `a` saw `b`'s leg marked
//!   `X-Iuid-Failover: b`. Both while `b`'s upstreams refuse connections and once ejected.
//! - A GraphQL `nodes(ids:)` split over `a` and dark `b` answers every node, and says in
//!   `extensions.regions` that `b`'s came from `a`.
//! - The legacy probe never asks a dark region (nor its failover region in its place), and an
//!   id that region may own is not remembered as nobody's: once the region passes its checks
//!   again, the next request probes it and finds the id there.
//! - `GET /admin/regions` gives each region's health share, upstreams in rotation and, with a
//!   failover, the share kept and failing over (`min(1, share × overprovisioning)`).
//! - `iuid_router_failover_requests_total{region,to,access}` counts the reads failed over, and
//!   `iuid_router_region_health_ratio{region}` falls to 0 within about two seconds of a region
//!   going dark.
//! - A write of a fenced move whose `from` region is dark is still held and answered 503
//!   `moving` after `hold_ms`; it never reaches the failover region, under `serves: reads` or
//!   `serves: all`.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{client, iuid, iuid_for, url, ConfigYaml, Received, Router, Upstream, MINTED_MS};
use serde_json::{json, Value};

/// Retries never refused by the budget while a test sends its few requests.
const RETRIES: &str = "retries: { max_retries: 2, budget_percent: 100, min_per_second: 1000 }\n";

/// Outlier ejection at the first failure, for a minute, of every upstream of a region.
const EJECT_AT_ONCE: &str =
    "health: { eject_after: 1, ejection_ms: 60000, max_ejected_percent: 100 }\n";

/// Active checks every 100 ms: an upstream failing them is out of rotation within a few.
const CHECKS: &str = "health_check: { path: /healthz, interval_ms: 100, timeout_ms: 500 }\n";

/// An upstream URL where nothing listens: connect refused.
fn dead() -> String {
    url(common::free_port())
}

/// A routing table of `regions` (name, upstream URLs, more keys of its map such as
/// `, failover: { region: a }`), country `k + 1` owned by the `k`th, the first the default.
fn table(version: &str, regions: &[(&str, &[String], &str)]) -> String {
    let mut text = format!("version: {version}\nregions:\n");
    for (name, upstreams, keys) in regions {
        let list: Vec<String> = upstreams.iter().map(|u| format!("\"{u}\"")).collect();
        text += &format!("  {name}: {{ upstreams: [{}]{keys} }}\n", list.join(", "));
    }
    text += "countries:\n";
    for (k, (name, _, _)) in regions.iter().enumerate() {
        text += &format!("  {}: {name}\n", k + 1);
    }
    text + &format!("default_region: {}\n", regions[0].0)
}

/// `region`'s entry of `GET /admin/regions`.
async fn region_report(router: &Router, region: &str) -> Value {
    let report = common::get_json(&router.admin_url("/admin/regions")).await;
    report["regions"]
        .as_array()
        .expect("regions")
        .iter()
        .find(|r| r["name"] == region)
        .cloned()
        .unwrap_or_else(|| panic!("no region {region}: {report}"))
}

/// Waits (10 s at most) until `region`'s health share is `share`.
async fn wait_share(router: &Router, region: &str, share: f64) {
    let reached = common::eventually(Duration::from_secs(10), || async {
        region_report(router, region).await["health_share"]
            .as_f64()
            .is_some_and(|s| (s - share).abs() < 1e-9)
    })
    .await;
    assert!(
        reached.is_some(),
        "{region}'s health share did not become {share}: {}",
        region_report(router, region).await
    );
}

/// `headers`' `X-Iuid-Failover`.
fn marked(headers: &http::HeaderMap) -> Option<&str> {
    headers
        .get("x-iuid-failover")
        .map(|v| v.to_str().expect("ascii"))
}

/// What an [`Upstream`] received, its health checks left out.
fn requests(upstream: &Upstream) -> Vec<Received> {
    upstream
        .received
        .lock()
        .expect("log")
        .iter()
        .filter(|r| r.target != "/healthz")
        .cloned()
        .collect()
}

/// Asserts `got` is the number `want` (to 1e-9), naming `what`.
fn assert_near(got: &Value, want: f64, what: &str) {
    let got = got
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: not a number: {got}"));
    assert!((got - want).abs() < 1e-9, "{what}: {got}, not {want}");
}

// ---- Fan-out lists ---------------------------------------------------------------------------

/// A list endpoint standing for one region: every `GET` is answered `{"items": items}` (the
/// items already newest first, fewer than any page's limit) and its fields recorded.
async fn list_upstream(items: Vec<Value>) -> (String, Arc<Mutex<Vec<http::HeaderMap>>>) {
    let seen: Arc<Mutex<Vec<http::HeaderMap>>> = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |headers: http::HeaderMap| {
        let (log, items) = (log.clone(), items.clone());
        async move {
            log.lock().expect("log").push(headers);
            axum::Json(json!({ "items": items }))
        }
    });
    (url(common::serve(app).await), seen)
}

/// An item of a list: an iUID of `country` minted `ms` after [`MINTED_MS`].
fn list_item(country: u8, ms: u64, from: &str) -> (String, Value) {
    let id = iuid(MINTED_MS + ms, country, 1, ms);
    (id.clone(), json!({ "id": id, "from": from }))
}

/// Region `b` dark (two dead upstreams) and failing over to `a`; `c` up. A fan-out page is
/// 200, not partial, with `b`'s entry served by `a`; `a`'s items, returned by both legs,
/// appear once; `a` saw `b`'s leg marked. First while `b`'s upstreams refuse connections
/// (the leg retried on `a`), then once both are ejected (the health share sends it there).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fanout_page_names_the_failover_region_that_served_a_dark_regions_leg() {
    let a_items = [
        list_item(1, 30, "a"),
        list_item(1, 20, "a"),
        list_item(1, 10, "a"),
    ];
    let c_items = [list_item(3, 25, "c"), list_item(3, 15, "c")];
    let (a, a_seen) = list_upstream(a_items.iter().map(|(_, v)| v.clone()).collect()).await;
    let (c, c_seen) = list_upstream(c_items.iter().map(|(_, v)| v.clone()).collect()).await;
    let t = table(
        "fanout-failover",
        &[
            ("a", &[a], ""),
            ("b", &[dead(), dead()], ", failover: { region: a }"),
            ("c", &[c], ""),
        ],
    );
    let config = ConfigYaml::new()
        .route(
            "{ fanout: /v1/list, scheme: iuid, items: /items, id_field: id, timeout_ms: 2000, \
             limit: { param: limit, default: 10, max: 20 } }",
        )
        .timeouts(300, 2000, 10_000)
        .watch(false)
        .extra(EJECT_AT_ONCE)
        .extra(RETRIES);
    let router = Router::start(&config.yaml(), &t).await;
    // Newest first: a 30, c 25, a 20, c 15, a 10.
    let want: Vec<String> = [
        &a_items[0],
        &c_items[0],
        &a_items[1],
        &c_items[1],
        &a_items[2],
    ]
    .iter()
    .map(|(id, _)| id.clone())
    .collect();

    let page = || async {
        let before = a_seen.lock().expect("log").len();
        let resp = client()
            .get(router.url("/v1/list?user=7"))
            .send()
            .await
            .expect("page");
        let status = resp.status().as_u16();
        let page: Value = resp.json().await.expect("JSON page");
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["partial"], false, "{page}");
        assert_eq!(
            page["regions"]["b"],
            json!({"status": 200, "items": 3, "served_by": "a", "failover": true}),
            "{page}"
        );
        assert_eq!(
            page["regions"]["a"],
            json!({"status": 200, "items": 3}),
            "{page}"
        );
        assert_eq!(
            page["regions"]["c"],
            json!({"status": 200, "items": 2}),
            "{page}"
        );
        let ids: Vec<String> = page["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["id"].as_str().expect("id").to_owned())
            .collect();
        assert_eq!(ids, want, "each id once, newest first: {page}");
        // Items pass through as the regions wrote them.
        let from: Vec<&str> = page["items"]
            .as_array()
            .expect("items")
            .iter()
            .map(|i| i["from"].as_str().expect("from"))
            .collect();
        assert_eq!(from, ["a", "c", "a", "c", "a"], "{page}");
        // a answered its own leg and b's, the latter marked.
        let got: Vec<Option<String>> = a_seen.lock().expect("log")[before..]
            .iter()
            .map(|h| marked(h).map(str::to_owned))
            .collect();
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(
            sorted,
            vec![None, Some("b".to_owned())],
            "a's requests for this page: {got:?}"
        );
    };

    // b's upstreams still refuse connections: b's leg is retried on a.
    page().await;
    // Until both of b's upstreams are ejected (the share may keep a leg with b meanwhile).
    let dark = common::eventually(Duration::from_secs(10), || async {
        page().await;
        region_report(&router, "b").await["health_share"] == 0.0
    })
    .await;
    assert!(
        dark.is_some(),
        "b never went dark: {}",
        region_report(&router, "b").await
    );
    // Dark: the health share sends b's leg to a at once.
    for _ in 0..3 {
        page().await;
    }
    assert!(
        c_seen
            .lock()
            .expect("log")
            .iter()
            .all(|h| marked(h).is_none()),
        "c's legs are its own"
    );
}

// ---- GraphQL nodes split ---------------------------------------------------------------------

/// What a [`graphql_region`] was asked: each request's fields and the ids in it.
type Asked = Arc<Mutex<Vec<(http::HeaderMap, Vec<String>)>>>;

/// A GraphQL server standing for one region: `nodes(ids: $ids)` answers each id as
/// `{"id", "region": <name>}`; it records each request's fields and the ids it was asked for.
async fn graphql_region(name: &'static str) -> (String, Asked) {
    let asked: Asked = Arc::default();
    let log = asked.clone();
    let app =
        axum::Router::new().fallback(move |headers: http::HeaderMap, body: axum::body::Bytes| {
            let log = log.clone();
            async move {
                let op: Value = serde_json::from_slice(&body).expect("JSON operation");
                let ids: Vec<String> = op["variables"]["ids"]
                    .as_array()
                    .expect("ids")
                    .iter()
                    .map(|v| v.as_str().expect("id").to_owned())
                    .collect();
                let nodes: Vec<Value> = ids
                    .iter()
                    .map(|id| json!({"id": id, "region": name}))
                    .collect();
                log.lock().expect("log").push((headers, ids));
                axum::Json(json!({"data": {"list": nodes}}))
            }
        });
    (url(common::serve(app).await), asked)
}

/// A `nodes(ids:)` split over `a` and `b`, `b` dark and failing over to `a`: every node comes
/// back (`b`'s from `a`), with no error, and `extensions.regions` names the failover; `a` got
/// `b`'s ids in a request marked `X-Iuid-Failover: b`. While `b` refuses connections and once
/// it is ejected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_split_answers_a_dark_regions_ids_from_its_failover_region() {
    let (a, a_asked) = graphql_region("a").await;
    let t = table(
        "split-failover",
        &[
            ("a", &[a], ""),
            ("b", &[dead(), dead()], ", failover: { region: a }"),
        ],
    );
    let config = ConfigYaml::new()
        .route("{ graphql: /graphql, split_nodes: true }")
        .timeouts(300, 2000, 10_000)
        .watch(false)
        .extra(EJECT_AT_ONCE)
        .extra(RETRIES);
    let router = Router::start(&config.yaml(), &t).await;
    let id = |country: u8, rand: u64| iuid(MINTED_MS, country, 1, rand);
    let ids = [id(2, 1), id(1, 2), id(2, 3), id(1, 4)];
    let query = "query Q($ids: [ID!]!) { list: nodes(ids: $ids) { id } }";

    let split = || async {
        let before = a_asked.lock().expect("log").len();
        let resp = client()
            .post(router.url("/graphql"))
            .json(&json!({"query": query, "variables": {"ids": ids}}))
            .send()
            .await
            .expect("request");
        let status = resp.status().as_u16();
        let answer: Value = resp.json().await.expect("JSON answer");
        assert_eq!(status, 200, "{answer}");
        assert!(answer.get("errors").is_none(), "no error: {answer}");
        let nodes = answer["data"]["list"].as_array().expect("list");
        assert_eq!(nodes.len(), ids.len(), "{answer}");
        for (node, id) in nodes.iter().zip(&ids) {
            assert_eq!(
                *node,
                json!({"id": id, "region": "a"}),
                "every node, in request order: {answer}"
            );
        }
        assert_eq!(
            answer["extensions"],
            json!({"regions": [{"region": "b", "served_by": "a", "failover": true}]}),
            "{answer}"
        );
        let mut got: Vec<(Option<String>, Vec<String>)> = a_asked.lock().expect("log")[before..]
            .iter()
            .map(|(h, ids)| (marked(h).map(str::to_owned), ids.clone()))
            .collect();
        got.sort();
        assert_eq!(
            got,
            vec![
                (None, vec![ids[1].clone(), ids[3].clone()]),
                (Some("b".to_owned()), vec![ids[0].clone(), ids[2].clone()]),
            ],
            "a's requests: its own ids, then b's marked"
        );
    };

    split().await;
    let dark = common::eventually(Duration::from_secs(10), || async {
        split().await;
        region_report(&router, "b").await["health_share"] == 0.0
    })
    .await;
    assert!(
        dark.is_some(),
        "b never went dark: {}",
        region_report(&router, "b").await
    );
    split().await;
}

// ---- Legacy probe ----------------------------------------------------------------------------

/// A regional gateway for the legacy probe: `GET /v1/orders/<id>` is 200 (its name in the
/// body) for an id it holds, else 404; `/healthz` is 503 while it is dark, else 200. It
/// records the fields of every request but its checks.
#[derive(Clone)]
struct Gateway {
    url: String,
    holds: Arc<Mutex<Vec<String>>>,
    dark: Arc<AtomicBool>,
    seen: Arc<Mutex<Vec<http::HeaderMap>>>,
}

impl Gateway {
    async fn start(name: &'static str, dark: bool) -> Gateway {
        let holds: Arc<Mutex<Vec<String>>> = Arc::default();
        let dark = Arc::new(AtomicBool::new(dark));
        let seen: Arc<Mutex<Vec<http::HeaderMap>>> = Arc::default();
        let (h, d, s) = (holds.clone(), dark.clone(), seen.clone());
        let app = axum::Router::new().fallback(move |uri: http::Uri, headers: http::HeaderMap| {
            let (h, d, s) = (h.clone(), d.clone(), s.clone());
            async move {
                if uri.path() == "/healthz" {
                    return if d.load(Ordering::SeqCst) {
                        (http::StatusCode::SERVICE_UNAVAILABLE, "dark")
                    } else {
                        (http::StatusCode::OK, "ok")
                    };
                }
                s.lock().expect("seen").push(headers);
                let id = uri.path().rsplit('/').next().unwrap_or_default();
                if h.lock().expect("holds").iter().any(|held| held == id) {
                    (http::StatusCode::OK, name)
                } else {
                    (http::StatusCode::NOT_FOUND, "no such order")
                }
            }
        });
        Gateway {
            url: url(common::serve(app).await),
            holds,
            dark,
            seen,
        }
    }

    fn seen(&self) -> usize {
        self.seen.lock().expect("seen").len()
    }
}

/// A UUIDv4: an id from before the iUID, without routing bits.
const OLD: &str = "9b2e4c1a-7d3f-4e8b-a6c5-0f1e2d3c4b5a";

/// `legacy: probe` over `a` (the default), `b`, and `c`, which holds the id but is dark
/// (failing its checks) and fails over to `a`. A read of the id: `a` answers 404, `b` is
/// probed, `c` is not, nor is `a` asked in its place; the 404 is the answer, and the id is not
/// remembered as nobody's (a long `negative_ttl_ms`): the next read probes `b` again. Once
/// `c` passes its checks, a read probes it and finds the id there, and the next goes straight
/// to `c`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_legacy_probe_skips_a_dark_region_and_finds_the_id_there_once_it_is_back() {
    let a = Gateway::start("a", false).await;
    let b = Gateway::start("b", false).await;
    let c = Gateway::start("c", true).await;
    c.holds.lock().expect("holds").push(OLD.to_owned());
    let t = table(
        "legacy-failover",
        &[
            ("a", std::slice::from_ref(&a.url), ""),
            ("b", std::slice::from_ref(&b.url), ""),
            (
                "c",
                std::slice::from_ref(&c.url),
                ", failover: { region: a }",
            ),
        ],
    );
    let config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .timeouts(300, 2000, 10_000)
        .watch(false)
        .extra("legacy: probe")
        .extra("legacy_cache: { entries: 1000, ttl_s: 60, negative_ttl_ms: 60000 }")
        .extra("legacy_probe: { budget_percent: 100, min_per_second: 1000 }")
        .extra(CHECKS)
        .extra(RETRIES);
    let router = Router::start(&config.yaml(), &t).await;
    wait_share(&router, "c", 0.0).await;
    wait_share(&router, "b", 1.0).await;

    let get = || async {
        let resp = client()
            .get(router.url(&format!("/v1/orders/{OLD}")))
            .send()
            .await
            .expect("request");
        let failover = resp
            .headers()
            .get("x-iuid-failover")
            .map(|v| v.to_str().expect("ascii").to_owned());
        (
            resp.status().as_u16(),
            resp.text().await.expect("body"),
            failover,
        )
    };

    for n in 1..=2 {
        let (status, _, failover) = get().await;
        assert_eq!(status, 404, "read {n} while c is dark");
        assert_eq!(failover, None, "read {n}: a probe never fails over");
        assert_eq!(
            (a.seen(), b.seen(), c.seen()),
            (n, n, 0),
            "read {n}: the default region, then b probed; c not probed, a not asked for it"
        );
        assert!(
            a.seen
                .lock()
                .expect("seen")
                .iter()
                .all(|h| marked(h).is_none()),
            "a was asked in c's place"
        );
    }

    // c comes back: its checks pass, and the id is probed again and found there.
    c.dark.store(false, Ordering::SeqCst);
    wait_share(&router, "c", 1.0).await;
    let (status, body, failover) = get().await;
    assert_eq!(
        (status, body.as_str(), failover),
        (200, "c", None),
        "the id was remembered as nobody's"
    );
    assert_eq!(c.seen(), 1, "c probed once it was back");
    // The owner is remembered: straight to c.
    let a_before = a.seen();
    let (status, body, _) = get().await;
    assert_eq!((status, body.as_str()), (200, "c"));
    assert_eq!((a.seen(), c.seen()), (a_before, 2));
}

// ---- GET /admin/regions ----------------------------------------------------------------------

/// `b` on four upstreams, two of them dead and failing their checks, failing over to `a`:
/// `/admin/regions` says a health share of 0.5, 2 of 4 in rotation, and that `b` keeps
/// `min(1, 0.5 × 1.4) = 0.7` of its reads and fails 0.3 over to `a`. `a` is whole, without a
/// failover; `c`, whole with `serves: all` and an overprovisioning of 2, keeps everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_regions_shows_each_regions_health_share_and_what_fails_over() {
    let a = Upstream::start("a").await;
    let (b1, b2) = (Upstream::start("b").await, Upstream::start("b").await);
    let c = Upstream::start("c").await;
    let t = table(
        "regions-report",
        &[
            ("a", &[a.url()], ""),
            (
                "b",
                &[b1.url(), dead(), b2.url(), dead()],
                ", failover: { region: a }",
            ),
            (
                "c",
                &[c.url()],
                ", failover: { region: a, serves: all, overprovisioning: 2 }",
            ),
        ],
    );
    let config = common::orders_config().extra(CHECKS);
    let router = Router::start(&config.yaml(), &t).await;
    wait_share(&router, "b", 0.5).await;

    let report = common::get_json(&router.admin_url("/admin/regions")).await;
    assert_eq!(report["table_version"], "regions-report", "{report}");
    let names: Vec<&str> = report["regions"]
        .as_array()
        .expect("regions")
        .iter()
        .map(|r| r["name"].as_str().expect("name"))
        .collect();
    assert_eq!(names, ["a", "b", "c"], "in table order: {report}");

    let b = region_report(&router, "b").await;
    assert_near(&b["health_share"], 0.5, "b's health share");
    assert_eq!(
        (&b["in_rotation"], &b["upstreams"]),
        (&json!(2), &json!(4)),
        "{b}"
    );
    let f = &b["failover"];
    assert_eq!(
        (&f["region"], &f["serves"]),
        (&json!("a"), &json!("reads")),
        "{b}"
    );
    assert_near(&f["overprovisioning"], 1.4, "b's overprovisioning");
    assert_near(&f["kept"], 0.7, "b's kept share");
    assert_near(&f["failing_over"], 0.3, "b's share failing over");

    let a_report = region_report(&router, "a").await;
    assert_near(&a_report["health_share"], 1.0, "a's health share");
    assert_eq!(
        (&a_report["in_rotation"], &a_report["upstreams"]),
        (&json!(1), &json!(1)),
        "{a_report}"
    );
    assert_eq!(a_report["failover"], Value::Null, "{a_report}");

    let c_report = region_report(&router, "c").await;
    assert_near(&c_report["health_share"], 1.0, "c's health share");
    let f = &c_report["failover"];
    assert_eq!(
        (&f["region"], &f["serves"]),
        (&json!("a"), &json!("all")),
        "{c_report}"
    );
    assert_near(&f["overprovisioning"], 2.0, "c's overprovisioning");
    assert_near(&f["kept"], 1.0, "c's kept share");
    assert_near(&f["failing_over"], 0.0, "c's share failing over");
}

// ---- Metrics ---------------------------------------------------------------------------------

/// Regions `m-up` and `m-dark` (names of this test alone: the recorder is the process's),
/// `m-dark` on one dead upstream failing over to `m-up`. Before any request its health gauge
/// is 1; six reads of its entity are served by `m-up` and counted in
/// `iuid_router_failover_requests_total{region="m-dark",to="m-up",access="read"}`; a write,
/// refused, is not counted; the first read ejected the upstream, and the gauge falls to 0
/// within about two seconds (it is set every second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_over_reads_are_counted_and_a_dark_regions_health_gauge_falls_to_zero() {
    let up = Upstream::start("m-up").await;
    let t = table(
        "metrics-failover",
        &[
            ("m-up", &[up.url()], ""),
            ("m-dark", &[dead()], ", failover: { region: m-up }"),
        ],
    );
    let config = common::orders_config().extra(EJECT_AT_ONCE).extra(RETRIES);
    let router = Router::start(&config.yaml(), &t).await;
    const HEALTH: &str = "iuid_router_region_health_ratio";
    const MOVED: &str = "iuid_router_failover_requests_total";
    let text = router.metrics().await;
    assert_eq!(
        common::metric_sum(&text, HEALTH, &["region=\"m-dark\""]),
        1.0,
        "m-dark whole before any request: {text}"
    );

    let path = format!("/v1/orders/{}", iuid_for(2));
    for n in 0..6 {
        let resp = client().get(router.url(&path)).send().await.expect("read");
        assert_eq!(
            (
                resp.status().as_u16(),
                resp.headers().get("x-upstream").cloned(),
                resp.headers().get("x-iuid-failover").cloned(),
            ),
            (
                200,
                Some(http::HeaderValue::from_static("m-up")),
                Some(http::HeaderValue::from_static("m-dark"))
            ),
            "read {n}"
        );
    }
    let resp = client()
        .post(router.url(&path))
        .body("w")
        .send()
        .await
        .expect("write");
    assert_eq!(resp.status(), 503, "a write stays with its dark region");
    assert_eq!(requests(&up).len(), 6, "only the reads reached m-up");
    let went_dark = Instant::now();

    let text = router.metrics().await;
    let moved = |access: &str| {
        common::metric_sum(
            &text,
            MOVED,
            &[
                "region=\"m-dark\"",
                "to=\"m-up\"",
                &format!("access=\"{access}\""),
            ],
        )
    };
    assert_eq!(moved("read"), 6.0, "{text}");
    assert_eq!(moved("write"), 0.0, "{text}");

    let zero = common::eventually(Duration::from_secs(3), || async {
        common::metric_sum(&router.metrics().await, HEALTH, &["region=\"m-dark\""]) == 0.0
    })
    .await;
    assert!(
        zero.is_some_and(|_| went_dark.elapsed() <= Duration::from_millis(2500)),
        "the health gauge of m-dark did not fall to 0 within ~2 s: {}",
        router.metrics().await
    );
    let text = router.metrics().await;
    assert_eq!(
        common::metric_sum(&text, HEALTH, &["region=\"m-up\""]),
        1.0,
        "{text}"
    );
}

// ---- A move's fence --------------------------------------------------------------------------

/// A move `b-to-c` of country 2 in `fence`, `b` dark and failing over to `a` (`serves: reads`,
/// then `serves: all`): a read of the group goes to `from` as ever, so it fails over to `a`;
/// a write is held for `hold_ms` and answered 503 `moving` (not `region-unavailable` at
/// once), and neither `a` nor `c` ever sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_moves_writes_are_held_not_sent_to_the_failover_region() {
    for serves in ["reads", "all"] {
        let (a, c) = (Upstream::start("a").await, Upstream::start("c").await);
        let moves =
            "moves:\n  - name: b-to-c\n    match: { country: 2 }\n    from: b\n    to: c\n    \
                     phase: fence\n    hold_ms: 600\n";
        let t = table(
            "fence-failover",
            &[
                ("a", &[a.url()], ""),
                (
                    "b",
                    &[dead(), dead()],
                    &format!(", failover: {{ region: a, serves: {serves} }}"),
                ),
                ("c", &[c.url()], ""),
            ],
        ) + moves;
        let config = common::orders_config().extra(EJECT_AT_ONCE).extra(RETRIES);
        let router = Router::start(&config.yaml(), &t).await;
        let path = format!("/v1/orders/{}", iuid_for(2));

        let resp = client().get(router.url(&path)).send().await.expect("read");
        assert_eq!(
            (
                resp.status().as_u16(),
                resp.headers().get("x-upstream").cloned(),
                resp.headers().get("x-iuid-failover").cloned(),
            ),
            (
                200,
                Some(http::HeaderValue::from_static("a")),
                Some(http::HeaderValue::from_static("b"))
            ),
            "serves: {serves}: a read of the group fails over"
        );

        for method in [http::Method::POST, http::Method::PUT] {
            let started = Instant::now();
            let resp = client()
                .request(method.clone(), router.url(&path))
                .body("w")
                .send()
                .await
                .expect("write");
            let took = started.elapsed();
            let status = resp.status().as_u16();
            let retry_after = resp.headers().get("retry-after").cloned();
            let body = resp.text().await.expect("body");
            assert_eq!(status, 503, "serves: {serves}: {method}: {body}");
            assert!(
                body.contains("urn:iuid-router:problem:moving"),
                "serves: {serves}: {method}: {body}"
            );
            assert!(
                took >= Duration::from_millis(550),
                "serves: {serves}: {method}: held only {took:?} (hold_ms 600)"
            );
            assert_eq!(
                retry_after,
                Some(http::HeaderValue::from_static("1")),
                "serves: {serves}: {method}"
            );
        }
        let got = requests(&a);
        assert_eq!(got.len(), 1, "serves: {serves}: only the read reached a");
        assert_eq!(got[0].method, "GET");
        assert!(
            requests(&c).is_empty(),
            "serves: {serves}: a held write reached c"
        );
    }
}
