//! The commands of docs/cli.md, run as the real binary.

use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_iuid-router"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run iuid-router")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Writes a table of one region, `eu` (its upstream never asked), as `t.yaml` in `dir`, and
/// `router` as `router.yaml` beside it; returns the config's path.
fn one_region(dir: &std::path::Path, router: &str) -> std::path::PathBuf {
    std::fs::write(
        dir.join("t.yaml"),
        "version: v\nregions:\n  eu: { upstreams: [\"http://127.0.0.1:1\"] }\ndefault_region: eu\n",
    )
    .expect("write");
    let path = dir.join("router.yaml");
    std::fs::write(&path, router).expect("write");
    path
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn decode_prints_the_spec_test_vector() {
    let o = run(&["decode", "017f22e2-79b0-802a-8144-dc0c0c07398f"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["ts_ms"], 0x017F_22E2_79B0u64);
    assert_eq!(v["created_at"], "2022-02-22T19:22:22Z");
    assert_eq!(v["ver"], 8);
    assert_eq!(v["ver1"], 0);
    assert_eq!(v["country"], 42);
    assert_eq!(v["service_entity"], 5);
}

#[test]
fn decode_names_fields_from_the_table_and_rejects_bad_ids() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/router.yaml");
    let id = "017f22e2-79b0-8001-8044-dc0c0c07398f"; // country 1, service 1
    let o = run(&["decode", "--config", config, id]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(
        (v["country_code"].as_str(), v["service"].as_str()),
        (Some("KZ"), Some("AyanOrder"))
    );

    let o = run(&["decode", "017f22e2-79b0-802a-8144-dc0c0c07398g"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("position 36"), "{}", stderr(&o));
    let o = run(&["decode", "9b2c4f7e-1d3a-4c5b-8e6f-0a1b2c3d4e5f"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains('4'), "{}", stderr(&o));
}

#[test]
fn mint_gives_strictly_increasing_ids_of_the_right_country_and_service() {
    let o = run(&[
        "mint",
        "--country",
        "42",
        "--service",
        "5",
        "--count",
        "1000",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let ids: Vec<iuid::Iuid> = out
        .lines()
        .map(|l| l.parse().expect("minted id parses"))
        .collect();
    assert_eq!(ids.len(), 1000);
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "not strictly increasing"
    );
    assert!(ids
        .iter()
        .all(|i| i.country() == 42 && i.service_entity() == 5));
    // Text order is id order too: what a database index on the text sees.
    let text: Vec<&str> = out.lines().collect();
    assert!(text.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn resolve_prints_the_decision() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/router.yaml");
    // A WalletAccount (2) minted in the US (2): the service override sends it to eu.
    let id = iuid::Iuid::from_fields(1_800_000_000_000, 2, 2, 7).to_string();
    let o = run(&["resolve", "--config", config, &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["region"], "eu");
    assert_eq!(v["rule"]["kind"], "override");
    assert_eq!(v["rule"]["index"], 0);
    assert_eq!(v["upstreams"][0], "http://eu-gw-1:8080");

    let unowned = iuid::Iuid::from_fields(1_800_000_000_000, 200, 1, 7).to_string();
    let o = run(&["resolve", "--config", config, &unowned]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("country 200"), "{}", stderr(&o));
}

#[test]
fn check_accepts_the_shipped_config() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/router.yaml");
    let o = run(&["check", "--config", config]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("ok"));
}

/// Writes a config and table pair and runs `check` on it.
fn check_table(table: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("router.yaml"),
        "listen: 127.0.0.1:8080\nregion: eu\nrouting_table: table.yaml\nroutes:\n  - path: /o/{id}\n",
    )
    .expect("write");
    std::fs::write(dir.path().join("table.yaml"), table).expect("write");
    let o = run(&[
        "check",
        "--config",
        dir.path().join("router.yaml").to_str().expect("utf8"),
    ]);
    (o.status.code(), stderr(&o))
}

#[test]
fn check_rejects_a_typod_key_with_its_line_and_column() {
    let (code, err) = check_table(
        "version: x\nregions:\n  eu: { upstreams: [\"http://a:1\"] }\ncountries:\n  3: eu\ndefualt_region: eu\n",
    );
    assert_eq!(code, Some(1));
    assert!(err.contains("table.yaml:6:1:"), "{err}");
    assert!(err.contains("unknown field `defualt_region`"), "{err}");
}

#[test]
fn check_rejects_an_undefined_region_pointing_at_it() {
    let (code, err) = check_table(
        "version: x\nregions:\n  eu: { upstreams: [\"http://a:1\"] }\ncountries:\n  3: eu\n  7: { code: BR, region: sa }\noverrides:\n  - { service: 9, region: mars }\ndefault_region: eu\n",
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains("table.yaml:6:26: region `sa` is not defined"),
        "{err}"
    );
    assert!(
        err.contains("table.yaml:8:27: region `mars` is not defined"),
        "{err}"
    );
    assert!(err.contains("2 error(s)"), "every error is listed: {err}");
}

#[test]
fn check_rejects_region_names_that_metrics_reserve() {
    let (code, err) = check_table(
        "version: x\nregions:\n  eu: { upstreams: [\"http://a:1\"] }\n  none: { upstreams: [\"http://b:1\"] }\n  all: { upstreams: [\"http://c:1\"] }\ncountries:\n  3: eu\ndefault_region: eu\n",
    );
    assert_eq!(code, Some(1));
    assert!(
        err.contains("table.yaml:4:3: region name `none` is reserved"),
        "{err}"
    );
    assert!(
        err.contains("table.yaml:5:3: region name `all` is reserved"),
        "{err}"
    );
}

#[test]
fn check_reports_every_kind_of_table_error() {
    let (code, err) = check_table(
        "version: x\nregions:\n  eu: { upstreams: [\"ftp://a:1\", \"http://b:2/path\"] }\ncountries:\n  3: eu\n  3: eu\n  300: eu\nservices:\n  1: A\n  2: A\noverrides:\n  - { created_before: \"yesterday\", region: eu }\n  - { service: Nope, region: eu }\ndefault_region: eu\n",
    );
    assert_eq!(code, Some(1));
    for want in [
        "table.yaml:3:21: upstream `ftp://a:1`: must start with http://",
        "table.yaml:3:34: upstream `http://b:2/path`: must not have a path",
        "table.yaml:6:3: country 3 is listed twice",
        "table.yaml:7:3: country id 300 is out of range",
        "table.yaml:10:6: service name `A` is already used",
        "table.yaml:12:23: `yesterday` is not an RFC 3339 timestamp",
        "table.yaml:13:16: service `Nope` is not named",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
}

#[test]
fn check_rejects_a_typod_config_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("router.yaml");
    std::fs::write(
        &path,
        "listen: 127.0.0.1:8080\nregion: eu\nrouting_table: t.yaml\ntime_outs: {}\n",
    )
    .expect("write");
    let o = run(&["check", "--config", path.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("router.yaml:4:1: unknown field `time_outs`"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn check_rejects_a_health_check_interval_below_10_ms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("router.yaml");
    std::fs::write(
        &path,
        "listen: 127.0.0.1:8080\nregion: eu\nrouting_table: t.yaml\nhealth_check:\n  path: /healthz\n  interval_ms: 0\n  timeout_ms: 0\n",
    )
    .expect("write");
    let o = run(&["check", "--config", path.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(1));
    for want in [
        "router.yaml:6:16: interval_ms must be at least 10 ms",
        "router.yaml:7:15: timeout_ms must be above 0 ms",
    ] {
        assert!(
            stderr(&o).contains(want),
            "missing {want:?} in:\n{}",
            stderr(&o)
        );
    }
}

/// A route's keys belong to its kind: an unknown key is named with where it is, a key of
/// another kind is named as such, and both are reported with the config's other errors.
#[test]
fn check_names_a_bad_route_key_with_the_configs_other_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("router.yaml");
    std::fs::write(
        &path,
        "listen: nowhere\nregion: eu\nrouting_table: t.yaml\nroutes:\n  - { path: \"/o/{id}\", fanuot: 1 }\n  - { header: x-id, split_nodes: true }\n",
    )
    .expect("write");
    let o = run(&["check", "--config", path.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    for want in [
        "router.yaml:1:9: `nowhere` is not an address",
        "router.yaml:5:24: routes[0].fanuot: unknown field `fanuot`, expected one of `path`",
        "router.yaml:6:34: routes[1].split_nodes: split_nodes goes with a graphql route",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
}

#[test]
fn check_reports_config_and_table_errors_in_one_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("router.yaml");
    std::fs::write(
        &path,
        "listen: 127.0.0.1:8080\nregion: eu\nrouting_table: t.yaml\ntime_outs: {}\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("t.yaml"),
        "version: x\nregions:\n  eu: { upstreams: [\"http://127.0.0.1:1\"] }\ncountries:\n  1: mars\ndefault_region: eu\n",
    )
    .expect("write");
    let o = run(&["check", "--config", path.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("router.yaml:4:1: unknown field `time_outs`"),
        "{err}"
    );
    assert!(err.contains("t.yaml:5:6:") && err.contains("mars"), "{err}");
    assert!(err.contains("2 error(s)"), "{err}");
}

/// `mint`, `decode` and `resolve --scheme` for every kind of the shipped table: each minted
/// id decodes with its fields and creation time and resolves to the region its map or hash
/// gives.
#[test]
fn every_scheme_of_the_shipped_table_mints_decodes_and_resolves() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config/router.yaml");
    let cases: [(&str, &[&str], &str, &str); 5] = [
        (
            "iuid",
            &["--country", "2", "--service", "1"],
            "country",
            "us",
        ),
        ("offers", &["--shard-key", "595591168"], "shard_key", "ap"), // 142 << 22
        ("legacy_orders", &["--shard", "5"], "shard", "us"),
        ("posts", &["--field", "shard=7000"], "shard", "ap"),
        ("trips", &["--key", "dev-42"], "key", ""),
    ];
    for (scheme, flags, field, region) in cases {
        let mut args = vec![
            "mint", "--scheme", scheme, "--config", config, "--count", "3",
        ];
        args.extend_from_slice(flags);
        let o = run(&args);
        assert!(o.status.success(), "{scheme}: {}", stderr(&o));
        let ids: Vec<String> = stdout(&o).lines().map(str::to_owned).collect();
        assert_eq!(ids.len(), 3, "{scheme}");
        for id in &ids {
            let o = run(&["decode", "--scheme", scheme, "--config", config, id]);
            assert!(o.status.success(), "{scheme} {id}: {}", stderr(&o));
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
            assert!(!v[field].is_null(), "{scheme}: no {field} in {v}");
            assert!(v["created_at"].as_str().is_some(), "{scheme}: {v}");
            let o = run(&["resolve", "--config", config, "--scheme", scheme, id]);
            assert!(o.status.success(), "{scheme} {id}: {}", stderr(&o));
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
            if !region.is_empty() {
                assert_eq!(v["region"], region, "{scheme} {id}: {v}");
            } else {
                assert_eq!(v["rule"]["kind"], "hash", "{v}");
            }
        }
    }
    // A table scheme without --config, and a bad id of a scheme: exit 1 with the reason.
    let o = run(&["mint", "--scheme", "posts"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--config"), "{}", stderr(&o));
    let o = run(&[
        "decode",
        "--scheme",
        "legacy_orders",
        "--config",
        config,
        "312345678901234567",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("shard digit"), "{}", stderr(&o));
}

#[test]
fn check_refuses_a_route_whose_scheme_the_table_does_not_declare() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = one_region(
        dir.path(),
        "listen: 127.0.0.1:8080\nregion: eu\nrouting_table: t.yaml\nroutes:\n  - path: /o/{id}\n  - { path: \"/p/{id}\", scheme: posts }\n",
    );
    let o = run(&["check", "--config", path.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("router.yaml:6:")
            && stderr(&o).contains("scheme `posts` is not declared"),
        "{}",
        stderr(&o)
    );
}

/// A `fanout:` route's errors, each at its line and column: a key that goes only with
/// `fanout:` on another route, a bad limit, and a scheme whose ids carry no time to merge by.
#[test]
fn check_refuses_bad_fanout_routes_at_their_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("t.yaml"),
        "version: v\nregions:\n  eu: { upstreams: [\"http://127.0.0.1:1\"] }\nschemes:\n  counters:\n    kind: snowflake\n    fields: [{ name: shard, bits: 13 }, { name: seq, bits: 50 }]\n    route_by: { field: shard }\n    map: { \"0-8191\": eu }\ndefault_region: eu\n",
    )
    .expect("write");
    let path = dir.path().join("router.yaml");
    std::fs::write(
        &path,
        "listen: 127.0.0.1:8080\nregion: eu\nrouting_table: t.yaml\nroutes:\n  - { path: \"/o/{id}\", order: asc }\n  - { fanout: /v1/a, limit: { default: 900, max: 10 } }\n  - { fanout: /v1/c, scheme: counters }\n",
    )
    .expect("write");
    let o = run(&["check", "--config", path.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("router.yaml:5:") && err.contains("order goes with a fanout route"),
        "{err}"
    );
    assert!(
        err.contains("router.yaml:6:") && err.contains("default 900 and max 10"),
        "{err}"
    );

    // With the other routes fixed, the timeless scheme is refused across the two files.
    std::fs::write(
        &path,
        "listen: 127.0.0.1:8080\nregion: eu\nrouting_table: t.yaml\nroutes:\n  - { fanout: /v1/c, scheme: counters }\n",
    )
    .expect("write");
    let o = run(&["check", "--config", path.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("router.yaml:5:") && err.contains("has no time field"),
        "{err}"
    );
}

/// The shipped `config/router-tls.yaml` checks once its certificates exist (made by the
/// shipped script), and a certificate that cannot be read is reported at its entry.
#[test]
fn the_tls_example_checks_and_a_missing_certificate_is_reported_at_its_entry() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().expect("tempdir");
    let config_dir = dir.path().join("config");
    std::fs::create_dir_all(&config_dir).expect("dir");
    std::fs::copy(
        root.join("config/router-tls.yaml"),
        config_dir.join("router-tls.yaml"),
    )
    .expect("copy");
    std::fs::copy(
        root.join("routing-table.yaml"),
        dir.path().join("routing-table.yaml"),
    )
    .expect("copy");
    let made = Command::new("bash")
        .arg(root.join("config/make-certs.sh"))
        .arg(config_dir.join("certs"))
        .args(["localhost", "api.example.com"])
        .output()
        .expect("make-certs");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let path = config_dir.join("router-tls.yaml");
    let o = run(&["check", "--config", path.to_str().expect("utf8")]);
    assert!(o.status.success(), "{}", stderr(&o));

    std::fs::remove_file(config_dir.join("certs/api.example.com.pem")).expect("rm");
    let o = run(&["check", "--config", path.to_str().expect("utf8")]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("router-tls.yaml:17:") && err.contains("api.example.com.pem"),
        "{err}"
    );
}

/// docs/tls-h2-grpc.md writes `field: 2.1` bare, which YAML reads as a float: it is the field path 2.1
/// (and `2.10` field 10 of field 2, not the float 2.1), as is the quoted form; anything else
/// is refused with where it is and what a field path looks like.
#[test]
fn check_reads_a_bare_grpc_field_path_and_refuses_other_shapes() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("t.yaml"),
        "version: x\nregions:\n  eu: { upstreams: [\"http://127.0.0.1:1\"] }\ncountries:\n  1: eu\ndefault_region: eu\n",
    )
    .expect("write");
    let path = dir.path().join("router.yaml");
    let config = |field: &str| {
        format!("listen: 127.0.0.1:8080\nregion: eu\nrouting_table: t.yaml\nroutes:\n  - grpc: /orders.v1.Orders/Get\n    field: {field}\n")
    };
    for ok in ["2.1", "2.10", "\"2.1\"", "'3.1.4'", "1"] {
        std::fs::write(&path, config(ok)).expect("write");
        let o = run(&["check", "--config", path.to_str().expect("utf8")]);
        assert_eq!(o.status.code(), Some(0), "field: {ok}: {}", stderr(&o));
    }
    for (bad, want) in [
        ("[2, 1]", "router.yaml:6:12: "),
        ("{ a: 1 }", "router.yaml:6:12: "),
        ("2.x", "`2.x` is not a field path such as 2.1"),
        ("-1", "`-1` is not a field path such as 2.1"),
        ("0.1", "0 is not a protobuf field number"),
    ] {
        std::fs::write(&path, config(bad)).expect("write");
        let o = run(&["check", "--config", path.to_str().expect("utf8")]);
        assert_eq!(o.status.code(), Some(1), "field: {bad}");
        let err = stderr(&o);
        assert!(
            err.contains(want),
            "field: {bad}: missing {want:?} in:\n{err}"
        );
        assert!(!err.contains("untagged enum"), "{err}");
    }
}

/// Issue 25 items 5 and 13: `check` refuses fan-out and probe bounds that cannot work, each
/// at its key's line and column.
#[test]
fn check_refuses_bad_fanout_and_probe_bounds_at_their_keys() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("router.yaml"),
        "listen: 127.0.0.1:8080\nregion: eu\nrouting_table: table.yaml\n\
         limits: { fanout_region_bytes: 1000, fanout_buffer_bytes: 999, fanout_concurrent: 4, fanout_per_connection: 5 }\n\
         legacy_probe: { budget_percent: 150 }\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("table.yaml"),
        "version: x\nregions:\n  eu: { upstreams: [\"http://a:1\"] }\ncountries:\n  3: eu\ndefault_region: eu\n",
    )
    .expect("write");
    let o = run(&[
        "check",
        "--config",
        dir.path().join("router.yaml").to_str().expect("utf8"),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    for want in [
        "router.yaml:4:59: fanout_buffer_bytes (999) must be at least fanout_region_bytes (1000)",
        "router.yaml:4:109: fanout_per_connection must be from 1 to fanout_concurrent (4)",
        "router.yaml:5:33: budget_percent is a percentage: 0 to 100",
    ] {
        assert!(err.contains(want), "{want} in {err}");
    }
}

/// Issue 37 removed `http1_engine` (hyper's HTTP/1.1 server is gone): `check` refuses the
/// key, whatever its value, at its line and column, saying why, rather than as an unknown
/// key; `serve` does not start on such a config.
#[test]
fn check_refuses_the_removed_http1_engine_key_with_the_reason() {
    let dir = tempfile::tempdir().expect("tempdir");
    for value in ["own", "hyper"] {
        let path = one_region(
            dir.path(),
            &format!("listen: 127.0.0.1:0\nregion: eu\nrouting_table: t.yaml\n  # the engine\nhttp1_engine: {value}\n"),
        );
        let config = path.to_str().expect("utf8");
        let o = run(&["check", "--config", config]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("router.yaml:5:1"), "{err}");
        assert!(err.contains("`http1_engine` was removed"), "{err}");
        assert!(err.contains("own engine"), "{err}");
        let o = run(&["serve", "--config", config]);
        assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("`http1_engine` was removed"),
            "{}",
            stderr(&o)
        );
    }
}

/// An address another process listens on, with `SO_REUSEPORT` as a router's own sockets
/// have, is refused at start rather than joined: the kernel would otherwise split the
/// clients between the two processes unseen (a router not stopped, a stale one).
#[tokio::test]
async fn serve_refuses_an_address_another_process_listens_on() {
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_reuseport(true).expect("reuseport");
    socket
        .bind("127.0.0.1:0".parse().expect("addr"))
        .expect("bind");
    let taken = socket.listen(16).expect("listen");
    let addr = taken.local_addr().expect("addr");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = one_region(
        dir.path(),
        &format!("listen: {addr}\nadmin_listen: 127.0.0.1:0\nregion: eu\nrouting_table: t.yaml\n"),
    );
    let o = std::process::Command::new("timeout")
        .args(["10", env!("CARGO_BIN_EXE_iuid-router"), "serve", "--config"])
        .arg(&path)
        .output()
        .expect("run iuid-router");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("cannot listen on {addr}")),
        "{}",
        stderr(&o)
    );
    drop(taken);
}
