//! Issue 51: entities moved between regions with no client error (docs/moves.md). A real
//! router in front of three recording upstreams (`eu`, `us`, `ap`; country 1 lives in
//! `ap`), a move of country 1 from `ap` to `us` driven by reloading the table, and what
//! each upstream received: mirrored reads reach `to` without slowing the client, writes are
//! never mirrored, a fence holds a write until the flip releases it to `to` (or answers 503
//! `moving` after `hold_ms`, having forwarded nothing), a write after the flip waits for the
//! group's write still running on `from`, a bad move is refused with the last good table
//! serving, the decision headers are the router's alone, and ids outside the move go where
//! they went. The same move over every protocol is `tests/moves_protocols.rs`.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{iuid_for, ConfigYaml, Router, Upstream};
use serde_json::Value;

/// `moves:` with one move of country 1 from `ap` to `us` in `phase`.
pub fn move_of_country_1(phase: &str, mirror_ratio: f64, hold_ms: u64) -> String {
    format!(
        "moves:\n  - name: ap-to-us\n    match: {{ country: 1 }}\n    from: ap\n    to: us\n    \
         phase: {phase}\n    mirror_ratio: {mirror_ratio}\n    hold_ms: {hold_ms}\n"
    )
}

fn config() -> String {
    ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .route_graphql("/graphql")
        .unrouted("default_region")
        .timeouts(500, 5000, 10_000)
        .watch(false)
        .extra("decision_headers: true")
        .yaml()
}

struct World {
    eu: Upstream,
    us: String,
    ap: Upstream,
    router: Router,
}

impl World {
    /// The router over `eu`, `ap` and the given `us` upstream URL, with `moves`.
    async fn start(us: String, moves: &str) -> World {
        let (eu, ap) = (Upstream::start("eu").await, Upstream::start("ap").await);
        let table = common::three_regions("v1", &eu.url(), &us, &ap.url()) + moves;
        let router = Router::start(&config(), &table).await;
        World { eu, us, ap, router }
    }

    /// Writes the table with `moves` and reloads it; the reload's status.
    async fn reload(&self, version: &str, moves: &str) -> (u16, Value) {
        let table = common::three_regions(version, &self.eu.url(), &self.us, &self.ap.url());
        common::write(&self.router.dir, "routing-table.yaml", &(table + moves));
        let resp = common::client()
            .post(self.router.admin_url("/admin/reload"))
            .send()
            .await
            .expect("reload");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    async fn moves(&self) -> Value {
        common::get_json(&self.router.admin_url("/admin/moves")).await
    }
}

/// A recording upstream that answers each request after `delay`.
async fn slow_upstream(delay: Duration) -> (String, Arc<Mutex<Vec<http::HeaderMap>>>) {
    let seen: Arc<Mutex<Vec<http::HeaderMap>>> = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let log = log.clone();
        async move {
            log.lock().expect("log").push(req.headers().clone());
            tokio::time::sleep(delay).await;
            ([("x-upstream", "us")], "us")
        }
    });
    (common::url(common::serve(app).await), seen)
}

async fn get(router: &Router, path: &str) -> reqwest::Response {
    common::client()
        .get(router.url(path))
        .send()
        .await
        .expect("GET")
}

/// Which upstream answered a GET of `path` (its `x-upstream`).
async fn served_by(router: &Router, path: &str) -> String {
    let resp = get(router, path).await;
    resp.headers()["x-upstream"]
        .to_str()
        .unwrap_or("?")
        .to_owned()
}

async fn post(router: &Router, path: &str, body: &'static str) -> reqwest::Response {
    common::client()
        .post(router.url(path))
        .body(body)
        .send()
        .await
        .expect("POST")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mirrored_reads_reach_to_without_slowing_the_client_and_writes_are_never_mirrored() {
    let (us, copies) = slow_upstream(Duration::from_millis(1500)).await;
    let world = World::start(us, &move_of_country_1("mirror", 1.0, 5000)).await;
    let id = iuid_for(1);

    let h2c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("h2c");
    for client in [common::client(), h2c] {
        let started = Instant::now();
        let resp = client
            .get(world.router.url(&format!("/v1/orders/{id}")))
            .send()
            .await
            .expect("GET");
        let took = started.elapsed();
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.headers()["x-upstream"], "ap", "served by from");
        assert!(
            took < Duration::from_millis(1000),
            "the client waited for the copy: {took:?}"
        );
    }
    // A GraphQL query is a read: copied too, its body with it.
    let query = format!(r#"{{"query":"{{ node(id: \"{id}\") {{ id }} }}"}}"#);
    let resp = common::client()
        .post(world.router.url("/graphql"))
        .header("content-type", "application/json")
        .body(query)
        .send()
        .await
        .expect("query");
    assert_eq!(resp.headers()["x-upstream"], "ap");
    // The copies reached `to`, marked, with the decision the original had.
    let arrived = common::eventually(Duration::from_secs(5), || async {
        copies.lock().expect("log").len() >= 3
    })
    .await;
    assert!(arrived.is_some(), "the copies reached `to`");
    for headers in copies.lock().expect("log").iter() {
        assert_eq!(headers["x-iuid-mirror"], "1");
        assert_eq!(headers["x-iuid-move"], "ap-to-us; phase=mirror");
    }
    // Writes go to `from` alone.
    let before = copies.lock().expect("log").len();
    let resp = post(&world.router, &format!("/v1/orders/{id}"), "{}").await;
    assert_eq!(resp.headers()["x-upstream"], "ap");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        copies.lock().expect("log").len(),
        before,
        "a write was mirrored"
    );
    // The copies' outcomes are compared once they end (1.5 s).
    let compared = common::eventually(Duration::from_secs(5), || async {
        let moves = world.moves().await;
        moves["moves"][0]["mirrored"]["same"].as_u64() >= Some(3)
    })
    .await;
    assert!(compared.is_some(), "the copies were compared");
    let same = world.moves().await;
    assert_eq!(same["moves"][0]["phase"], "mirror");
    assert_eq!(same["moves"][0]["from"], "ap");
    assert_eq!(same["moves"][0]["to"], "us");
    let counted = world
        .router
        .metric(
            "iuid_router_move_mirrored_total",
            &["move=\"ap-to-us\"", "outcome=\"same\""],
        )
        .await;
    assert!(counted >= 3.0, "{counted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_holds_a_write_until_the_flip_releases_it_to_to() {
    let us = Upstream::start("us").await;
    let world = World::start(us.url(), &move_of_country_1("fence", 0.0, 5000)).await;
    let id = iuid_for(1);
    let path = format!("/v1/orders/{id}");

    // Reads still go to `from`.
    assert_eq!(served_by(&world.router, &path).await, "ap");
    let (router_url, write_path) = (world.router.url(&path), path.clone());
    let write = tokio::spawn(async move {
        common::client()
            .put(router_url)
            .body("held")
            .send()
            .await
            .expect("PUT")
    });
    let held = common::eventually(Duration::from_secs(5), || async {
        let moves = world.moves().await;
        moves["moves"][0]["held_now"] == 1
    })
    .await;
    assert!(held.is_some(), "the write is held");
    assert!(
        world
            .ap
            .received
            .lock()
            .expect("log")
            .iter()
            .all(|r| r.method != "PUT"),
        "a fenced write reached `from`"
    );
    assert_eq!(us.count(), 0, "a fenced write reached `to` before the flip");

    let (status, _) = world
        .reload("v2", &move_of_country_1("flip", 0.0, 5000))
        .await;
    assert_eq!(status, 200);
    let resp = write.await.expect("join");
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-upstream"], "us", "released to `to`");
    let got = us.last();
    assert_eq!((got.method.as_str(), &got.body[..]), ("PUT", &b"held"[..]));
    assert_eq!(got.target, write_path);
    assert_eq!(got.headers["x-iuid-move"], "ap-to-us; phase=flip");
    assert_eq!(got.headers["x-iuid-region"], "us");
    let moves = world.moves().await;
    assert_eq!(moves["moves"][0]["held"]["released"], 1);
    assert_eq!(moves["moves"][0]["held_now"], 0);
    // After the flip, reads go to `to` too.
    assert_eq!(served_by(&world.router, &path).await, "us");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_fenced_past_hold_ms_gets_503_moving_and_reaches_nobody() {
    let us = Upstream::start("us").await;
    let world = World::start(us.url(), &move_of_country_1("fence", 0.0, 300)).await;
    let started = Instant::now();
    let resp = post(&world.router, &format!("/v1/orders/{}", iuid_for(1)), "{}").await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    let problem: Value = resp.json().await.expect("problem");
    assert_eq!(problem["type"], "urn:iuid-router:problem:moving");
    assert!(problem["detail"]
        .as_str()
        .expect("detail")
        .contains("ap-to-us"));
    assert_eq!(us.count() + world.ap.count() + world.eu.count(), 0);
    let moves = world.moves().await;
    assert_eq!(moves["moves"][0]["held"]["timed_out"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graphql_queries_pass_the_fence_and_mutations_are_held() {
    let us = Upstream::start("us").await;
    let world = World::start(us.url(), &move_of_country_1("fence", 0.0, 300)).await;
    let id = iuid_for(1);
    let query = format!(r#"{{"query":"{{ node(id: \"{id}\") {{ id }} }}"}}"#);
    let resp = common::client()
        .post(world.router.url("/graphql"))
        .header("content-type", "application/json")
        .body(query)
        .send()
        .await
        .expect("query");
    assert_eq!(resp.headers()["x-upstream"], "ap", "a query is a read");

    let mutation = format!(r#"{{"query":"mutation {{ cancelOrder(id: \"{id}\") {{ id }} }}"}}"#);
    let resp = common::client()
        .post(world.router.url("/graphql"))
        .header("content-type", "application/json")
        .body(mutation)
        .send()
        .await
        .expect("mutation");
    assert_eq!(
        resp.status(),
        503,
        "a mutation is a write: held, then refused"
    );
    assert_eq!(us.count(), 0);
    assert_eq!(world.ap.count(), 1, "only the query reached `from`");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_after_the_flip_waits_for_the_slower_write_still_on_from() {
    let ap = Upstream::start("ap").await;
    // `to` notes, as each write arrives, how many writes `from` had finished.
    let finished_at_from: Arc<Mutex<Vec<usize>>> = Arc::default();
    let (log, from_log) = (finished_at_from.clone(), ap.received.clone());
    let app = axum::Router::new().fallback(move || {
        let (log, from_log) = (log.clone(), from_log.clone());
        async move {
            let done = from_log.lock().expect("log").len();
            log.lock().expect("log").push(done);
            ([("x-upstream", "us")], "us")
        }
    });
    let us = common::url(common::serve(app).await);
    let eu = Upstream::start("eu").await;
    let moves = move_of_country_1("mirror", 0.0, 5000);
    let table = common::three_regions("v1", &eu.url(), &us, &ap.url()) + &moves;
    let router = Router::start(&config(), &table).await;
    let world = World { eu, us, ap, router };
    let path = format!("/v1/orders/{}", iuid_for(1));

    // A slow write on `from` (the upstream records it when it answers, 1 s later).
    let (url, slow_path) = (world.router.url(&path), path.clone());
    let slow = tokio::spawn(async move {
        let _ = slow_path;
        common::client()
            .post(url)
            .header("x-delay-ms", "1000")
            .body("first")
            .send()
            .await
            .expect("POST")
    });
    let in_flight = common::eventually(Duration::from_secs(5), || async {
        world.moves().await["moves"][0]["writes_to_from"] == 1
    })
    .await;
    assert!(
        in_flight.is_some(),
        "the first write is in flight to `from`"
    );
    let (status, _) = world
        .reload("v2", &move_of_country_1("flip", 0.0, 5000))
        .await;
    assert_eq!(status, 200);
    let second = post(&world.router, &path, "second").await;
    assert_eq!(second.headers()["x-upstream"], "us");
    assert_eq!(slow.await.expect("join").headers()["x-upstream"], "ap");
    assert_eq!(
        *finished_at_from.lock().expect("log"),
        vec![1],
        "the write reached `to` before `from` had finished the earlier one"
    );
    // A read after the flip does not wait.
    assert_eq!(served_by(&world.router, &path).await, "us");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_move_is_refused_at_its_line_and_the_last_good_table_serves() {
    let us = Upstream::start("us").await;
    let world = World::start(us.url(), &move_of_country_1("mirror", 0.0, 5000)).await;
    let bad = "moves:\n  - name: ap-to-us\n    match: { country: 1 }\n    from: ap\n    to: ap\n    phase: flip\n";
    let (status, body) = world.reload("v2", bad).await;
    assert_eq!(status, 422, "{body}");
    let errors = body["errors"].to_string();
    assert!(errors.contains("routing-table.yaml:15:9"), "{errors}");
    let path = format!("/v1/orders/{}", iuid_for(1));
    assert_eq!(served_by(&world.router, &path).await, "ap");
    let moves = world.moves().await;
    assert_eq!(moves["table_version"], "v1");
    assert_eq!(moves["moves"][0]["phase"], "mirror");
    // `resolve` names the move that decided.
    let resolved = common::get_json(
        &world
            .router
            .admin_url(&format!("/admin/resolve/{}", iuid_for(1))),
    )
    .await;
    assert_eq!(resolved["region"], "ap");
    assert_eq!(resolved["rule"]["kind"], "move");
    assert_eq!(resolved["rule"]["move"]["name"], "ap-to-us");
    assert_eq!(resolved["rule"]["move"]["to"], "us");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decision_headers_are_the_routers_and_ids_outside_the_move_are_untouched() {
    let us = Upstream::start("us").await;
    let world = World::start(us.url(), &move_of_country_1("fence", 0.0, 300)).await;
    let forged = [
        ("x-iuid-region", "forged"),
        ("x-iuid-move", "forged"),
        ("x-iuid-mirror", "1"),
        ("X-Iuid-Anything", "forged"),
    ];
    // Over the head path and h2c.
    let h2c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("h2c");
    for client in [common::client(), h2c] {
        for (country, region) in [(2, "us"), (3, "eu")] {
            let mut req = client
                .post(
                    world
                        .router
                        .url(&format!("/v1/orders/{}", iuid_for(country))),
                )
                .body("w");
            for (k, v) in forged {
                req = req.header(k, v);
            }
            let resp = req.send().await.expect("POST");
            assert_eq!(resp.status(), 200, "a write outside the move is not held");
            assert_eq!(resp.headers()["x-upstream"], region);
        }
        let mut req = client.get(world.router.url(&format!("/v1/orders/{}", iuid_for(1))));
        for (k, v) in forged {
            req = req.header(k, v);
        }
        assert_eq!(req.send().await.expect("GET").headers()["x-upstream"], "ap");
    }
    let seen: Vec<http::HeaderMap> = [&world.eu, &world.ap]
        .iter()
        .flat_map(|u| u.received.lock().expect("log").clone())
        .chain(us.received.lock().expect("log").clone())
        .map(|r| r.headers)
        .collect();
    assert_eq!(seen.len(), 6);
    for headers in &seen {
        let region = headers["x-iuid-region"].to_str().expect("text");
        assert_ne!(region, "forged");
        assert!(!headers.contains_key("x-iuid-mirror"));
        assert!(!headers.contains_key("x-iuid-anything"));
        match headers.get("x-iuid-move") {
            Some(v) => assert_eq!(
                (region, v.to_str().ok()),
                ("ap", Some("ap-to-us; phase=fence"))
            ),
            None => assert_ne!(region, "ap"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_set_back_to_mirror_or_removed_releases_held_writes_to_from() {
    let us = Upstream::start("us").await;
    let world = World::start(us.url(), &move_of_country_1("fence", 0.0, 5000)).await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    for (version, moves) in [
        ("back-to-mirror", move_of_country_1("mirror", 0.0, 5000)),
        ("removed", String::new()),
    ] {
        let url = world.router.url(&path);
        let write = tokio::spawn(async move {
            common::client()
                .post(url)
                .body("w")
                .send()
                .await
                .expect("POST")
        });
        let held = common::eventually(Duration::from_secs(5), || async {
            world.moves().await["moves"][0]["held_now"] == 1
        })
        .await;
        assert!(held.is_some(), "{version}: the write is held");
        let (status, _) = world.reload(version, &moves).await;
        assert_eq!(status, 200);
        let resp = write.await.expect("join");
        assert_eq!(resp.status(), 200);
        assert_eq!(
            resp.headers()["x-upstream"],
            "ap",
            "{version}: released to `from`"
        );
        // Fence again for the next case.
        let (status, _) = world
            .reload("fence", &move_of_country_1("fence", 0.0, 5000))
            .await;
        assert_eq!(status, 200);
    }
    assert_eq!(us.count(), 0, "nothing reached `to`");
}

/// In a mesh, `to` is reached through its own edge, whose table carries the same move: the
/// copy another edge sends (`X-Iuid-Mirror: 1` from a peer in `trusted_proxies`) is served
/// by `to`, marked, and not copied again — not sent back to `from` as a read of the group
/// would be, which would compare `from` with itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_mesh_the_to_edge_serves_another_edges_copy_itself() {
    let (eu, us, ap) = (
        Upstream::start("eu").await,
        Upstream::start("us").await,
        Upstream::start("ap").await,
    );
    let moves = move_of_country_1("mirror", 1.0, 5000);
    let peer_config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .timeouts(500, 5000, 10_000)
        .watch(false)
        .extra("trusted_proxies: [127.0.0.1/32]")
        .yaml()
        // Another region's edge: its `Via` is not the first edge's.
        .replace("region: edge", "region: us-edge");
    let us_table = common::three_regions("us-edge", &eu.url(), &us.url(), &ap.url()) + &moves;
    let us_edge = Router::start(&peer_config, &us_table).await;
    let edge_table =
        common::three_regions("ap-edge", &eu.url(), &common::url(us_edge.addr), &ap.url()) + &moves;
    let edge = Router::start(&config(), &edge_table).await;

    let resp = get(&edge, &format!("/v1/orders/{}", iuid_for(1))).await;
    assert_eq!(resp.headers()["x-upstream"], "ap");
    let copied = common::eventually(Duration::from_secs(5), || async { us.count() == 1 }).await;
    assert!(
        copied.is_some(),
        "the copy reached `to`'s services through its edge"
    );
    assert_eq!(
        us.last().headers["x-iuid-mirror"],
        "1",
        "still marked a copy"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(ap.count(), 1, "the copy was not sent back to `from`");
    assert_eq!(us.count(), 1, "nor copied again");
    // A client of the `to` edge that is not a peer cannot pass its read off as a copy.
    let direct = Router::start(&config(), &us_table).await;
    let resp = common::client()
        .get(direct.url(&format!("/v1/orders/{}", iuid_for(1))))
        .header("x-iuid-mirror", "1")
        .send()
        .await
        .expect("GET");
    assert_eq!(
        resp.headers()["x-upstream"],
        "ap",
        "served by `from`, as any read"
    );
}
