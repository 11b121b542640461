//! Legacy ids (docs/fanout.md `legacy: probe`) over real sockets: an entity with a UUIDv4 id, from
//! before the iUID, is found in whichever region holds it, and its owner remembered.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{client, url, ConfigYaml, Router};

/// A regional gateway holding some entities: `GET /v1/orders/<id>` is 200 (its name in the
/// body) for an id it holds, else 404; it can be made slow; it counts what it saw.
#[derive(Clone)]
struct Region {
    url: String,
    holds: Arc<Mutex<Vec<String>>>,
    seen: Arc<AtomicUsize>,
    delay_ms: Arc<AtomicUsize>,
}

impl Region {
    async fn start(name: &'static str) -> Region {
        let holds: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen: Arc<AtomicUsize> = Arc::default();
        let delay_ms: Arc<AtomicUsize> = Arc::default();
        let (h, s, d) = (holds.clone(), seen.clone(), delay_ms.clone());
        let app = axum::Router::new().fallback(move |uri: http::Uri| {
            let (h, s, d) = (h.clone(), s.clone(), d.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                let ms = d.load(Ordering::SeqCst) as u64;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                let id = uri
                    .path()
                    .rsplit('/')
                    .next()
                    .unwrap_or_default()
                    .to_lowercase();
                if h.lock().expect("holds").contains(&id) {
                    (http::StatusCode::OK, name)
                } else {
                    (http::StatusCode::NOT_FOUND, "no such order")
                }
            }
        });
        Region {
            url: url(common::serve(app).await),
            holds,
            seen,
            delay_ms,
        }
    }

    fn hold(&self, id: &str) {
        self.holds.lock().expect("holds").push(id.to_owned());
    }

    fn release(&self, id: &str) {
        self.holds.lock().expect("holds").retain(|h| h != id);
    }

    fn seen(&self) -> usize {
        self.seen.load(Ordering::SeqCst)
    }
}

/// Regions `eu` (the default), `us`, `ap`.
async fn world(legacy: &str) -> ([Region; 3], Router) {
    let regions = [
        Region::start("eu").await,
        Region::start("us").await,
        Region::start("ap").await,
    ];
    let table = format!(
        "version: legacy\nregions:\n  eu: {{ upstreams: [\"{}\"] }}\n  us: {{ upstreams: [\"{}\"] }}\n  ap: {{ upstreams: [\"{}\"] }}\ncountries:\n  1: ap\n  2: us\n  3: eu\ndefault_region: eu\n",
        regions[0].url, regions[1].url, regions[2].url
    );
    let config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .timeouts(300, 5000, 10000)
        .watch(false)
        .extra(legacy)
        .yaml();
    let router = Router::start(&config, &table).await;
    (regions, router)
}

const OLD: &str = "9b2e4c1a-7d3f-4e8b-a6c5-0f1e2d3c4b5a";

async fn get(router: &Router, id: &str) -> (u16, String) {
    let resp = client()
        .get(router.url(&format!("/v1/orders/{id}")))
        .send()
        .await
        .expect("request");
    (resp.status().as_u16(), resp.text().await.expect("body"))
}

#[tokio::test]
async fn an_old_entity_in_ap_is_found_from_an_eu_edge_and_then_asked_of_ap_directly() {
    let ([eu, us, ap], router) =
        world("legacy: probe\nlegacy_cache: { entries: 1000, ttl_s: 60 }").await;
    ap.hold(OLD);
    assert_eq!(get(&router, OLD).await, (200, "ap".to_owned()));
    assert_eq!(
        (eu.seen(), us.seen(), ap.seen()),
        (1, 1, 1),
        "default first, then the others"
    );

    // The owner is remembered: straight to ap.
    assert_eq!(get(&router, OLD).await, (200, "ap".to_owned()));
    assert_eq!((eu.seen(), us.seen(), ap.seen()), (1, 1, 2));

    // The same id in another text form is the same entity.
    assert_eq!(get(&router, &OLD.to_uppercase()).await.0, 200);
    assert_eq!((eu.seen(), us.seen(), ap.seen()), (1, 1, 3));

    // The entity moves: ap answers 404, the owner is forgotten and the id probed again.
    ap.release(OLD);
    us.hold(OLD);
    assert_eq!(get(&router, OLD).await, (200, "us".to_owned()));
    assert_eq!((eu.seen(), us.seen(), ap.seen()), (2, 2, 4));
    assert_eq!(get(&router, OLD).await, (200, "us".to_owned()));
    assert_eq!((eu.seen(), us.seen(), ap.seen()), (2, 3, 4));

    // Nobody has it: the default region's 404 is the answer.
    let gone = "0d4e6f70-8192-4a3b-8c5d-6e7f8091a2b3";
    assert_eq!(get(&router, gone).await.0, 404);

    let metrics = router.metrics().await;
    // The recorder is process-wide and other tests here probe too: at least these counts.
    for (series, least) in [
        ("iuid_router_legacy_probes_total{result=\"found\"}", 2.0),
        ("iuid_router_legacy_probes_total{result=\"not_found\"}", 1.0),
        ("iuid_router_legacy_cache_total{result=\"hit\"}", 4.0),
    ] {
        let value = metrics
            .lines()
            .find_map(|l| l.strip_prefix(series))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{series} in\n{metrics}"));
        assert!(value >= least, "{series} = {value}");
    }
}

#[tokio::test]
async fn writes_are_never_probed_and_iuids_never_probed() {
    let ([eu, us, ap], router) = world("legacy: probe").await;
    ap.hold(OLD);
    let resp = client()
        .post(router.url(&format!("/v1/orders/{OLD}")))
        .body("{}")
        .send()
        .await
        .expect("post");
    assert_eq!(resp.status(), 404);
    assert_eq!((eu.seen(), us.seen(), ap.seen()), (1, 0, 0));
    let resp = client()
        .delete(router.url(&format!("/v1/orders/{OLD}")))
        .send()
        .await
        .expect("delete");
    assert_eq!(resp.status(), 404);
    assert_eq!((eu.seen(), us.seen(), ap.seen()), (2, 0, 0));
    // An iUID of eu's country that eu does not hold: its owner is known, nothing is probed.
    let iuid = common::iuid_for(3);
    assert_eq!(get(&router, &iuid).await.0, 404);
    assert_eq!((eu.seen(), us.seen(), ap.seen()), (3, 0, 0));
}

#[tokio::test]
async fn a_slow_region_does_not_delay_a_found_answer() {
    let ([eu, us, ap], router) = world("legacy: probe").await;
    ap.hold(OLD);
    // us answers after the router's response_headers_ms (5 s): it times out.
    us.delay_ms.store(30_000, Ordering::SeqCst);
    let started = Instant::now();
    assert_eq!(get(&router, OLD).await, (200, "ap".to_owned()));
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "waited for the slow region: {took:?}"
    );
    assert_eq!((eu.seen(), ap.seen()), (1, 1));
}

#[tokio::test]
async fn without_probe_legacy_ids_stay_in_the_default_region() {
    let ([eu, us, ap], router) = world("").await;
    ap.hold(OLD);
    assert_eq!(get(&router, OLD).await.0, 404);
    assert_eq!((eu.seen(), us.seen(), ap.seen()), (1, 0, 0));
}

/// A legacy id (UUIDv4) that no region holds, the `n`th.
fn unknown(n: u64) -> String {
    format!("5c1d2e3f-4a5b-4c6d-8e7f-{n:012x}")
}

/// Issue 25 item 13: an id no region owns is remembered for `negative_ttl_ms`: asked again
/// meanwhile, only the default region is asked; afterwards it is probed again.
#[tokio::test]
async fn an_id_no_region_owns_is_not_probed_again_for_the_negative_ttl() {
    let ([eu, us, ap], router) = world(
        "legacy: probe\nlegacy_cache: { entries: 1000, ttl_s: 60, negative_ttl_ms: 500 }\n\
         legacy_probe: { budget_percent: 100, min_per_second: 1000 }",
    )
    .await;
    let id = unknown(1);
    assert_eq!(get(&router, &id).await.0, 404);
    assert_eq!((eu.seen(), us.seen(), ap.seen()), (1, 1, 1));
    for n in 2..=5 {
        assert_eq!(get(&router, &id).await.0, 404);
        assert_eq!(
            (eu.seen(), us.seen(), ap.seen()),
            (n, 1, 1),
            "not probed again"
        );
    }
    assert!(
        router
            .metric(
                "iuid_router_legacy_probes_skipped_total",
                &["reason=\"negative_cache\""]
            )
            .await
            >= 4.0
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    ap.hold(&id);
    assert_eq!(get(&router, &id).await, (200, "ap".to_owned()));
    assert_eq!(
        (eu.seen(), us.seen(), ap.seen()),
        (6, 2, 2),
        "probed once the TTL passed"
    );
}

/// Issue 25 item 13: 150 requests for 150 different unknown legacy ids cost the regions about
/// 150 requests, not 450: probes are at most `legacy_probe.budget_percent` of the legacy
/// requests plus `min_per_second`; beyond, the default region's 404 is the answer. An owner
/// learned before is still asked directly.
#[tokio::test]
async fn probes_of_unknown_ids_are_a_bounded_share_of_the_requests() {
    let ([eu, us, ap], router) = world(
        "legacy: probe\nlegacy_cache: { entries: 1000, ttl_s: 60, negative_ttl_ms: 0 }\n\
         legacy_probe: { budget_percent: 20, min_per_second: 5 }",
    )
    .await;
    ap.hold(OLD);
    assert_eq!(get(&router, OLD).await, (200, "ap".to_owned()));
    let started = Instant::now();
    let requests: Vec<_> = (0..150u64)
        .map(|n| {
            let url = router.url(&format!("/v1/orders/{}", unknown(100 + n)));
            tokio::spawn(async move { client().get(url).send().await.expect("get").status() })
        })
        .collect();
    for r in requests {
        assert_eq!(r.await.expect("join"), 404);
    }
    let seconds = started.elapsed().as_secs_f64().ceil();
    let (eu_n, us_n, ap_n) = (eu.seen(), us.seen(), ap.seen());
    println!("150 unknown legacy ids in {seconds} s: eu {eu_n}, us {us_n}, ap {ap_n} requests");
    assert_eq!(eu_n, 151, "each request asked its default region once");
    // The probe before the load (1), 20 % of 151 requests, 5 a second of the floor.
    let most = 1.0 + 0.2 * 151.0 + 5.0 * (seconds + 1.0);
    assert!(
        (us_n as f64) <= most && (ap_n as f64) <= most + 1.0,
        "probes: us {us_n}, ap {ap_n}, at most {most} in {seconds} s"
    );
    assert!(us_n >= 5, "probes still happen: {us_n}");
    assert!(
        router
            .metric(
                "iuid_router_legacy_probes_skipped_total",
                &["reason=\"budget\""]
            )
            .await
            >= 100.0
    );
    // The owner learned before is asked directly, whatever the budget.
    assert_eq!(get(&router, OLD).await, (200, "ap".to_owned()));
}

/// Issue 37: what a calm spell saves is bounded. 500 requests for an id whose owner is known
/// save 20 % of a probe each (100 probes, before the budget had a depth); a flood of 100
/// unknown ids right after may then probe at most `min_per_second` saved plus the floor of
/// each second it spans, not 100.
#[tokio::test]
async fn a_calm_spell_does_not_save_a_burst_of_probes() {
    let ([_eu, us, ap], router) = world(
        "legacy: probe\nlegacy_cache: { entries: 1000, ttl_s: 60, negative_ttl_ms: 0 }\n\
         legacy_probe: { budget_percent: 20, min_per_second: 5 }",
    )
    .await;
    ap.hold(OLD);
    assert_eq!(get(&router, OLD).await, (200, "ap".to_owned()));
    let calm: Vec<_> = (0..500)
        .map(|_| {
            let url = router.url(&format!("/v1/orders/{OLD}"));
            tokio::spawn(async move { client().get(url).send().await.expect("get").status() })
        })
        .collect();
    for r in calm {
        assert_eq!(r.await.expect("join"), 200);
    }
    let (us_before, ap_before) = (us.seen(), ap.seen());
    let started = Instant::now();
    let flood: Vec<_> = (0..100u64)
        .map(|n| {
            let url = router.url(&format!("/v1/orders/{}", unknown(500 + n)));
            tokio::spawn(async move { client().get(url).send().await.expect("get").status() })
        })
        .collect();
    for r in flood {
        assert_eq!(r.await.expect("join"), 404);
    }
    let seconds = started.elapsed().as_secs_f64().ceil();
    let probes = us.seen() - us_before;
    println!("100 unknown ids after 500 known in {seconds} s: {probes} probes of us");
    assert_eq!(
        ap.seen() - ap_before,
        probes,
        "each probe asks both other regions"
    );
    // 5 saved, 5 a second of the floor, 20 % of the flood's own 100 requests.
    let most = 5.0 + 5.0 * (seconds + 1.0) + 20.0;
    assert!(
        (probes as f64) <= most,
        "{probes} probes in {seconds} s, at most {most}"
    );
}
