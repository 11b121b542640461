//! Issue 63, rough edges an operator meets first: `inspect` (the console's word) works as
//! `decode`; a rate limit's unit is one of the documented three, any other spelling refused at
//! its position; the `moving` 503 says which of its two causes it was; the demo's last line
//! names the binary, not `cargo run`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};

use common::{free_port, iuid_for, ChildGuard, ConfigYaml, Router, Upstream};
use serde_json::Value;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_iuid-router"))
        .args(args)
        .output()
        .expect("run iuid-router")
}

#[test]
fn inspect_is_decode_under_the_consoles_name() {
    let id = "017f22e2-79b0-802a-8144-dc0c0c07398f";
    let (inspect, decode) = (run(&["inspect", id]), run(&["decode", id]));
    assert_eq!(
        inspect.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&inspect.stderr)
    );
    assert_eq!(inspect.stdout, decode.stdout);
    let v: Value = serde_json::from_slice(&inspect.stdout).expect("json");
    assert_eq!(v["country"], 42);

    // The same errors, and the name is listed in the help.
    let (inspect, decode) = (
        run(&["inspect", "not-an-id"]),
        run(&["decode", "not-an-id"]),
    );
    assert_eq!(inspect.status.code(), Some(1));
    assert_eq!(inspect.stderr, decode.stderr);
    let help = run(&["--help"]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("inspect"));
}

/// `check` of a one-region config whose only rule has `rate: {rate}`.
fn check_rate(rate: &str) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("t.yaml"),
        "version: v\nregions:\n  eu: { upstreams: [\"http://127.0.0.1:1\"] }\ndefault_region: eu\n",
    )
    .expect("write");
    let rule = format!("  - {{ key: client_ip, rate: {rate} }}");
    let text =
        format!("listen: 127.0.0.1:0\nregion: eu\nrouting_table: t.yaml\nrate_limits:\n{rule}\n");
    let path = dir.path().join("router.yaml");
    std::fs::write(&path, text).expect("write");
    let o = run(&["check", "--config", path.to_str().expect("utf8")]);
    let column = rule.find(rate).expect("rate in rule") + 1;
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
        format!("router.yaml:5:{column}:"),
    )
}

#[test]
fn rates_take_only_the_documented_units_and_refuse_others_at_their_position() {
    for good in ["5/s", "5/min", "5/h"] {
        let (code, err, _) = check_rate(good);
        assert_eq!(code, Some(0), "{good}: {err}");
    }
    for bad in ["5/sec", "5/second", "5/m", "5/minute", "5/hour"] {
        let (code, err, at) = check_rate(bad);
        assert_eq!(code, Some(1), "{bad} accepted");
        assert!(err.contains(&at), "{bad}: not at {at}: {err}");
        assert!(
            err.contains("rate_limits[0].rate") && err.contains("N/s, N/min or N/h"),
            "{bad}: {err}"
        );
    }
}

/// A router over three regions with a `fence` of country 1 (`ap` to `us`, `hold_ms` 300)
/// and `limits.held_requests` as given; a write of country 1's problem.
async fn fenced_write(held_requests: usize) -> Value {
    let (eu, us, ap) = (
        Upstream::start("eu").await,
        Upstream::start("us").await,
        Upstream::start("ap").await,
    );
    let table = common::three_regions("v1", &eu.url(), &us.url(), &ap.url())
        + "moves:\n  - name: ap-to-us\n    match: { country: 1 }\n    from: ap\n    to: us\n    \
           phase: fence\n    mirror_ratio: 0\n    hold_ms: 300\n";
    let config = ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .unrouted("default_region")
        .watch(false)
        .limits(&format!("held_requests: {held_requests}"))
        .yaml();
    let router = Router::start(&config, &table).await;
    let resp = common::client()
        .post(router.url(&format!("/v1/orders/{}", iuid_for(1))))
        .body("{}")
        .send()
        .await
        .expect("POST");
    assert_eq!(resp.status(), 503);
    assert_eq!(eu.count() + us.count() + ap.count(), 0, "nothing forwarded");
    resp.json().await.expect("problem")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_moving_503_says_whether_it_was_held_past_hold_ms_or_refused_at_once() {
    let held = fenced_write(100).await;
    assert_eq!(held["type"], "urn:iuid-router:problem:moving");
    let detail = held["detail"].as_str().expect("detail");
    assert!(
        detail.contains("move `ap-to-us`") && detail.contains("was held 300 ms"),
        "{detail}"
    );
    assert!(!detail.contains("held_requests"), "{detail}");

    let refused = fenced_write(0).await;
    assert_eq!(refused["type"], "urn:iuid-router:problem:moving");
    let detail = refused["detail"].as_str().expect("detail");
    assert!(
        detail.contains("refused at once")
            && detail.contains("0 writes (limits.held_requests) were held already"),
        "{detail}"
    );
    assert!(!detail.contains("300 ms"), "{detail}");
}

#[test]
fn the_demos_last_line_names_the_binary_and_its_id_decodes() {
    let (listen, admin) = (free_port(), free_port());
    let mut child = ChildGuard::spawn(
        Command::new(env!("CARGO_BIN_EXE_iuid-router"))
            .args([
                "demo",
                "--listen",
                &listen.to_string(),
                "--admin-listen",
                &admin.to_string(),
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
        "start demo",
    );
    let stdout = child.get_mut().stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines().map(|l| l.expect("read"));
    let decode_line = lines
        .find(|l| l.starts_with("Decode any id with: "))
        .expect("the decode line");
    let rest = decode_line
        .strip_prefix("Decode any id with: iuid-router decode ")
        .unwrap_or_else(|| panic!("names the binary: {decode_line}"));
    let id = rest.split_whitespace().next().expect("an id");
    let o = run(&["decode", id]);
    assert_eq!(o.status.code(), Some(0), "{decode_line}");
    assert_eq!(
        lines.next().as_deref(),
        Some("Press Ctrl-C to stop."),
        "the last line"
    );
}
