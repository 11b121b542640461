//! Shared pieces of the integration tests: real upstream servers on loopback that record what
//! they receive, and the real router started on a loopback port.

#![allow(dead_code)] // each test binary uses a different part

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::Request;
use iuid_router::app::App;
use iuid_router::config::RouterConfig;
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
                // `x-delay-ms` makes this upstream slow, for drain and timeout tests.
                let delay = parts
                    .headers
                    .get("x-delay-ms")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.parse::<u64>().ok());
                if let Some(ms) = delay {
                    tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
                }
                // A body the client (through the router) failed to send is recorded empty; the
                // connection is gone anyway.
                let body = axum::body::to_bytes(body, 64 << 20)
                    .await
                    .unwrap_or_default();
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

/// The router running in this process on loopback ports (public and admin), with its files
/// in a temp dir. Dropping it shuts the router down.
pub struct Router {
    pub addr: SocketAddr,
    pub admin: SocketAddr,
    pub dir: tempfile::TempDir,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    pub done: tokio::sync::oneshot::Receiver<()>,
}

impl Router {
    /// Writes `config` (YAML; its `listen` is ignored: the test binds free ports) and
    /// `table` to a temp dir and starts the router on them.
    pub async fn start(config: &str, table: &str) -> Router {
        let dir = tempfile::tempdir().expect("tempdir");
        write(&dir, "routing-table.yaml", table);
        Router::start_in(dir, config).await
    }

    /// Starts the router with `config` written to `dir/router.yaml`; the table must be there.
    pub async fn start_in(dir: tempfile::TempDir, config: &str) -> Router {
        let config_path = write(&dir, "router.yaml", config);
        let config = RouterConfig::load(&config_path).unwrap_or_else(|e| panic!("config: {e}"));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind router");
        let admin = TcpListener::bind("127.0.0.1:0").await.expect("bind admin");
        let (addr, admin_addr) = (
            listener.local_addr().expect("addr"),
            admin.local_addr().expect("addr"),
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let stop = async move {
                let _ = rx.await;
            };
            let app = App::new(config).unwrap_or_else(|e| panic!("router failed: {e}"));
            if let Err(e) = app.run(listener, Some(admin), stop).await {
                panic!("router failed: {e}");
            }
            let _ = done_tx.send(());
        });
        let router = Router {
            addr,
            admin: admin_addr,
            dir,
            shutdown: Some(tx),
            done,
        };
        // The table loads inside the spawned task: wait until it serves.
        let ready = eventually(std::time::Duration::from_secs(10), || async {
            let resp = reqwest::get(router.admin_url("/readyz")).await;
            resp.is_ok_and(|r| r.status() == 200)
        })
        .await;
        assert!(ready.is_some(), "the router did not become ready");
        router
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{}", self.admin, path)
    }

    /// Begins graceful shutdown.
    pub fn shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        self.shutdown();
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
reload: { watch: false }
";

/// A client that neither follows redirects nor pools oddly: what a real API client does.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// Polls `check` every 20 ms until it is true or `within` passes; returns how long it took.
pub async fn eventually<F, Fut>(
    within: std::time::Duration,
    mut check: F,
) -> Option<std::time::Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while start.elapsed() < within {
        if check().await {
            return Some(start.elapsed());
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    None
}

/// A WebSocket echo server standing for an upstream: every message comes back.
pub async fn ws_echo_upstream() -> SocketAddr {
    use axum::extract::ws::WebSocketUpgrade;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind ws");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().fallback(axum::routing::get(|ws: WebSocketUpgrade| async move {
        ws.on_upgrade(|mut socket| async move {
            while let Some(Ok(msg)) = socket.recv().await {
                if socket.send(msg).await.is_err() {
                    break;
                }
            }
        })
    }));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// A port where nothing listens (bound, then closed).
pub fn dead_addr() -> SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
}

/// A server that accepts connections and never answers: a hung upstream.
pub async fn hanging_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    addr
}

/// A routing table whose country `k + 1` belongs to `regions[k]` (named `a`, `b`, `c`, …
/// with the given upstream URLs); the first region is the default.
pub fn lettered_table(version: &str, regions: &[&[String]]) -> String {
    let mut text = format!("version: {version}\nregions:\n");
    for (k, upstreams) in regions.iter().enumerate() {
        let list: Vec<String> = upstreams.iter().map(|u| format!("\"{u}\"")).collect();
        text += &format!("  {}: {{ upstreams: [{}] }}\n", letter(k), list.join(", "));
    }
    text += "countries:\n";
    for k in 0..regions.len() {
        text += &format!("  {}: {}\n", k + 1, letter(k));
    }
    text + "default_region: a\n"
}

fn letter(k: usize) -> char {
    char::from(b'a' + k as u8)
}

/// `http://addr`.
pub fn url(addr: SocketAddr) -> String {
    format!("http://{addr}")
}
