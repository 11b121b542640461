//! Shared pieces of the integration tests: real upstream servers on loopback that record what
//! they receive, and the real router started on a loopback port.

#![allow(dead_code)] // each test binary uses a different part

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use axum::body::Bytes;
use axum::extract::Request;
use iuid_router::config::RouterConfig;
use iuid_router::proxy::Proxy;
use iuid_router::table::load_file;
use tokio::net::TcpListener;

/// One request as an upstream received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    /// Path and query exactly as received.
    pub target: String,
    pub headers: http::HeaderMap,
    pub body: Bytes,
}

/// A real HTTP server standing for one regional gateway. It answers `200` with its name in
/// the body and in `x-upstream`, and records every request.
#[derive(Clone)]
pub struct Upstream {
    pub name: &'static str,
    pub addr: SocketAddr,
    pub received: Arc<Mutex<Vec<Received>>>,
}

impl Upstream {
    pub async fn start(name: &'static str) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("upstream addr");
        let received: Arc<Mutex<Vec<Received>>> = Arc::default();
        let log = received.clone();
        let app = axum::Router::new().fallback(move |req: Request| {
            let log = log.clone();
            async move {
                let (parts, body) = req.into_parts();
                let body = axum::body::to_bytes(body, 64 << 20).await.expect("body");
                let target = parts
                    .uri
                    .path_and_query()
                    .map(|pq| pq.as_str().to_owned())
                    .unwrap_or_default();
                log.lock().expect("log").push(Received {
                    method: parts.method.to_string(),
                    target,
                    headers: parts.headers,
                    body,
                });
                (
                    [
                        ("x-upstream", name),
                        ("connection", "keep-alive, x-upstream-secret"),
                        ("x-upstream-secret", "1"),
                    ],
                    name,
                )
            }
        });
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Upstream {
            name,
            addr,
            received,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn count(&self) -> usize {
        self.received.lock().expect("log").len()
    }

    pub fn last(&self) -> Received {
        self.received
            .lock()
            .expect("log")
            .last()
            .cloned()
            .expect("a request arrived")
    }
}

/// The router running in this process on a loopback port, with its files in a temp dir.
pub struct Router {
    pub addr: SocketAddr,
    pub dir: tempfile::TempDir,
}

impl Router {
    /// Writes `config` (YAML; its `listen` is ignored: the test binds a free port) and
    /// `table` to a temp dir and starts the router on them.
    pub async fn start(config: &str, table: &str) -> Router {
        let dir = tempfile::tempdir().expect("tempdir");
        let config_path = write(&dir, "router.yaml", config);
        write(&dir, "routing-table.yaml", table);
        let config = RouterConfig::load(&config_path).unwrap_or_else(|e| panic!("config: {e}"));
        let table = load_file(&config.routing_table).unwrap_or_else(|e| panic!("table: {e}"));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind router");
        let addr = listener.local_addr().expect("router addr");
        let proxy = Arc::new(Proxy::new(
            Arc::new(config),
            Arc::new(ArcSwap::from_pointee(table)),
        ));
        tokio::spawn(iuid_router::server::serve(listener, proxy));
        Router { addr, dir }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }
}

pub fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write file");
    path
}

/// The router config used by most tests.
pub const CONFIG: &str = "\
listen: 127.0.0.1:0
region: edge
routing_table: routing-table.yaml
routes:
  - path: /v1/orders/{id}
  - path: /v1/orders/{id}/{*rest}
  - header: x-entity-id
unrouted: default_region
timeouts: { connect_ms: 500, response_headers_ms: 2000, idle_ms: 10000 }
";

/// A client that neither follows redirects nor pools oddly: what a real API client does.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}
