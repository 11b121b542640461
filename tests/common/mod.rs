//! Shared pieces of the integration tests: real upstream servers on loopback that record what
//! they receive, and the real router started on a loopback port.

#![allow(dead_code)] // each test binary uses a different part

pub mod grpc;
pub mod h3;
pub mod lists;
pub mod otlp;
pub mod spans;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::Request;
use iuid::Iuid;
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
        let addr = serve(app).await;
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
        // Bound as the binary binds (`SO_REUSEPORT`), so each worker accepts on a socket of
        // its own and the own engine's connections take the production path (`plain.rs`).
        let listener = iuid_router::server::bind("127.0.0.1:0".parse().expect("addr"), 1024)
            .await
            .expect("bind router");
        Router::start_on(dir, config, listener).await
    }

    /// [`Router::start_in`] on `listener`: one bound without `SO_REUSEPORT` is accepted on
    /// one thread, each connection handed to a worker (`server::serve`).
    pub async fn start_on(dir: tempfile::TempDir, config: &str, listener: TcpListener) -> Router {
        let config_path = write(&dir, "router.yaml", config);
        let config = RouterConfig::load(&config_path).unwrap_or_else(|e| panic!("config: {e}"));
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

    /// `POST /admin/reload`, which must answer 200.
    pub async fn reload(&self) {
        let resp = client()
            .post(self.admin_url("/admin/reload"))
            .send()
            .await
            .expect("reload");
        assert_eq!(resp.status(), 200, "the reload");
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn admin_url(&self, path: &str) -> String {
        format!("http://{}{}", self.admin, path)
    }

    /// The admin API's `/metrics` text (the router's admin API has no token in these tests).
    pub async fn metrics(&self) -> String {
        metrics_text(self.admin).await
    }

    /// The sum of the samples of `name` whose label text contains each of `labels` (e.g.
    /// `result="failure"`); 0 when there is none. The recorder is process-wide: tests in one
    /// binary add to the same counters, so assert at least, not exactly.
    pub async fn metric(&self, name: &str, labels: &[&str]) -> f64 {
        metric_sum(&self.metrics().await, name, labels)
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

/// A router config (YAML) for a test, so that each test spells out only the keys it is about.
/// It always has `listen` (127.0.0.1:0 unless set; [`Router::start`] ignores it), `region:
/// edge` and `routing_table: routing-table.yaml`; every other key appears only if a method
/// sets it.
#[derive(Debug, Clone)]
pub struct ConfigYaml {
    listen: String,
    admin_listen: Option<SocketAddr>,
    routes: Vec<String>,
    unrouted: Option<String>,
    timeouts: Option<(u64, u64, u64)>,
    watch: Option<bool>,
    debounce_ms: Option<u64>,
    limits: Option<String>,
    extra: String,
}

impl ConfigYaml {
    /// `listen`, `region` and `routing_table` only; add routes and the rest.
    pub fn new() -> ConfigYaml {
        ConfigYaml {
            listen: "127.0.0.1:0".to_owned(),
            admin_listen: None,
            routes: Vec::new(),
            unrouted: None,
            timeouts: None,
            watch: None,
            debounce_ms: None,
            limits: None,
            extra: String::new(),
        }
    }

    /// `listen: <addr>`, for the real binary (which does bind it).
    pub fn listen(mut self, addr: SocketAddr) -> ConfigYaml {
        self.listen = addr.to_string();
        self
    }

    /// `admin_listen: <addr>`.
    pub fn admin_listen(mut self, addr: SocketAddr) -> ConfigYaml {
        self.admin_listen = Some(addr);
        self
    }

    /// One more `routes:` item, written as given (`path: /o/{id}`, or a flow map).
    pub fn route(mut self, item: &str) -> ConfigYaml {
        self.routes.push(item.to_owned());
        self
    }

    /// One more `routes:` item `path: <pattern>`.
    pub fn route_path(self, pattern: &str) -> ConfigYaml {
        self.route(&format!("path: {pattern}"))
    }

    /// One more `routes:` item `graphql: <path>`.
    pub fn route_graphql(self, path: &str) -> ConfigYaml {
        self.route(&format!("graphql: {path}"))
    }

    /// One more `routes:` item `header: <name>`.
    pub fn route_header(self, name: &str) -> ConfigYaml {
        self.route(&format!("header: {name}"))
    }

    /// `unrouted: <policy>` (`default_region` or `reject`).
    pub fn unrouted(mut self, policy: &str) -> ConfigYaml {
        self.unrouted = Some(policy.to_owned());
        self
    }

    /// `timeouts: { connect_ms, response_headers_ms, idle_ms }`; a second call replaces it.
    pub fn timeouts(
        mut self,
        connect_ms: u64,
        response_headers_ms: u64,
        idle_ms: u64,
    ) -> ConfigYaml {
        self.timeouts = Some((connect_ms, response_headers_ms, idle_ms));
        self
    }

    /// `reload: { watch: <watch> }` (with `debounce_ms` if that is set too).
    pub fn watch(mut self, watch: bool) -> ConfigYaml {
        self.watch = Some(watch);
        self
    }

    /// `reload: { debounce_ms: <ms> }` (with `watch` if that is set too).
    pub fn debounce_ms(mut self, ms: u64) -> ConfigYaml {
        self.debounce_ms = Some(ms);
        self
    }

    /// `limits: { <fields> }`, the fields written as given (`max_hops: 3, …`); a second call
    /// replaces them.
    pub fn limits(mut self, fields: &str) -> ConfigYaml {
        self.limits = Some(fields.to_owned());
        self
    }

    /// Any other top-level keys, as YAML lines appended verbatim.
    pub fn extra(mut self, lines: &str) -> ConfigYaml {
        self.extra.push_str(lines);
        if !self.extra.is_empty() && !self.extra.ends_with('\n') {
            self.extra.push('\n');
        }
        self
    }

    /// The YAML text, for [`Router::start`] or a file the binary reads.
    pub fn yaml(&self) -> String {
        let mut y = format!("listen: {}\n", self.listen);
        if let Some(admin) = self.admin_listen {
            y += &format!("admin_listen: {admin}\n");
        }
        y += "region: edge\nrouting_table: routing-table.yaml\n";
        if !self.routes.is_empty() {
            y += "routes:\n";
            for item in &self.routes {
                y += &format!("  - {item}\n");
            }
        }
        if let Some(policy) = &self.unrouted {
            y += &format!("unrouted: {policy}\n");
        }
        if let Some((connect, headers, idle)) = self.timeouts {
            y += &format!(
                "timeouts: {{ connect_ms: {connect}, response_headers_ms: {headers}, idle_ms: {idle} }}\n"
            );
        }
        let reload: Vec<String> = [
            self.watch.map(|w| format!("watch: {w}")),
            self.debounce_ms.map(|ms| format!("debounce_ms: {ms}")),
        ]
        .into_iter()
        .flatten()
        .collect();
        if !reload.is_empty() {
            y += &format!("reload: {{ {} }}\n", reload.join(", "));
        }
        if let Some(fields) = &self.limits {
            y += &format!("limits: {{ {fields} }}\n");
        }
        y + &self.extra
    }
}

impl Default for ConfigYaml {
    fn default() -> ConfigYaml {
        ConfigYaml::new()
    }
}

/// The config of the REST routing tests: `/v1/orders/{id}` (alone and with a rest), the
/// `x-entity-id` header, unrouted requests to the default region, no file watch. A builder,
/// Every route kind (`path:` /v1/orders/{id}, `header:` x-entity-id, `graphql:` /graphql,
/// `fanout:` /v1/list, `query:` /v1/rides?order_id, `json:` /v1/payments /order_id, `grpc:`
/// orders.v1.Orders/GetOrder field 1), `legacy: probe` with every legacy request probed,
/// nothing unrouted (a request no route routes is a 404, not a silent success), the access
/// log on: the request life's and the traces' tests.
pub fn every_route_kind() -> ConfigYaml {
    ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .route_header("x-entity-id")
        .route_graphql("/graphql")
        .route("{ fanout: /v1/list, scheme: iuid, items: /items, id_field: id, timeout_ms: 2000 }")
        .route("{ path: /v1/rides, query: order_id }")
        .route("{ path: /v1/payments, json: /order_id }")
        .route("{ grpc: /orders.v1.Orders/GetOrder, field: 1 }")
        .unrouted("reject")
        .timeouts(500, 5000, 10_000)
        .watch(false)
        .extra("access_log: true")
        .extra("legacy: probe")
        .extra("legacy_probe: { budget_percent: 100, min_per_second: 1000 }")
}

/// so a test can change a key of it.
pub fn orders_config() -> ConfigYaml {
    ConfigYaml::new()
        .route_path("/v1/orders/{id}")
        .route_path("/v1/orders/{id}/{*rest}")
        .route_header("x-entity-id")
        .unrouted("default_region")
        .timeouts(500, 2000, 10000)
        .watch(false)
}

/// A client that neither follows redirects nor pools oddly: what a real API client does.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// The JSON a GET of `url` answers (an admin route); panics if there is none.
pub async fn get_json(url: &str) -> serde_json::Value {
    client()
        .get(url)
        .send()
        .await
        .expect("answer")
        .json()
        .await
        .expect("json")
}

/// Waits (10 s at most) until the router process whose admin listener is `admin` answers
/// `/readyz` with 200; panics if it does not.
pub async fn wait_ready(admin: SocketAddr) {
    let ready = eventually(std::time::Duration::from_secs(10), || async {
        reqwest::get(format!("http://{admin}/readyz"))
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert!(ready.is_some(), "the router did not start");
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

/// Serves `app` on a free loopback port for the rest of the test; its address.
pub async fn serve(app: axum::Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

/// A WebSocket echo server standing for an upstream: every message comes back.
pub async fn ws_echo_upstream() -> SocketAddr {
    use axum::extract::ws::WebSocketUpgrade;
    let app = axum::Router::new().fallback(axum::routing::get(|ws: WebSocketUpgrade| async move {
        ws.on_upgrade(|mut socket| async move {
            while let Some(Ok(msg)) = socket.recv().await {
                if socket.send(msg).await.is_err() {
                    break;
                }
            }
        })
    }));
    serve(app).await
}

/// A loopback address where nothing listens (bound, then closed): for a router to listen on,
/// or an upstream that refuses connections.
///
/// Never the same port twice in one test process: tests run in parallel, and the kernel
/// may hand a port just released to the next caller before the first one binds it.
pub fn free_port() -> SocketAddr {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    loop {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr");
        let mut given = GIVEN.lock().unwrap_or_else(|p| p.into_inner());
        if !given.contains(&addr.port()) {
            given.push(addr.port());
            return addr;
        }
    }
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

/// A raw upstream that answers every request with `parts`, written in turn with `pause`
/// between them, then closes: for answers a real server library would not send (broken
/// framing), or sends only slowly.
pub async fn scripted_upstream(parts: &[&'static [u8]], pause: std::time::Duration) -> SocketAddr {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let parts: Arc<[&'static [u8]]> = parts.into();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let parts = parts.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                // Each part leaves as it is written, not held back by Nagle.
                let _ = stream.set_nodelay(true);
                for (i, part) in parts.iter().enumerate() {
                    if i > 0 && !pause.is_zero() {
                        tokio::time::sleep(pause).await;
                    }
                    if stream.write_all(part).await.is_err() {
                        return;
                    }
                }
                let _ = stream.shutdown().await;
            });
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

/// When the tests' ids were minted, in Unix ms: a fixed instant (in 2027), so every run routes
/// the same ids.
pub const MINTED_MS: u64 = 1_800_000_000_000;

/// The text of the iUID with these fields: for tests that route by creation time or service,
/// or whose ids need other random bits than [`iuid_for`]'s.
pub fn iuid(ts_ms: u64, country: u8, service: u8, rand: u64) -> String {
    Iuid::from_fields(ts_ms, country, service, rand).to_string()
}

/// The text of an iUID of `country` (service 1, minted at [`MINTED_MS`], random bits 7): the
/// id a test routes when only its country matters.
pub fn iuid_for(country: u8) -> String {
    iuid(MINTED_MS, country, 1, 7)
}

/// A Relay global id: standard, padded base64 of `Type:uuid`, written out here so the tests
/// do not lean on the codec they check.
pub fn relay_id(type_name: &str, uuid: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let input = format!("{type_name}:{uuid}").into_bytes();
    let mut out = String::new();
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A child process (the real binary) that is killed and reaped when this guard drops, so a
/// test that fails midway leaves no process behind.
pub struct ChildGuard(Child);

impl ChildGuard {
    /// Spawns `command`; panics naming `what` if it cannot start.
    pub fn spawn(command: &mut Command, what: &str) -> ChildGuard {
        ChildGuard(command.spawn().unwrap_or_else(|e| panic!("{what}: {e}")))
    }

    /// The process id, e.g. to signal it.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// The process itself: to take its pipes, kill it or wait for it.
    pub fn get_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `tls:` lines of a router serving the `localhost` leaf that [`make_certs`] wrote in
/// `certs`.
pub fn tls_lines(certs: &std::path::Path) -> String {
    format!(
        "tls:\n  certificates:\n    - {{ cert: {0}/localhost.pem, key: {0}/localhost-key.pem }}\n",
        certs.display()
    )
}

/// Runs `config/make-certs.sh [--client] DIR NAME...` (openssl): a throwaway CA in `dir`, made
/// once and reused, then a server certificate per name, or with `client` a client one.
pub fn make_certs(dir: &std::path::Path, client: bool, names: &[&str]) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/make-certs.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(script);
    if client {
        cmd.arg("--client");
    }
    let out = cmd.arg(dir).args(names).output().expect("make-certs.sh");
    assert!(
        out.status.success(),
        "make-certs.sh (needs openssl): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `GET http://admin/metrics` as text.
pub async fn metrics_text(admin: SocketAddr) -> String {
    reqwest::get(format!("http://{admin}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("metrics text")
}

/// The sum of the samples of `name` in Prometheus `text` whose labels contain each of `labels`.
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
                && labels.iter().all(|want| l.contains(want))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// What `iuid-router check --config PATH` said.
pub struct Checked {
    /// The exit code (0: valid, 1: errors).
    pub code: Option<i32>,
    /// Standard output and standard error, in that order.
    pub output: String,
}

/// Runs the real binary's `check` on the config at `path`.
pub fn check(path: &std::path::Path) -> Checked {
    let out = Command::new(env!("CARGO_BIN_EXE_iuid-router"))
        .arg("check")
        .arg("--config")
        .arg(path)
        .output()
        .expect("run iuid-router check");
    Checked {
        code: out.status.code(),
        output: format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Writes `text` as `dir/router.yaml` and runs `check` on it: it must be refused, saying
/// `why`, at `router.yaml:{line}:` (the table must be in `dir`).
pub fn assert_refused_at(dir: &tempfile::TempDir, text: &str, why: &str, line: usize) {
    let path = write(dir, "router.yaml", text);
    let checked = check(&path);
    assert_ne!(checked.code, Some(0), "accepted:\n{text}");
    assert!(checked.output.contains(why), "{text}: {}", checked.output);
    assert!(
        checked.output.contains(&format!("router.yaml:{line}:")),
        "{text}: {}",
        checked.output
    );
}

/// Sends `request` as raw bytes on a new connection to `addr` and reads until the server
/// closes it (or 5 s pass): what went over the wire, as text.
pub async fn raw_http(addr: SocketAddr, request: Vec<u8>) -> String {
    tokio::task::spawn_blocking(move || {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(&request).expect("write");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .expect("join")
}

/// A strict reader's rule for chunk extensions (llhttp's, h11's):
/// `*( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] )`, RFC 9112 §7.1.1.
pub fn chunk_ext_ok(mut e: &[u8]) -> bool {
    let text = |c: u8| c == b'\t' || (c >= 0x20 && c != 0x7f);
    let ws = |e: &[u8]| e.iter().take_while(|&&c| c == b' ' || c == b'\t').count();
    let token = |e: &[u8]| {
        e.iter()
            .take_while(|&&c| c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c))
            .count()
    };
    while !e.is_empty() {
        e = &e[ws(e)..];
        let Some(rest) = e.strip_prefix(b";") else {
            return false;
        };
        e = &rest[ws(rest)..];
        let name = token(e);
        if name == 0 {
            return false;
        }
        e = &e[name..];
        let w = ws(e);
        let Some(rest) = e[w..].strip_prefix(b"=") else {
            continue;
        };
        e = &rest[ws(rest)..];
        if let Some(quoted) = e.strip_prefix(b"\"") {
            let mut i = 0;
            loop {
                match quoted.get(i) {
                    Some(b'"') => break,
                    Some(b'\\') if quoted.get(i + 1).is_some_and(|&c| text(c)) => i += 2,
                    Some(&c) if c != b'\\' && text(c) => i += 1,
                    _ => return false,
                }
            }
            e = &quoted[i + 1..];
        } else {
            let value = token(e);
            if value == 0 {
                return false;
            }
            e = &e[value..];
        }
    }
    true
}

/// The length of the message at the start of `got` once its head has come: the head and a
/// body of its `Content-Length` (none without one), whether or not the body has come.
pub fn message_len(got: &[u8]) -> Option<usize> {
    let end = got.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    Some(end + 4 + length)
}

/// Reads one answer from a blocking client connection: its head and a body of its
/// `Content-Length` (none without one). Panics if the connection closes first.
pub fn read_answer(conn: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if message_len(&got).is_some_and(|len| got.len() >= len) {
            return String::from_utf8_lossy(&got).into_owned();
        }
        let n = conn.read(&mut buf).expect("read");
        assert!(
            n > 0,
            "closed before a whole answer: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
}

/// A raw upstream that records each request's head and body as they came (one connection
/// after another, kept alive) and answers `200 ok`.
pub async fn recording_upstream() -> (String, std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = vec![0u8; 16384];
                loop {
                    let len = match message_len(&got) {
                        Some(len) if got.len() >= len => len,
                        _ => {
                            match stream.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => got.extend_from_slice(&buf[..n]),
                            }
                            continue;
                        }
                    };
                    let rest = got.split_off(len);
                    log.lock()
                        .expect("log")
                        .push(std::mem::replace(&mut got, rest));
                    let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                    if stream.write_all(answer).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, seen)
}

/// A TLS client that trusts the CA in the PEM file `ca`, speaks `versions` (e.g.
/// `rustls::DEFAULT_VERSIONS`) and offers `alpn`, on ring as the router is.
pub fn tls_connector(
    ca: &std::path::Path,
    versions: &[&'static rustls::SupportedProtocolVersion],
    alpn: &[&[u8]],
) -> tokio_rustls::TlsConnector {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca).expect("ca") {
        roots.add(cert.expect("der")).expect("root");
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(versions)
    .expect("versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// A TLS connection to the router at `addr` as `localhost` (the leaf [`make_certs`] wrote),
/// verified against `certs/ca.pem`, offering `alpn`.
pub async fn tls_to_localhost(
    addr: SocketAddr,
    certs: &std::path::Path,
    alpn: &[u8],
) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let connector = tls_connector(&certs.join("ca.pem"), rustls::DEFAULT_VERSIONS, &[alpn]);
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost".to_owned()).expect("name");
    connector.connect(name, tcp).await.expect("TLS handshake")
}

/// HTTP/1.1 over the router's TLS listener at `addr`: `request`'s bytes sent, the answer's
/// text read until the router closes (5 s at most).
pub async fn tls_raw(addr: SocketAddr, certs: &std::path::Path, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tls = tls_to_localhost(addr, certs, b"http/1.1").await;
    tls.write_all(request).await.expect("write");
    let mut out = Vec::new();
    let _ =
        tokio::time::timeout(std::time::Duration::from_secs(5), tls.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads from `stream` until the end of a request or response head; `None` on EOF or error
/// first.
pub async fn read_head(stream: &mut tokio::net::TcpStream) -> Option<String> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::io::AsyncReadExt::read(stream, &mut buf).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    Some(String::from_utf8_lossy(&head).into_owned())
}

/// An upstream that reads each request's head, records its request line, then resets the
/// connection without answering (and without reading any body).
pub async fn resetting_upstream() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                if let Some(head) = read_head(&mut stream).await {
                    let line = head.lines().next().unwrap_or_default().to_owned();
                    log.lock().expect("log").push(line);
                }
                // RST, not FIN: the upstream died mid-request.
                let _ = stream.set_zero_linger();
                drop(stream);
            });
        }
    });
    (addr, seen)
}

/// The table of three regions `eu`, `us` and `ap` on the given upstream URLs, with countries 1 →
/// `ap`, 2 → `us`, 3 → `eu` and `eu` the default: the GraphQL and write-routing tests' world.
pub fn three_regions(version: &str, eu: &str, us: &str, ap: &str) -> String {
    format!(
        "version: {version}\nregions:\n  eu: {{ upstreams: [\"{}\"] }}\n  us: {{ upstreams: [\"{}\"] }}\n  ap: {{ upstreams: [\"{}\"] }}\ncountries:\n  1: ap\n  2: us\n  3: eu\ndefault_region: eu\n",
        eu, us, ap
    )
}
