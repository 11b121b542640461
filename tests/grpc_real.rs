//! gRPC through the router with a real gRPC implementation on both sides: grpcio (gRPC's
//! C core, from PyPI; `.ci/run` installs it into `target/pyenv`) as the regional servers and
//! as the client, `tests/grpc_py/peer.py`.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::{free_port, iuid_for, ChildGuard, ConfigYaml, Router};
use serde_json::Value;

/// The Python with grpcio: `IUID_ROUTER_PYTHON`, else `target/pyenv/bin/python`.
fn python() -> PathBuf {
    let path = std::env::var_os("IUID_ROUTER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/pyenv/bin/python")
        });
    assert!(
        path.exists(),
        "{} is missing: python3 -m venv target/pyenv && target/pyenv/bin/pip install grpcio (as .ci/run does)",
        path.display()
    );
    path
}

fn peer() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/grpc_py/peer.py")
}

/// A grpcio server for one region, started and ready.
fn server(name: &str) -> (ChildGuard, String) {
    let port = free_port().port();
    let mut child = ChildGuard::spawn(
        Command::new(python())
            .arg(peer())
            .args(["server", &port.to_string(), name])
            .stdout(Stdio::piped())
            .stderr(Stdio::null()),
        "start grpcio server",
    );
    let stdout = child.get_mut().stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read");
    assert_eq!(line.trim(), "ready");
    (child, format!("http://127.0.0.1:{port}"))
}

/// One call by the grpcio client through the router: its JSON report.
async fn call(router: &Router, method: &str, id: &str) -> Value {
    let (target, method, id) = (router.addr.to_string(), method.to_owned(), id.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(python())
            .arg(peer())
            .args(["call", &target, &method, &id])
            .output()
    })
    .await
    .expect("join")
    .expect("run the client");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs grpcio in target/pyenv: bash .ci/run installs it and runs it"]
async fn a_grpcio_client_reaches_the_grpcio_server_of_the_owning_region() {
    let (_ap_child, ap) = server("ap-orders");
    let (_us_child, us) = server("us-orders");
    let table = format!(
        "version: grpc\nregions:\n  ap: {{ upstreams: [\"{ap}\"], protocol: h2 }}\n  us: {{ upstreams: [\"{us}\"], protocol: h2 }}\ncountries:\n  1: ap\n  2: us\ndefault_region: ap\n"
    );
    let config = ConfigYaml::new()
        .route("{ grpc: /orders.v1.Orders/GetOrder, field: 1 }")
        .route("{ grpc: /orders.v1.Orders/Watch, field: 1 }")
        .timeouts(500, 5000, 10_000)
        .watch(false)
        .yaml();
    let router = Router::start(&config, &table).await;

    let us_id = iuid_for(2);
    let unary = call(&router, "GetOrder", &us_id).await;
    assert_eq!(unary["code"], 0, "{unary}");
    assert_eq!(
        unary["messages"][0],
        format!("order {us_id} from us-orders")
    );
    assert_eq!(unary["trailing"]["x-served-by"], "us-orders");

    let ap_id = iuid_for(1);
    let streaming = call(&router, "Watch", &ap_id).await;
    assert_eq!(streaming["code"], 0, "{streaming}");
    assert_eq!(streaming["messages"].as_array().map(Vec::len), Some(3));
    assert_eq!(streaming["messages"][2], format!("event 2 of {ap_id}"));
    assert_eq!(streaming["trailing"]["x-served-by"], "ap-orders");

    // The router's own refusals, as the grpcio client sees them.
    let bad = call(&router, "GetOrder", "not-an-id").await;
    assert_eq!(bad["code"], 3, "INVALID_ARGUMENT: {bad}");
    let unowned = common::iuid(common::MINTED_MS, 9, 1, 7);
    let nobody = call(&router, "GetOrder", &unowned).await;
    assert_eq!(nobody["code"], 5, "NOT_FOUND: {nobody}");
}
