//! Issue 51 under steady load (docs/moves.md, bench/RESULTS.md "Moves between regions"):
//! 16 clients (4 each: reads and writes of the moved group, country 1 from `ap` to `us`,
//! and of another, country 3 in `eu`) keep sending while the table goes mirror → fence → flip, the fence
//! held 1.5 s. Every write carries a unique body, every upstream records what arrived and
//! when. Asserted: no client error; no write sent after the fence began reached `from`;
//! no write reached `to` before the flip was asked for; every write arrived exactly once,
//! where its answer says. The counts and latencies are printed for bench/RESULTS.md.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{iuid_for, ConfigYaml, Router};

fn moves(phase: &str) -> String {
    format!(
        "moves:\n  - name: ap-to-us\n    match: {{ country: 1 }}\n    from: ap\n    to: us\n    \
         phase: {phase}\n    mirror_ratio: 0.1\n    hold_ms: 5000\n"
    )
}

/// What an upstream recorded: each write's body with when it arrived.
type Arrivals = Arc<Mutex<Vec<(String, Instant)>>>;

async fn recording(name: &'static str) -> (String, Arrivals) {
    let arrivals: Arrivals = Arc::default();
    let log = arrivals.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let log = log.clone();
        async move {
            let write = req.method() != http::Method::GET;
            let body = axum::body::to_bytes(req.into_body(), 1 << 16)
                .await
                .unwrap_or_default();
            if write {
                let body = String::from_utf8_lossy(&body).into_owned();
                log.lock().expect("log").push((body, Instant::now()));
            }
            ([("x-upstream", name)], name)
        }
    });
    (common::url(common::serve(app).await), arrivals)
}

/// One write as the client saw it: its body, when it was sent, who answered.
struct Sent {
    body: String,
    at: Instant,
    answered_by: String,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_move_under_load_loses_and_doubles_no_write() {
    let ((eu, eu_got), (us, us_got), (ap, ap_got)) = (
        recording("eu").await,
        recording("us").await,
        recording("ap").await,
    );
    let table =
        |version: &str, phase: &str| common::three_regions(version, &eu, &us, &ap) + &moves(phase);
    let config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .timeouts(500, 5000, 10_000)
        .watch(false)
        .yaml();
    let router = Arc::new(Router::start(&config, &table("v1", "mirror")).await);

    let stop = Arc::new(AtomicBool::new(false));
    let next = Arc::new(AtomicU64::new(0));
    let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
    let errors: Arc<Mutex<Vec<String>>> = Arc::default();
    let latencies: Arc<Mutex<Vec<(Instant, Duration, bool)>>> = Arc::default();
    let mut clients = Vec::new();
    for c in 0..16u8 {
        let (router, stop, next) = (router.clone(), stop.clone(), next.clone());
        let (sent, errors, latencies) = (sent.clone(), errors.clone(), latencies.clone());
        clients.push(tokio::spawn(async move {
            let client = common::client();
            let (moved, other) = (iuid_for(1), iuid_for(3));
            // Four of each: reads and writes of the moved group, and of the other: a held
            // write holds its own client only, as it would one user's.
            let id = if c % 2 == 0 { &moved } else { &other };
            let write = c % 4 >= 2;
            while !stop.load(Ordering::Relaxed) {
                let url = router.url(&format!("/v1/orders/{id}"));
                let at = Instant::now();
                let result = match write {
                    true => {
                        let body = format!("w-{}", next.fetch_add(1, Ordering::Relaxed));
                        let resp = client.post(url).body(body.clone()).send().await;
                        resp.map(|r| (r, Some(body)))
                    }
                    false => client.get(url).send().await.map(|r| (r, None)),
                };
                match result {
                    Ok((resp, body)) if resp.status() == 200 => {
                        let by = resp.headers()["x-upstream"]
                            .to_str()
                            .unwrap_or("?")
                            .to_owned();
                        latencies
                            .lock()
                            .expect("log")
                            .push((at, at.elapsed(), id == &moved));
                        if let Some(body) = body {
                            sent.lock().expect("log").push(Sent {
                                body,
                                at,
                                answered_by: by,
                            });
                        }
                    }
                    Ok((resp, _)) => errors
                        .lock()
                        .expect("log")
                        .push(format!("status {}", resp.status())),
                    Err(e) => errors.lock().expect("log").push(e.to_string()),
                }
            }
        }));
    }

    let reload = |version: &'static str, phase: &'static str| {
        common::write(&router.dir, "routing-table.yaml", &table(version, phase));
        let admin = router.admin_url("/admin/reload");
        async move {
            let resp = common::client().post(admin).send().await.expect("reload");
            assert_eq!(resp.status(), 200);
        }
    };
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let fence_asked = Instant::now();
    reload("v2", "fence").await;
    let fence_began = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let flip_asked = Instant::now();
    reload("v3", "flip").await;
    let flip_done = Instant::now();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.expect("client");
    }

    let errors = errors.lock().expect("log");
    assert!(
        errors.is_empty(),
        "client errors: {:?}",
        &errors[..errors.len().min(5)]
    );
    let sent = sent.lock().expect("log");
    let arrived: Vec<(&str, String, Instant)> = [("eu", &eu_got), ("us", &us_got), ("ap", &ap_got)]
        .iter()
        .flat_map(|(name, got)| {
            let got = got.lock().expect("log");
            got.iter()
                .map(|(b, t)| (*name, b.clone(), *t))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut where_arrived: HashMap<&str, Vec<&str>> = HashMap::new();
    for (name, body, _) in &arrived {
        where_arrived.entry(body.as_str()).or_default().push(name);
    }
    for s in sent.iter() {
        assert_eq!(
            where_arrived.get(s.body.as_str()).map(Vec::as_slice),
            Some(&[s.answered_by.as_str()][..]),
            "write {} arrived once, where its answer came from",
            s.body
        );
    }
    assert_eq!(
        arrived.len(),
        sent.len(),
        "no write arrived that was not answered"
    );
    let at_of: HashMap<&str, Instant> = sent.iter().map(|s| (s.body.as_str(), s.at)).collect();
    let from_after_fence = arrived
        .iter()
        .filter(|(n, b, _)| *n == "ap" && at_of[b.as_str()] >= fence_began)
        .count();
    let to_before_flip = arrived
        .iter()
        .filter(|(n, _, t)| *n == "us" && *t < flip_asked)
        .count();
    assert_eq!(
        from_after_fence, 0,
        "writes sent after the fence began reached `from`"
    );
    assert_eq!(to_before_flip, 0, "writes reached `to` before the flip");

    let latencies = latencies.lock().expect("log");
    let p = |from: Instant, to: Instant, moved: bool, q: f64| {
        let mut l: Vec<Duration> = latencies
            .iter()
            .filter(|(at, _, m)| *at >= from && *at < to && *m == moved)
            .map(|(_, d, _)| *d)
            .collect();
        l.sort();
        let n = l.len();
        (
            n,
            l.get(((n as f64 * q) as usize).min(n.saturating_sub(1)))
                .copied()
                .unwrap_or_default(),
        )
    };
    let end = Instant::now();
    let moved_writes = sent
        .iter()
        .filter(|s| s.answered_by == "ap" || s.answered_by == "us")
        .count();
    println!(
        "| phase | requests (moved group) | p99 moved | max moved | requests (other) | p99 other |"
    );
    println!("|---|---|---|---|---|---|");
    for (phase, from, to) in [
        (
            "mirror",
            fence_asked - Duration::from_millis(1000),
            fence_asked,
        ),
        ("fence", fence_began, flip_asked),
        ("flip", flip_done, end),
    ] {
        let (n_moved, p_moved) = p(from, to, true, 0.99);
        let (_, max_moved) = p(from, to, true, 1.0);
        let (n_other, p_other) = p(from, to, false, 0.99);
        println!("| {phase} | {n_moved} | {p_moved:?} | {max_moved:?} | {n_other} | {p_other:?} |");
    }
    println!(
        "writes: {} ({} of the moved group); client errors: 0; writes to `from` sent after the fence: \
         {from_after_fence}; writes to `to` before the flip: {to_before_flip}; fence held {:?}",
        sent.len(),
        moved_writes,
        flip_done - fence_began
    );
}
