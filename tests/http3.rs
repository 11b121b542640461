//! HTTP/3 through the router (docs/http3.md) with a real HTTP/3 client: aioquic's, in
//! `tests/h3_py/client.py` (`.ci/run` installs aioquic into `target/pyenv`). Each test starts
//! real upstreams and the real router with `tls:` and `http3: {}` on loopback.

mod common;

use std::time::{Duration, Instant};

use common::h3::{get, plan, run, Relay};
use common::{iuid_for, ConfigYaml, Router, Upstream};
use serde_json::{json, Value};

/// The router with `tls:` and `http3:` (`extra` more lines under it) over three regions on
/// two workers, its config changed by `config`; its upstreams and certificates.
async fn router_with(
    extra: &str,
    config: impl FnOnce(ConfigYaml) -> ConfigYaml,
) -> (Router, [Upstream; 3], tempfile::TempDir) {
    let certs = tempfile::tempdir().expect("certs");
    common::make_certs(certs.path(), false, &["localhost"]);
    let ups = [
        Upstream::start("eu").await,
        Upstream::start("us").await,
        Upstream::start("ap").await,
    ];
    let config = config(common::every_route_kind())
        .extra(&common::tls_lines(certs.path()))
        .extra("workers: 2\n")
        .extra(&format!("http3:\n  max_streams: 20\n{extra}"))
        .yaml();
    let table = common::three_regions("v1", &ups[0].url(), &ups[1].url(), &ups[2].url());
    (Router::start(&config, &table).await, ups, certs)
}

async fn router(extra: &str) -> (Router, [Upstream; 3], tempfile::TempDir) {
    router_with(extra, |c| c).await
}

fn status(result: &Value) -> u64 {
    result["status"]
        .as_u64()
        .unwrap_or_else(|| panic!("no answer: {result}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn get_and_post_reach_the_owning_region_over_h3() {
    let (router, [eu, us, ap], certs) = router("").await;
    let steps = json!([
        get(&format!("/v1/orders/{}", iuid_for(1)), json!({})),
        {"op": "request", "method": "POST", "path": format!("/v1/orders/{}", iuid_for(2)),
         "headers": {"content-type": "text/plain"}, "body": "a body over QUIC"},
        get("/v1/orders/not-an-id", json!({})),
    ]);
    let out = run(plan(router.addr.port(), certs.path(), steps)).await;
    let results = out["results"].as_array().expect("results");
    assert_eq!(status(&results[0]), 200, "{out}");
    assert_eq!(results[0]["body"], "ap");
    assert_eq!(status(&results[1]), 200, "{out}");
    assert_eq!(results[1]["body"], "us");
    assert_eq!(us.last().method, "POST");
    assert_eq!(&us.last().body[..], b"a body over QUIC");
    assert_eq!(
        ap.last().headers["via"],
        "3 edge",
        "the hop is recorded as HTTP/3"
    );
    assert_eq!(
        status(&results[2]),
        400,
        "a malformed id is the client's: {out}"
    );
    assert_eq!(
        results[2]["headers"]["content-type"],
        "application/problem+json"
    );
    assert_eq!(eu.count(), 0);
}

/// Every TCP response announces HTTP/3 on the same port: an upstream's answer relayed by
/// the own engine, a refusal it makes itself, and an HTTP/2 answer. An upstream's own
/// `Alt-Svc` (its services, not the router's) is replaced, not passed beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn tcp_answers_carry_alt_svc() {
    let certs = tempfile::tempdir().expect("certs");
    common::make_certs(certs.path(), false, &["localhost"]);
    let announcing = common::url(
        common::serve(
            axum::Router::new()
                .fallback(|| async { ([("alt-svc", "h3=\":9443\"")], "announcing") }),
        )
        .await,
    );
    let config = common::every_route_kind()
        .extra(&common::tls_lines(certs.path()))
        .extra("http3: {}\n")
        .yaml();
    let table = common::three_regions("v1", &announcing, &announcing, &announcing);
    let router = Router::start(&config, &table).await;
    let want = format!("alt-svc: h3=\":{}\"; ma=86400", router.addr.port());
    let relayed = common::tls_raw(
        router.addr,
        certs.path(),
        format!(
            "GET /v1/orders/{} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
            iuid_for(1)
        )
        .as_bytes(),
    )
    .await;
    assert!(relayed.starts_with("HTTP/1.1 200"), "{relayed}");
    assert!(relayed.to_ascii_lowercase().contains(&want), "{relayed}");
    assert_eq!(
        relayed.to_ascii_lowercase().matches("alt-svc:").count(),
        1,
        "{relayed}"
    );
    let refused = common::tls_raw(
        router.addr,
        certs.path(),
        b"GET /v1/orders/not-an-id HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
    assert!(refused.to_ascii_lowercase().contains(&want), "{refused}");
    let args = vec![
        "-sS".to_owned(),
        "--http2".to_owned(),
        "-D".to_owned(),
        "-".to_owned(),
        "-o".to_owned(),
        "/dev/null".to_owned(),
        "--cacert".to_owned(),
        certs.path().join("ca.pem").display().to_string(),
        format!(
            "https://localhost:{}/v1/orders/{}",
            router.addr.port(),
            iuid_for(2)
        ),
    ];
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("curl").args(&args).output()
    })
    .await
    .expect("joined")
    .expect("curl");
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(head.starts_with("http/2 200"), "{head}");
    assert!(head.contains(&want), "{head}");
    assert_eq!(head.matches("alt-svc:").count(), 1, "{head}");
}

/// GraphQL (`node(id:)` in a POST body) and a fan-out over every region, over HTTP/3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn graphql_and_fanout_over_h3() {
    let lists = [
        common::lists::ListRegion::start("eu").await,
        common::lists::ListRegion::start("us").await,
        common::lists::ListRegion::start("ap").await,
    ];
    let certs = tempfile::tempdir().expect("certs");
    common::make_certs(certs.path(), false, &["localhost"]);
    let config = common::every_route_kind()
        .extra(&common::tls_lines(certs.path()))
        .extra("http3: {}\n")
        .yaml();
    let table = common::three_regions("v1", &lists[0].url(), &lists[1].url(), &lists[2].url());
    let router = Router::start(&config, &table).await;
    let query = format!("{{ node(id: \"{}\") {{ id }} }}", iuid_for(2));
    let steps = json!([
        {"op": "request", "method": "POST", "path": "/graphql",
         "headers": {"content-type": "application/json"},
         "body": json!({"query": query}).to_string()},
        get("/v1/list?limit=5", json!({})),
    ]);
    let out = run(plan(router.addr.port(), certs.path(), steps)).await;
    let results = &out["results"];
    assert_eq!(status(&results[0]), 200, "{out}");
    assert_eq!(status(&results[1]), 200, "{out}");
    let page: Value =
        serde_json::from_str(results[1]["body"].as_str().expect("body")).expect("json");
    assert_eq!(page["partial"], false, "{page}");
    for region in ["eu", "us", "ap"] {
        assert_eq!(page["regions"][region]["status"], 200, "{page}");
    }
    let hits: Vec<usize> = lists
        .iter()
        .map(|l| l.hits.load(std::sync::atomic::Ordering::SeqCst))
        .collect();
    assert_eq!(
        hits[1], 2,
        "us got the GraphQL query and its fan-out leg: {hits:?}"
    );
    assert_eq!(
        (hits[0], hits[2]),
        (1, 1),
        "every region asked once by the fan-out"
    );
    // The recorder is the process's: only this test sends these route kinds over HTTP/3.
    for route in ["graphql", "fanout"] {
        let labels = [&format!("route=\"{route}\"")[..], "protocol=\"h3\""];
        let counted = router.metric("iuid_router_requests_total", &labels).await;
        assert_eq!(counted, 1.0, "{route} counted once as HTTP/3");
    }
}

/// A resumed client's 0-RTT flight: its GET goes on at once, before the handshake
/// completes, marked `Early-Data: 1`; its POST waits for the handshake and goes on
/// unmarked. The relay holds every client datagram sent after the router's first answer
/// for 400 ms, so the handshake's end comes late.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn zero_rtt_forwards_safe_methods_early_and_holds_the_rest() {
    let (router, [_eu, us, ap], certs) = router("").await;
    let ticket = certs.path().join("ticket.bin");
    let mut first = plan(
        router.addr.port(),
        certs.path(),
        json!([get(&format!("/v1/orders/{}", iuid_for(1)), json!({}))]),
    );
    first["ticket_out"] = json!(ticket);
    let out = run(first).await;
    assert_eq!(status(&out["results"][0]), 200, "{out}");
    assert!(ticket.exists(), "the router sent a session ticket");
    assert!(
        ap.last().headers.get("early-data").is_none(),
        "a full handshake is not early"
    );

    let relay = Relay::start(router.addr).await;
    relay.hold_after_reply(400);
    let mut resumed = plan(
        relay.addr.port(),
        certs.path(),
        json!([{"op": "requests", "list": [
            get(&format!("/v1/orders/{}", iuid_for(1)), json!({"x-case": "early-get"})),
            {"op": "request", "method": "POST", "path": format!("/v1/orders/{}", iuid_for(2)),
             "headers": {"x-case": "early-post"}, "body": "not replayable"},
        ]}]),
    );
    resumed["ticket_in"] = json!(ticket);
    resumed["early"] = json!(true);
    let started = Instant::now();
    let out = run(resumed).await;
    assert_eq!(out["handshake"]["session_resumed"], true, "{out}");
    assert_eq!(out["handshake"]["early_data_accepted"], true, "{out}");
    assert_eq!(status(&out["results"][0]), 200, "{out}");
    assert_eq!(status(&out["results"][1]), 200, "{out}");
    let get = ap.last();
    assert_eq!(get.headers["x-case"], "early-get");
    assert_eq!(get.headers["early-data"], "1", "RFC 8470 §5.1");
    let post = us.last();
    assert_eq!(post.headers["x-case"], "early-post");
    assert!(
        post.headers.get("early-data").is_none(),
        "sent after the handshake"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "the POST waited for the held handshake"
    );
    let metrics = router.metrics().await;
    let early = |outcome: &str| {
        common::metric_sum(
            &metrics,
            "iuid_router_http3_early_data_total",
            &[&format!("outcome=\"{outcome}\"")],
        )
    };
    assert_eq!(
        (early("forwarded"), early("waited")),
        (1.0, 1.0),
        "{metrics}"
    );
}

/// `zero_rtt: false`: a resumed client's early data is refused; its requests still succeed
/// after the handshake, none marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn zero_rtt_off_refuses_early_data() {
    let (router, [_eu, _us, ap], certs) = router("  zero_rtt: false\n").await;
    let ticket = certs.path().join("ticket.bin");
    let path = format!("/v1/orders/{}", iuid_for(1));
    let mut first = plan(
        router.addr.port(),
        certs.path(),
        json!([get(&path, json!({}))]),
    );
    first["ticket_out"] = json!(ticket);
    run(first).await;
    let mut resumed = plan(
        router.addr.port(),
        certs.path(),
        json!([get(&path, json!({}))]),
    );
    resumed["ticket_in"] = json!(ticket);
    resumed["early"] = json!(true);
    let out = run(resumed).await;
    assert_eq!(out["handshake"]["early_data_accepted"], false, "{out}");
    assert_eq!(status(&out["results"][0]), 200, "{out}");
    assert!(ap.last().headers.get("early-data").is_none());
}

/// A client whose address changes mid-request (a NAT rebinding, three times during a
/// 1.6 s answer), then before each of five more requests, gets every answer: the router
/// validates each new path and, on two workers, the packets from each new port still reach
/// the worker that has the connection, steered by its connection id (the kernel's 4-tuple
/// hash alone would send a new port to the other worker half the time: each request here
/// goes on a path the one before did not use).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn a_client_that_changes_address_keeps_its_connection() {
    let (router, [_eu, _us, ap], certs) = router("").await;
    let relay = Relay::start(router.addr).await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let file = |name: String| certs.path().join(name);
    let mut steps = vec![get(&path, json!({"x-delay-ms": "1600"}))];
    for k in 0..5 {
        steps.push(json!({"op": "signal", "file": file(format!("asked-{k}"))}));
        steps.push(json!({"op": "wait_file", "file": file(format!("moved-{k}"))}));
        steps.push(get(&path, json!({"x-case": k.to_string()})));
    }
    let client = tokio::spawn(run(plan(relay.addr.port(), certs.path(), json!(steps))));
    let mut ports = vec![];
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        ports.push(relay.rebind().await.port());
    }
    for k in 0..5 {
        let asked = common::eventually(Duration::from_secs(10), || async {
            file(format!("asked-{k}")).exists()
        })
        .await;
        assert!(asked.is_some(), "the client got to step {k}");
        ports.push(relay.rebind().await.port());
        std::fs::write(file(format!("moved-{k}")), "").expect("signal");
    }
    let out = client.await.expect("client");
    let results = out["results"].as_array().expect("results");
    assert_eq!(results.len(), 6, "{out}");
    for r in results {
        assert_eq!(status(r), 200, "{out}");
        assert_eq!(r["body"], "ap");
    }
    assert_eq!(ap.count(), 6, "each request once, from ports {ports:?}");
}

/// A connection with no request for `timeouts.idle_ms` is closed by the router with
/// H3_NO_ERROR after a GOAWAY; a busy one is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn an_idle_connection_is_closed() {
    let (router, _ups, certs) = router_with("", |c| c.timeouts(500, 5000, 800)).await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let steps = json!([
        get(&path, json!({})),
        {"op": "sleep", "ms": 500},
        get(&path, json!({})),
        {"op": "wait_closed", "ms": 5000},
    ]);
    let out = run(plan(router.addr.port(), certs.path(), steps)).await;
    assert_eq!(
        status(&out["results"][1]),
        200,
        "not idle after 500 ms: {out}"
    );
    let closed = &out["closed"];
    assert_eq!(closed["error_code"], 0x100, "H3_NO_ERROR: {out}");
    let after = closed["after_ms"].as_u64().expect("after");
    assert!(
        (1200..3000).contains(&after),
        "closed 800 ms after the last answer: {out}"
    );
    let metrics = router.metrics().await;
    assert_eq!(
        common::metric_sum(
            &metrics,
            "iuid_router_http3_closed_total",
            &["reason=\"idle\""]
        ),
        1.0
    );
}

/// A certificate renewed on disk reaches the QUIC listener too: after the reload a client
/// that trusts only the new CA is served over HTTP/3, and one that trusts only the old is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs aioquic in target/pyenv: bash .ci/run installs it and runs it"]
async fn a_certificate_reload_keeps_h3_serving() {
    let (router, _ups, certs) = router_with("", |c| c.watch(true).debounce_ms(50)).await;
    let path = format!("/v1/orders/{}", iuid_for(1));
    let old_ca = certs.path().join("old-ca.pem");
    std::fs::copy(certs.path().join("ca.pem"), &old_ca).expect("old ca");
    let renewed = tempfile::tempdir().expect("renewed");
    common::make_certs(renewed.path(), false, &["localhost"]);
    for file in ["localhost-key.pem", "localhost.pem"] {
        std::fs::copy(renewed.path().join(file), certs.path().join(file)).expect("copy");
    }
    let served = common::eventually(Duration::from_secs(5), || async {
        let plan = plan(
            router.addr.port(),
            renewed.path(),
            json!([get(&path, json!({}))]),
        );
        common::h3::try_run(plan)
            .await
            .is_ok_and(|out| out["results"][0]["status"] == 200)
    })
    .await;
    assert!(
        served.is_some(),
        "the new certificate is served over HTTP/3"
    );
    let mut old = plan(
        router.addr.port(),
        certs.path(),
        json!([get(&path, json!({}))]),
    );
    old["ca"] = json!(old_ca);
    old["timeout_s"] = json!(3);
    let refused = common::h3::try_run(old).await;
    assert!(
        refused.is_err(),
        "the old CA no longer verifies it: {refused:?}"
    );
}

/// `iuid-router check` refuses `http3:` without `tls:` and a `max_streams` of 0, each at
/// its key's line; the same keys with `tls:` pass.
#[test]
fn check_refuses_http3_without_tls_at_its_line() {
    let dir = tempfile::tempdir().expect("dir");
    common::write(
        &dir,
        "routing-table.yaml",
        &common::lettered_table("v1", &[&["http://127.0.0.1:1".to_owned()]]),
    );
    let base = "listen: 127.0.0.1:8443\nregion: eu\nrouting_table: routing-table.yaml\n";
    common::assert_refused_at(&dir, &format!("{base}http3: {{}}\n"), "http3 needs tls", 4);
    common::make_certs(dir.path(), false, &["localhost"]);
    let tls = common::tls_lines(dir.path());
    common::assert_refused_at(
        &dir,
        &format!("{base}{tls}http3:\n  max_streams: 0\n"),
        "max_streams must be at least 1",
        8,
    );
    let path = common::write(
        &dir,
        "router.yaml",
        &format!("{base}{tls}http3: {{ zero_rtt: false }}\n"),
    );
    let checked = common::check(&path);
    assert_eq!(checked.code, Some(0), "{}", checked.output);
}
