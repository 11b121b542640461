//! The peered mesh (docs/mesh.md) end to end: three router processes — the edges of regions eu,
//! us and ap — and three regional upstreams on loopback. Each edge's table sends its own
//! region to its upstream and the other regions to the other edges, over mutual TLS (each
//! edge verifies the other's client certificate, docs/tls-h2-grpc.md) and HTTP/2.
//!
//! What is shown: any id through any edge reaches its owner with `Via` naming at most two
//! edges; two tables that disagree (a rollout in progress) end in a 508 after two hops, with
//! the requests each process saw counted; a dead edge's region fails fast from the others
//! while theirs keep serving; a table change rolled edge by edge under load loses nothing.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{iuid_for, Upstream};
use iuid_router::tls::client::{client_config, TlsFiles};

const REGIONS: [&str; 3] = ["eu", "us", "ap"];

/// One edge: a router process with its files under `dir/<name>/`.
struct Edge {
    name: &'static str,
    listen: SocketAddr,
    admin: SocketAddr,
    child: Option<Child>,
}

impl Drop for Edge {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The three edges, their upstreams, and a client that presents a certificate (the
/// region's load balancer, say: the edges require one).
struct Mesh {
    dir: tempfile::TempDir,
    edges: Vec<Edge>,
    upstreams: Vec<Upstream>,
    client: HttpsClient,
}

/// Where each country lives: `(country, region index)`. Countries 1, 2, 3 are eu, us, ap.
fn owners() -> Vec<(u8, usize)> {
    vec![(1, 0), (2, 1), (3, 2)]
}

fn make_certs(dir: &Path) {
    let certs = dir.join("certs");
    common::make_certs(&certs, false, &REGIONS);
    common::make_certs(&certs, true, &["eu-peer", "us-peer", "ap-peer", "lb"]);
}

impl Mesh {
    /// Starts the upstreams and the edges, each with the table `owners` gives.
    async fn start() -> Mesh {
        let dir = tempfile::tempdir().expect("tempdir");
        make_certs(dir.path());
        let mut upstreams = Vec::new();
        for name in REGIONS {
            upstreams.push(Upstream::start(name).await);
        }
        let mut mesh = Mesh {
            client: HttpsClient::new(dir.path(), true),
            dir,
            edges: Vec::new(),
            upstreams,
        };
        // Ports are picked free and released for the processes to bind, so another test may
        // take one first: then the mesh starts again on new ones.
        let mut why = String::new();
        for _attempt in 0..3 {
            match mesh.start_edges().await {
                Ok(edges) => {
                    mesh.edges = edges;
                    return mesh;
                }
                Err(e) => why = e,
            }
        }
        panic!("the mesh did not start: {why}");
    }

    /// Starts the three edges on fresh ports; an edge that exits or does not become ready
    /// (its own, by its table's path) within 15 s fails the attempt, with its log.
    async fn start_edges(&self) -> Result<Vec<Edge>, String> {
        // Held together, so that no two of them are the same port.
        let held: Vec<std::net::TcpListener> = (0..2 * REGIONS.len())
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let port = |i: usize| held[i].local_addr().expect("addr");
        let mut edges: Vec<Edge> = REGIONS
            .iter()
            .enumerate()
            .map(|(i, name)| Edge {
                name,
                listen: port(2 * i),
                admin: port(2 * i + 1),
                child: None,
            })
            .collect();
        drop(held);
        let addrs: Vec<SocketAddr> = edges.iter().map(|e| e.listen).collect();
        for (i, edge) in edges.iter().enumerate() {
            let edge_dir = self.dir.path().join(edge.name);
            std::fs::create_dir_all(&edge_dir).expect("edge dir");
            std::fs::write(edge_dir.join("router.yaml"), edge_config(edge)).expect("config");
            std::fs::write(
                edge_dir.join("routing-table.yaml"),
                self.table_for(i, "mesh-1", &owners(), &addrs),
            )
            .expect("table");
        }
        for edge in edges.iter_mut() {
            let dir = self.dir.path().join(edge.name);
            let log = std::fs::File::create(dir.join("router.log")).expect("log");
            let child = Command::new(env!("CARGO_BIN_EXE_iuid-router"))
                .args(["serve", "--config"])
                .arg(dir.join("router.yaml"))
                .stdout(Stdio::from(log.try_clone().expect("log")))
                .stderr(Stdio::from(log))
                .spawn()
                .expect("start edge");
            edge.child = Some(child);
        }
        for edge in edges.iter_mut() {
            let table = self.dir.path().join(edge.name).join("routing-table.yaml");
            let admin = edge.admin;
            let ready = common::eventually(Duration::from_secs(15), || async {
                let Ok(resp) = reqwest::get(format!("http://{admin}/admin/routing-table")).await
                else {
                    return false;
                };
                let status: serde_json::Value = resp.json().await.unwrap_or_default();
                status["source"].as_str() == table.to_str()
            })
            .await;
            let exited = edge
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if ready.is_none() || exited.is_some() {
                let log =
                    std::fs::read_to_string(self.dir.path().join(edge.name).join("router.log"))
                        .unwrap_or_default();
                return Err(format!("edge {} did not start: {log}", edge.name));
            }
        }
        Ok(edges)
    }

    /// Edge `me`'s table: its own region to its upstream, the others to their edges.
    fn table_for(
        &self,
        me: usize,
        version: &str,
        owners: &[(u8, usize)],
        edges: &[SocketAddr],
    ) -> String {
        let me_name = REGIONS[me];
        let mut t = format!("version: {version}\nregions:\n");
        for (r, name) in REGIONS.iter().enumerate() {
            if r == me {
                t += &format!(
                    "  {name}: {{ upstreams: [\"{}\"] }}\n",
                    self.upstreams[r].url()
                );
            } else {
                t += &format!(
                    "  {name}:\n    upstreams: [\"https://{}\"]\n    protocol: h2\n    tls: {{ ca: ../certs/ca.pem, client_cert: ../certs/{me_name}-peer.pem, client_key: ../certs/{me_name}-peer-key.pem, server_name: {name} }}\n",
                    edges[r]
                );
            }
        }
        t += "countries:\n";
        for (country, r) in owners {
            t += &format!("  {country}: {}\n", REGIONS[*r]);
        }
        t + &format!("default_region: {me_name}\n")
    }

    fn edge_addrs(&self) -> Vec<SocketAddr> {
        self.edges.iter().map(|e| e.listen).collect()
    }

    /// Rewrites edge `i`'s table (the file watch reloads it) and waits until it serves it.
    async fn roll(&self, i: usize, version: &str, owners: &[(u8, usize)]) {
        let path = self.dir.path().join(REGIONS[i]).join("routing-table.yaml");
        let text = self.table_for(i, version, owners, &self.edge_addrs());
        // Written aside and renamed over, as an editor or a ConfigMap update does.
        let tmp = path.with_extension("yaml.tmp");
        std::fs::write(&tmp, text).expect("write table");
        std::fs::rename(&tmp, &path).expect("rename table");
        let serving = common::eventually(Duration::from_secs(10), || async {
            self.version(i).await == version
        })
        .await;
        assert!(
            serving.is_some(),
            "edge {} never served {version}",
            REGIONS[i]
        );
    }

    async fn version(&self, i: usize) -> String {
        let Ok(resp) = reqwest::get(format!(
            "http://{}/admin/routing-table",
            self.edges[i].admin
        ))
        .await
        else {
            return String::new();
        };
        let v: serde_json::Value = resp.json().await.unwrap_or_default();
        v["version"].as_str().unwrap_or("").to_owned()
    }

    /// `GET /v1/orders/<id>` through edge `i`.
    async fn get(&self, i: usize, id: &str) -> Result<Answer, String> {
        self.client
            .get(
                self.edges[i].listen,
                REGIONS[i],
                &format!("/v1/orders/{id}"),
            )
            .await
    }

    /// Requests edge `i` has answered, from its `/metrics`.
    async fn answered(&self, i: usize) -> f64 {
        let text = reqwest::get(format!("http://{}/metrics", self.edges[i].admin))
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text");
        text.lines()
            .filter(|l| l.starts_with("iuid_router_requests_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    async fn answered_by_each(&self) -> Vec<f64> {
        let mut out = Vec::new();
        for i in 0..self.edges.len() {
            out.push(self.answered(i).await);
        }
        out
    }
}

fn edge_config(edge: &Edge) -> String {
    format!(
        "listen: {listen}\nadmin_listen: {admin}\nregion: {name}\nrouting_table: routing-table.yaml\n\
         routes:\n  - path: /v1/orders/{{id}}\n\
         tls:\n  certificates: [ {{ cert: ../certs/{name}.pem, key: ../certs/{name}-key.pem }} ]\n  client_auth: {{ ca: ../certs/ca.pem }}\n\
         timeouts: {{ connect_ms: 2000, response_headers_ms: 5000, idle_ms: 10000 }}\n\
         reload: {{ watch: true, debounce_ms: 50 }}\n\
         shutdown: {{ drain_delay_ms: 0, grace_ms: 1000 }}\n\
         access_log: false\n",
        listen = edge.listen,
        admin = edge.admin,
        name = edge.name,
    )
}

/// An answer: status and body.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: Vec<u8>,
}

impl Answer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// An HTTPS client that trusts the mesh's CA and, with `certificate`, presents the `lb`
/// client certificate (the region's load balancer, say). One connection per request: the
/// hyper client of the router's own upstream code, over the router's own TLS client config.
#[derive(Clone)]
struct HttpsClient {
    tls: tokio_rustls::TlsConnector,
}

impl HttpsClient {
    fn new(dir: &Path, certificate: bool) -> HttpsClient {
        let certs = dir.join("certs");
        let (ca, cert, key) = (
            certs.join("ca.pem"),
            certs.join("lb.pem"),
            certs.join("lb-key.pem"),
        );
        let config = client_config(
            &TlsFiles {
                ca: Some(&ca),
                client_cert: certificate.then_some(cert.as_path()),
                client_key: certificate.then_some(key.as_path()),
            },
            &[b"http/1.1"],
        )
        .expect("client tls");
        HttpsClient {
            tls: tokio_rustls::TlsConnector::from(config),
        }
    }

    /// `GET path` from `addr`, whose certificate is issued to `name`.
    async fn get(&self, addr: SocketAddr, name: &str, path: &str) -> Result<Answer, String> {
        let exchange = async {
            let tcp = tokio::net::TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connect: {e}"))?;
            let server = rustls::pki_types::ServerName::try_from(name.to_owned())
                .map_err(|e| e.to_string())?;
            let tls = self
                .tls
                .connect(server, tcp)
                .await
                .map_err(|e| format!("handshake: {e}"))?;
            let (mut send, conn) =
                hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tls))
                    .await
                    .map_err(|e| format!("http: {e}"))?;
            tokio::spawn(conn);
            let req = http::Request::get(path)
                .header("host", format!("{name}:{}", addr.port()))
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .map_err(|e| e.to_string())?;
            let resp = send
                .send_request(req)
                .await
                .map_err(|e| format!("request: {e}"))?;
            let status = resp.status().as_u16();
            let body = http_body_util::BodyExt::collect(resp.into_body())
                .await
                .map_err(|e| format!("body: {e}"))?
                .to_bytes()
                .to_vec();
            Ok(Answer { status, body })
        };
        tokio::time::timeout(Duration::from_secs(10), exchange)
            .await
            .map_err(|_| "timed out".to_owned())?
    }
}

fn via_names(via: &str) -> Vec<String> {
    via.split(',')
        .filter_map(|entry| entry.split_whitespace().nth(1).map(str::to_owned))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn any_id_through_any_edge_reaches_its_owner_in_at_most_two_edges() {
    let mesh = Mesh::start().await;
    for (entry, _) in REGIONS.iter().enumerate() {
        for (country, owner) in owners() {
            let resp = mesh.get(entry, &iuid_for(country)).await.expect("request");
            assert_eq!(
                resp.status, 200,
                "via {} for {}",
                REGIONS[entry], REGIONS[owner]
            );
            assert_eq!(resp.text(), REGIONS[owner]);
            let seen = mesh.upstreams[owner].last();
            let via: Vec<&str> = seen
                .headers
                .get_all("via")
                .iter()
                .filter_map(|v| v.to_str().ok())
                .collect();
            let via = via.join(", ");
            let names = via_names(&via);
            let want: Vec<&str> = if entry == owner {
                vec![REGIONS[entry]]
            } else {
                vec![REGIONS[entry], REGIONS[owner]]
            };
            assert_eq!(names, want, "Via at {}'s upstream: {via}", REGIONS[owner]);
        }
    }
    // The edges are mutual TLS: a client without a certificate is refused in the handshake.
    let anonymous = HttpsClient::new(mesh.dir.path(), false);
    let refused = anonymous
        .get(
            mesh.edges[0].listen,
            "eu",
            &format!("/v1/orders/{}", iuid_for(1)),
        )
        .await;
    assert!(
        refused.is_err(),
        "no client certificate, no request: {refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tables_that_disagree_answer_508_after_two_hops_never_a_loop() {
    let mesh = Mesh::start().await;
    // Mid-rollout: eu's table sends country 9 to us, us's sends it back to eu.
    let mut eu_says = owners();
    eu_says.push((9, 1));
    let mut us_says = owners();
    us_says.push((9, 0));
    mesh.roll(0, "mesh-eu", &eu_says).await;
    mesh.roll(1, "mesh-us", &us_says).await;

    let id = common::iuid(common::MINTED_MS, 9, 1, 7);
    for entry in [0, 1] {
        let before = mesh.answered_by_each().await;
        let started = Instant::now();
        let resp = mesh.get(entry, &id).await.expect("request");
        assert_eq!(resp.status, 508, "through {}", REGIONS[entry]);
        let body: serde_json::Value = serde_json::from_slice(&resp.body).expect("problem");
        assert_eq!(
            body["type"], "urn:iuid-router:problem:routing-loop",
            "{body}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        // Let anything still in flight land, then count what each process answered.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let after = mesh.answered_by_each().await;
        let seen: Vec<f64> = after.iter().zip(&before).map(|(a, b)| a - b).collect();
        // The entry edge twice (the request, then its return), the other once, ap never:
        // two hops, three requests in all, no storm.
        let mut want = vec![0.0; 3];
        want[entry] = 2.0;
        want[1 - entry] = 1.0;
        assert_eq!(
            seen, want,
            "requests answered by eu, us, ap via {}",
            REGIONS[entry]
        );
    }
    assert_eq!(
        mesh.upstreams[0].count() + mesh.upstreams[1].count(),
        0,
        "no upstream saw it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_edge_fails_fast_and_the_other_regions_keep_serving() {
    let mut mesh = Mesh::start().await;
    // Warm every path first: the peers hold h2 connections to ap.
    for entry in 0..3 {
        for (country, _) in owners() {
            assert_eq!(
                mesh.get(entry, &iuid_for(country))
                    .await
                    .expect("warm")
                    .status,
                200
            );
        }
    }
    if let Some(mut child) = mesh.edges[2].child.take() {
        child.kill().expect("kill ap");
        child.wait().expect("reap ap");
    }
    for entry in [0, 1] {
        for round in 0..3 {
            let started = Instant::now();
            let resp = mesh.get(entry, &iuid_for(3)).await.expect("request");
            let took = started.elapsed();
            assert!(
                [502, 503].contains(&resp.status),
                "ap through {} (round {round}): {}",
                REGIONS[entry],
                resp.status
            );
            assert!(took < Duration::from_secs(1), "fails fast: {took:?}");
        }
        for country in [1, 2] {
            let resp = mesh.get(entry, &iuid_for(country)).await.expect("request");
            assert_eq!(
                resp.status, 200,
                "country {country} through {}",
                REGIONS[entry]
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_table_change_rolled_edge_by_edge_under_load_loses_no_request() {
    let mesh = Arc::new(Mesh::start().await);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let mut load = Vec::new();
    for worker in 0..6 {
        let (mesh, stop, sent) = (mesh.clone(), stop.clone(), sent.clone());
        load.push(tokio::spawn(async move {
            let mut failures = Vec::new();
            let mut n = worker;
            while !stop.load(Ordering::Relaxed) {
                let (entry, country) = (n % 3, (n / 3 % 3) as u8 + 1);
                n += 1;
                match mesh.get(entry, &iuid_for(country)).await {
                    Ok(r) if r.status == 200 => {}
                    Ok(r) => failures.push(format!("{} via {entry}: {}", country, r.status)),
                    Err(e) => failures.push(format!("{country} via {entry}: {e}")),
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
            failures
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Country 3 moves from ap to us. The new owner first, so that no edge ever sends it to
    // an edge that would send it back.
    let moved = vec![(1, 0), (2, 1), (3, 1)];
    for i in [1, 0, 2] {
        mesh.roll(i, "mesh-2", &moved).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for task in load {
        failures.extend(task.await.expect("load task"));
    }
    let total = sent.load(Ordering::Relaxed);
    assert!(total > 100, "load ran: {total} requests");
    assert!(
        failures.is_empty(),
        "{} of {total} failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(5)]
    );
    // Every edge now sends country 3 to us.
    for (entry, name) in REGIONS.iter().enumerate() {
        let resp = mesh.get(entry, &iuid_for(3)).await.expect("request");
        assert_eq!(resp.text(), "us", "via {name}");
    }
}
