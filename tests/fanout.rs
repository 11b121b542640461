//! docs/fanout.md fan-out over real sockets: three regional list endpoints, the real router, a real
//! client paging through.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::lists::{key_of, Item, ListRegion, Mode};
use common::{client, free_port, url, ConfigYaml, Router};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::Value;

const TIMEOUT_MS: u64 = 500;

/// Three regions `a`, `b`, `c` (the table's), each with one list endpoint upstream.
fn table(upstreams: [String; 3]) -> String {
    common::lettered_table(
        "fanout-1",
        &[
            &[upstreams[0].clone()],
            &[upstreams[1].clone()],
            &[upstreams[2].clone()],
        ],
    )
}

/// A router with a desc list at `/v1/orders` (`partial`), an asc one at `/v1/orders-asc`, and
/// a desc one at `/v1/orders-strict` that fails whole (`fail`).
fn config(extra_limits: &str) -> String {
    let common = format!("scheme: iuid, items: /items, id_field: id, timeout_ms: {TIMEOUT_MS}");
    let limits = if extra_limits.is_empty() {
        "max_hops: 3".to_owned()
    } else {
        extra_limits.to_owned()
    };
    ConfigYaml::new()
        .route(&format!("{{ fanout: /v1/orders, {common}, order: desc, limit: {{ param: limit, default: 5, max: 20 }} }}"))
        .route(&format!("{{ fanout: /v1/orders-asc, {common}, order: asc, cursor: {{ param: after }} }}"))
        .route(&format!("{{ fanout: /v1/orders-strict, {common}, on_region_error: fail }}"))
        .route_path("/v1/orders/{id}")
        .timeouts(300, 2000, 10000)
        .limits(&limits)
        .watch(false)
        .yaml()
}

struct World {
    regions: [ListRegion; 3],
    router: Router,
}

async fn world(extra_limits: &str) -> World {
    let regions = [
        ListRegion::start("a").await,
        ListRegion::start("b").await,
        ListRegion::start("c").await,
    ];
    let router = Router::start(
        &config(extra_limits),
        &table([regions[0].url(), regions[1].url(), regions[2].url()]),
    )
    .await;
    World { regions, router }
}

async fn get(router: &Router, path: &str) -> (u16, http::HeaderMap, Value) {
    let resp = client()
        .get(router.url(path))
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = resp.bytes().await.expect("body");
    let value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&body)));
    (status, headers, value)
}

fn ids(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["id"].as_str().expect("id").to_owned())
        .collect()
}

/// Pages through `path` (with `limit`) following `next_cursor` in `cursor_param` until it is
/// null; every id in order.
async fn page_through(
    router: &Router,
    path: &str,
    cursor_param: &str,
    limit: usize,
) -> Vec<String> {
    let mut all = Vec::new();
    let mut target = format!("{path}?limit={limit}");
    for _ in 0..1000 {
        let (status, _, page) = get(router, &target).await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["partial"], false, "{page}");
        all.extend(ids(&page));
        match page["next_cursor"].as_str() {
            Some(cursor) => target = format!("{path}?limit={limit}&{cursor_param}={cursor}"),
            None => return all,
        }
    }
    panic!("paging did not end");
}

/// A dataset for three regions: uneven sizes, creation times from a narrow range (so many
/// items share a millisecond), and a few items held by two regions at once.
fn datasets() -> impl Strategy<Value = ([Vec<Item>; 3], usize)> {
    let item =
        (0u64..12, 0u64..1_000_000).prop_map(|(ms, rand)| Item::new(1_800_000_000_000 + ms, rand));
    (
        prop::collection::vec(item.clone(), 0..30),
        prop::collection::vec(item.clone(), 0..12),
        prop::collection::vec(item, 0..45),
        prop::collection::vec((0usize..3, any::<prop::sample::Index>()), 0..5),
        1usize..9,
    )
        .prop_map(|(a, b, c, dupes, limit)| {
            let mut sets = [a, b, c];
            for (to, pick) in dupes {
                let from = (to + 1) % 3;
                if !sets[from].is_empty() {
                    let item = sets[from][pick.index(sets[from].len())].clone();
                    sets[to].push(item);
                }
            }
            (sets, limit)
        })
}

/// Paging through every region's items with `before=<next_cursor>` (and `after=` oldest
/// first) until `next_cursor` is null returns each item exactly once, in global order.
#[test]
fn paging_through_returns_every_item_once_in_global_order() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let w = rt.block_on(world(""));
    let mut runner = TestRunner::new(Config {
        cases: 32,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&datasets(), |(sets, limit)| {
            for (region, set) in w.regions.iter().zip(&sets) {
                region.set(set.clone());
            }
            let unique: BTreeSet<(u64, String)> =
                sets.iter().flatten().map(|i| key_of(&i.id)).collect();
            let asc: Vec<String> = unique.iter().map(|(_, id)| id.clone()).collect();
            let desc: Vec<String> = asc.iter().rev().cloned().collect();
            let got_desc = rt.block_on(page_through(&w.router, "/v1/orders", "before", limit));
            prop_assert_eq!(got_desc, desc);
            let got_asc = rt.block_on(page_through(&w.router, "/v1/orders-asc", "after", limit));
            prop_assert_eq!(got_asc, asc);
            Ok(())
        })
        .expect("property");
}

#[tokio::test]
async fn a_page_is_no_store_json_and_each_region_gets_the_request_with_the_clamped_limit() {
    let w = world("").await;
    for (k, region) in w.regions.iter().enumerate() {
        region.set(
            (0..30)
                .map(|n| Item::new(1_800_000_000_000 + n, k as u64))
                .collect(),
        );
    }
    let resp = client()
        .get(w.router.url("/v1/orders?user=7&limit=9999"))
        .header("accept-encoding", "gzip")
        .header("if-none-match", "\"v1\"")
        .header("range", "bytes=0-10")
        .send()
        .await
        .expect("request");
    let (status, headers) = (resp.status().as_u16(), resp.headers().clone());
    let page: Value = resp.json().await.expect("page");
    assert_eq!(status, 200);
    assert_eq!(headers["cache-control"], "no-store");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(ids(&page).len(), 20, "limit clamped to max");
    for region in &w.regions {
        assert_eq!(
            *region.last_target.lock().expect("t"),
            "/v1/orders?user=7&limit=20"
        );
        let headers = region.last_headers.lock().expect("h").clone();
        assert_eq!(headers["via"], "1.1 edge", "docs/data-path.md header rules");
        assert!(headers.contains_key("x-forwarded-for"));
        // The router parses each answer: uncompressed, whole, unconditional.
        assert_eq!(headers["accept-encoding"], "identity");
        assert!(!headers.contains_key("if-none-match") && !headers.contains_key("range"));
        assert_eq!(page["regions"][region.name]["status"], 200);
        assert_eq!(page["regions"][region.name]["items"], 20);
    }
    // Items are returned as the regions sent them.
    assert!(page["items"][0]["region"].is_string());
    assert_eq!(page["items"][0]["created_ms"], 1_800_000_000_029u64);

    // The default limit, and a bad limit or cursor.
    let (_, _, page) = get(&w.router, "/v1/orders").await;
    assert_eq!(ids(&page).len(), 5);
    for bad in ["/v1/orders?limit=many", "/v1/orders?before=not-an-id"] {
        let resp = client()
            .get(w.router.url(bad))
            .send()
            .await
            .expect("request");
        assert_eq!(resp.status(), 400, "{bad}");
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
    }
    // GET only.
    let resp = client()
        .post(w.router.url("/v1/orders"))
        .body("{}")
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "GET");
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
}

/// Each failure kind under `partial` (200, `partial: true`, the region named with why) and
/// under `fail` (502 problem+json naming the region).
#[tokio::test]
async fn each_failure_kind_is_named_under_partial_and_fail() {
    let w = world("fanout_region_bytes: 65536").await;
    w.regions[0].set(vec![
        Item::new(1_800_000_000_001, 1),
        Item::new(1_800_000_000_002, 2),
    ]);
    w.regions[2].set(vec![Item::new(1_800_000_000_003, 3)]);
    let cases = [
        (Mode::Status(500), "status"),
        (Mode::NotJson, "not_json"),
        (Mode::NoArray, "no_items_array"),
        (Mode::BadId, "bad_id"),
        (Mode::Huge(100_000), "too_large"),
        (Mode::Hang, "timeout"),
    ];
    for (mode, error) in cases {
        w.regions[1].mode(mode.clone());
        let started = Instant::now();
        let (status, _, page) = get(&w.router, "/v1/orders").await;
        let took = started.elapsed();
        assert_eq!(status, 200, "{mode:?}: {page}");
        assert_eq!(page["partial"], true, "{mode:?}");
        assert_eq!(page["regions"]["b"]["error"], error, "{mode:?}: {page}");
        assert_eq!(ids(&page).len(), 3, "the other regions' items: {page}");
        if mode == Mode::Status(500) {
            assert_eq!(page["regions"]["b"]["status"], 500);
        }
        if mode == Mode::Hang {
            assert!(
                took < Duration::from_millis(TIMEOUT_MS + 100),
                "a hung region is cut at timeout_ms: {took:?}"
            );
        }

        let started = Instant::now();
        let resp = client()
            .get(w.router.url("/v1/orders-strict"))
            .send()
            .await
            .expect("strict");
        let took = started.elapsed();
        assert_eq!(resp.status(), 502, "{mode:?}");
        if mode == Mode::Hang {
            assert!(
                took < Duration::from_millis(TIMEOUT_MS + 100),
                "fail mode answers at timeout_ms too: {took:?}"
            );
        }
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        let problem: Value = resp.json().await.expect("problem");
        assert_eq!(problem["type"], "urn:iuid-router:problem:regions-failed");
        let why = problem["regions"]["b"]["error"].as_str().expect("named");
        assert!(why.starts_with(error), "{why}");
        assert!(problem["regions"].get("a").is_none());
    }
    w.regions[1].mode(Mode::Normal);
    let (_, _, page) = get(&w.router, "/v1/orders").await;
    assert_eq!(page["partial"], false);
}

/// A region whose upstream refuses connections is named `connect`; when every region fails
/// the answer is 502 even under `partial`.
#[tokio::test]
async fn a_refused_region_is_named_and_all_failing_is_502() {
    let good = ListRegion::start("a").await;
    good.set(vec![Item::new(1_800_000_000_001, 1)]);
    let dead = url(free_port());
    let router = Router::start(&config(""), &table([good.url(), dead.clone(), dead])).await;
    let (status, _, page) = get(&router, "/v1/orders").await;
    assert_eq!(status, 200);
    assert_eq!(page["regions"]["b"]["error"], "connect");
    assert_eq!(page["regions"]["c"]["error"], "connect");
    assert_eq!(ids(&page).len(), 1);

    good.mode(Mode::Status(503));
    let resp = client()
        .get(router.url("/v1/orders"))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), 502);

    let metrics = router.metrics().await;
    assert!(
        metrics.contains("iuid_router_fanout_requests_total{kind=\"list\",result=\"partial\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("iuid_router_fanout_legs_total{region=\"b\",outcome=\"connect\"}"));
    assert!(metrics.contains("iuid_router_fanout_leg_duration_seconds_count{region=\"a\"}"));
}

/// The byte limit holds for an answer without `Content-Length` too (chunked, counted as read).
#[tokio::test]
async fn the_byte_limit_holds_for_a_chunked_answer() {
    use axum::body::Body;
    let big = common::serve(axum::Router::new().fallback(|| async {
        let chunks = (0..64)
            .map(|i| Ok::<_, std::io::Error>(format!("{{\"pad{i}\": \"{}\"}},", "y".repeat(1000))));
        let head =
            futures_util::stream::iter([Ok::<_, std::io::Error>("{\"items\": [".to_owned())]);
        let tail = futures_util::stream::iter([Ok::<_, std::io::Error>("]}".to_owned())]);
        use futures_util::StreamExt;
        Body::from_stream(head.chain(futures_util::stream::iter(chunks)).chain(tail))
    }))
    .await;
    let good = ListRegion::start("a").await;
    good.set(vec![Item::new(1_800_000_000_001, 1)]);
    let router = Router::start(
        &config("fanout_region_bytes: 16384"),
        &table([good.url(), url(big), good.url()]),
    )
    .await;
    let (status, _, page) = get(&router, "/v1/orders").await;
    assert_eq!(status, 200);
    assert_eq!(page["regions"]["b"]["error"], "too_large", "{page}");
    assert_eq!(
        ids(&page),
        vec![common::lists::Item::new(1_800_000_000_001, 1).id]
    );
}

/// Issue 25 item 14: a cursor written as a URN, braced, in capitals or as a Relay id reaches
/// every region as the canonical id text the router parsed and merges by, and a second
/// cursor parameter is refused (400) rather than left to each region to pick one.
#[tokio::test]
async fn the_cursor_goes_to_the_regions_in_canonical_form_and_only_once() {
    let w = world("").await;
    for (k, region) in w.regions.iter().enumerate() {
        region.set(
            (0..8u64)
                .map(|n| Item::new(1_800_000_000_000 + n * 3 + k as u64, n))
                .collect(),
        );
    }
    let canonical = Item::new(1_800_000_000_012, 99).id;
    let upper = canonical.to_uppercase();
    let written = [
        format!("urn:uuid:{canonical}"),
        format!("{{{upper}}}"),
        upper.clone(),
        common::relay_id("Order", &canonical),
    ];
    for text in &written {
        let encoded: String = form_urlencoded::byte_serialize(text.as_bytes()).collect();
        let (status, _, page) =
            get(&w.router, &format!("/v1/orders?limit=3&before={encoded}")).await;
        assert_eq!(status, 200, "{text}: {page}");
        for region in &w.regions {
            assert_eq!(
                *region.last_target.lock().expect("t"),
                format!("/v1/orders?before={canonical}&limit=3"),
                "the cursor written {text}"
            );
        }
    }

    let twice = format!(
        "/v1/orders?before={canonical}&before={}",
        Item::new(1, 1).id
    );
    let hits: usize = w
        .regions
        .iter()
        .map(|r| r.hits.load(std::sync::atomic::Ordering::SeqCst))
        .sum();
    let resp = client()
        .get(w.router.url(&twice))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status(), 400);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    let problem: Value = resp.json().await.expect("problem");
    assert_eq!(problem["type"], "urn:iuid-router:problem:invalid-parameter");
    assert!(
        problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("`before`")),
        "{problem}"
    );
    let after: usize = w
        .regions
        .iter()
        .map(|r| r.hits.load(std::sync::atomic::Ordering::SeqCst))
        .sum();
    assert_eq!(after, hits, "no region was asked");
}

/// Issue 25 item 16: a failed region's entry says why: the status with the problem type and
/// title the region gave, or which item and id were bad; the 502 of `fail` names the type.
#[tokio::test]
async fn a_failed_region_entry_gives_the_reason() {
    let w = world("").await;
    w.regions[0].set(vec![Item::new(1_800_000_000_001, 1)]);
    w.regions[1].mode(Mode::Problem(503));
    w.regions[2].mode(Mode::BadId);
    let (status, _, page) = get(&w.router, "/v1/orders").await;
    assert_eq!(status, 200, "{page}");
    let b = &page["regions"]["b"];
    assert_eq!(b["error"], "status", "{page}");
    assert_eq!(b["status"], 503);
    assert_eq!(b["type"], "urn:example:problem:maintenance", "{page}");
    assert!(
        b["detail"]
            .as_str()
            .is_some_and(|d| d.contains("Down for maintenance")),
        "{page}"
    );
    let c = &page["regions"]["c"];
    assert_eq!(c["error"], "bad_id", "{page}");
    assert_eq!(c["index"], 0, "{page}");
    assert_eq!(c["id"], "order-42", "{page}");
    assert!(
        c["detail"].as_str().is_some_and(|d| d.contains("order-42")),
        "{page}"
    );

    let resp = client()
        .get(w.router.url("/v1/orders-strict"))
        .send()
        .await
        .expect("strict");
    assert_eq!(resp.status(), 502);
    let problem: Value = resp.json().await.expect("problem");
    let why = problem["regions"]["b"]["error"].as_str().expect("named");
    assert!(why.contains("urn:example:problem:maintenance"), "{why}");
    let why = problem["regions"]["c"]["error"].as_str().expect("named");
    assert!(why.contains("order-42"), "{why}");
}

/// Issue 37: a fan-out is served on the own HTTP/1.1 engine's head path: pages, a refused `POST` (405, its body dropped, the connection kept) and pages
/// again go over one kept-alive connection, and none goes through the shared phases
/// (`iuid_router_http1_shared_phases_total`, process-wide: no other test here uses them).
#[tokio::test]
async fn a_fanout_is_carried_on_the_head_path() {
    use std::io::Write;
    let regions = [
        ListRegion::start("a").await,
        ListRegion::start("b").await,
        ListRegion::start("c").await,
    ];
    let config = config("");
    let router = Router::start(
        &config,
        &table([regions[0].url(), regions[1].url(), regions[2].url()]),
    )
    .await;
    let before = router
        .metric("iuid_router_http1_shared_phases_total", &[])
        .await;
    let addr = router.addr;
    let answers = tokio::task::spawn_blocking(move || {
        let mut conn = std::net::TcpStream::connect(addr).expect("connect");
        conn.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let requests = [
            "GET /v1/orders?limit=3 HTTP/1.1\r\nHost: t\r\n\r\n",
            "POST /v1/orders HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}",
            "GET /v1/orders-asc?limit=2 HTTP/1.1\r\nHost: t\r\n\r\n",
        ];
        let mut answers = Vec::new();
        for request in requests {
            conn.write_all(request.as_bytes()).expect("write");
            answers.push(common::read_answer(&mut conn));
        }
        answers
    })
    .await
    .expect("client");
    assert!(answers[0].starts_with("HTTP/1.1 200 "), "{}", answers[0]);
    assert!(answers[0].contains("\"items\""), "{}", answers[0]);
    assert!(answers[1].starts_with("HTTP/1.1 405 "), "{}", answers[1]);
    assert!(answers[1].contains("allow: GET"), "{}", answers[1]);
    assert!(answers[2].starts_with("HTTP/1.1 200 "), "{}", answers[2]);
    let after = router
        .metric("iuid_router_http1_shared_phases_total", &[])
        .await;
    assert_eq!(after, before, "carried on the head path");
}
