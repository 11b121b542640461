//! HTTP/3 through the router (docs/http3.md) with a real HTTP/3 client: aioquic's, in
//! `tests/h3_py/client.py` (`.ci/run` installs aioquic into `target/pyenv`). Each test starts
//! real upstreams and the real router with `tls:` and `http3: {}` on loopback.

mod common;

use common::h3::{get, plan, run, Relay};
use common::{iuid_for, Router, Upstream};
use serde_json::{json, Value};

/// The router with `tls:` and `http3:` (`extra` more lines) over three regions, and its
/// upstreams and certificates.
async fn router(extra: &str) -> (Router, [Upstream; 3], tempfile::TempDir) {
    let certs = tempfile::tempdir().expect("certs");
    common::make_certs(certs.path(), false, &["localhost"]);
    let ups = [
        Upstream::start("eu").await,
        Upstream::start("us").await,
        Upstream::start("ap").await,
    ];
    let config = common::every_route_kind()
        .extra(&common::tls_lines(certs.path()))
        .extra("workers: 2")
        .extra(&format!("http3:\n  max_streams: 20\n{extra}"))
        .yaml();
    let table = common::three_regions("v1", &ups[0].url(), &ups[1].url(), &ups[2].url());
    (Router::start(&config, &table).await, ups, certs)
}

fn status(result: &Value) -> u64 {
    result["status"].as_u64().unwrap_or_else(|| panic!("no answer: {result}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
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
    assert_eq!(ap.last().headers["via"], "3 edge", "the hop is recorded as HTTP/3");
    assert_eq!(status(&results[2]), 400, "a malformed id is the client's: {out}");
    assert_eq!(
        results[2]["headers"]["content-type"],
        "application/problem+json"
    );
    assert_eq!(eu.count(), 0);
}
