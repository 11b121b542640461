//! Failover in a mesh of edges (docs/failover.md "In a mesh", docs/mesh.md): two router
//! processes, the edges of regions `eu` and `ap`, each with `region:` set and `trusted_proxies:
//! [127.0.0.1/32]`. Each edge's table sends its own region to its services and the other region
//! to the other edge; `ap`'s services are dark (a refused port), and on edge-ap `ap` fails over
//! to `eu` (edge-eu).
//!
//! Shown, over HTTP/1.1 and h2c between the edges (so the failed-over read arrives on the own
//! engine's head path and on the shared phases):
//!
//! - a read of an `ap` entity sent to edge-eu goes to edge-ap, fails over back to edge-eu marked
//!   `X-Iuid-Failover: ap`, and edge-eu serves it from `eu`'s services once: 200 with
//!   `X-Iuid-Failover: ap`, no 508 although `Via` names `eu` already, each edge handling the
//!   requests it should (no loop); a write is refused by edge-ap (`serves: reads`);
//! - `limits.max_hops` still bounds such a read (508 `routing-loop`);
//! - a read failed over to a region that is dark as well is never failed over again;
//! - a client that is not a trusted peer (127.0.0.2) gets its `X-Iuid-Failover` removed: normal
//!   routing, and 508 for a `Via` naming the edge's region; a trusted one's is believed.

mod common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{iuid_for, metric_sum, metrics_text, ChildGuard, ConfigYaml, Upstream};

/// An `eu` entity (country 1) and an `ap` one (country 3).
const EU: u8 = 1;
const AP: u8 = 3;
const LOOP: &str = "urn:iuid-router:problem:routing-loop";

/// One edge: a router process (the real binary) with its files in `dir`.
struct Edge {
    listen: SocketAddr,
    admin: SocketAddr,
    dir: tempfile::TempDir,
    _child: ChildGuard,
}

impl Edge {
    /// Requests this edge answered (`iuid_router_requests_total`), of status class `class`
    /// (`2xx`, …) or all.
    async fn requests(&self, class: Option<&str>) -> f64 {
        let label = class.map(|c| format!("status=\"{c}\""));
        let labels: Vec<&str> = label.iter().map(String::as_str).collect();
        metric_sum(
            &metrics_text(self.admin).await,
            "iuid_router_requests_total",
            &labels,
        )
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("router.log")).unwrap_or_default()
    }
}

/// How the edges speak to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Peering {
    /// HTTP/1.1: a peer's request arrives on the own engine's head path.
    Http1,
    /// h2c (`protocol: h2` over `http://`): it arrives through the shared phases.
    H2c,
}

/// What each edge's table says, beyond the peer's address.
#[derive(Debug, Clone, Copy)]
struct Tables<'a> {
    /// edge-eu's `eu` region: its services and the `failover:` line, if any.
    eu: (&'a str, Option<&'a str>),
    /// edge-ap's `ap` region: its services and the `failover:` line, if any.
    ap: (&'a str, Option<&'a str>),
    peering: Peering,
    /// edge-eu's `limits:` fields, if any.
    eu_limits: Option<&'a str>,
}

/// The two edges.
struct Mesh {
    eu: Edge,
    ap: Edge,
}

/// Edge `region`'s table: `own` (its services, `failover` line) for its region, the peer edge
/// at `peer` for `other`.
fn table(
    region: &str,
    own: (&str, Option<&str>),
    other: &str,
    peer: SocketAddr,
    peering: Peering,
) -> String {
    let (services, failover) = own;
    let failover = failover.map_or(String::new(), |f| format!(", failover: {f}"));
    let protocol = match peering {
        Peering::Http1 => "",
        Peering::H2c => ", protocol: h2",
    };
    format!(
        "version: mesh-{region}\nregions:\n  {region}: {{ upstreams: [\"{services}\"]{failover} }}\n  {other}: {{ upstreams: [\"http://{peer}\"]{protocol} }}\ncountries:\n  {EU}: eu\n  {AP}: ap\ndefault_region: {region}\n"
    )
}

/// Edge `region`'s `router.yaml`.
fn config(region: &str, listen: SocketAddr, admin: SocketAddr, limits: Option<&str>) -> String {
    let mut config = ConfigYaml::new()
        .listen(listen)
        .admin_listen(admin)
        .route_path("/v1/orders/{id}")
        .unrouted("default_region")
        .timeouts(500, 3000, 10_000)
        .watch(false)
        .extra("trusted_proxies: [\"127.0.0.1/32\"]");
    if let Some(fields) = limits {
        config = config.limits(fields);
    }
    config
        .yaml()
        .replace("region: edge\n", &format!("region: {region}\n"))
}

impl Mesh {
    /// Starts both edges on fresh ports (again on new ones if another test took one first).
    async fn start(tables: Tables<'_>) -> Mesh {
        let mut why = String::new();
        for _ in 0..3 {
            match Mesh::try_start(tables).await {
                Ok(mesh) => return mesh,
                Err(e) => why = e,
            }
        }
        panic!("the mesh did not start: {why}");
    }

    async fn try_start(tables: Tables<'_>) -> Result<Mesh, String> {
        // Held together, so that no two of them are the same port.
        let held: Vec<std::net::TcpListener> = (0..4)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let port = |i: usize| held[i].local_addr().expect("addr");
        let (eu_listen, eu_admin, ap_listen, ap_admin) = (port(0), port(1), port(2), port(3));
        drop(held);
        let eu = spawn_edge(
            "eu",
            (eu_listen, eu_admin),
            &config("eu", eu_listen, eu_admin, tables.eu_limits),
            &table("eu", tables.eu, "ap", ap_listen, tables.peering),
        );
        let ap = spawn_edge(
            "ap",
            (ap_listen, ap_admin),
            &config("ap", ap_listen, ap_admin, None),
            &table("ap", tables.ap, "eu", eu_listen, tables.peering),
        );
        for edge in [&eu, &ap] {
            let admin = edge.admin;
            let ready = common::eventually(Duration::from_secs(15), || async {
                reqwest::get(format!("http://{admin}/readyz"))
                    .await
                    .is_ok_and(|r| r.status() == 200)
            })
            .await;
            if ready.is_none() {
                return Err(format!("an edge did not start: {}", edge.log()));
            }
        }
        Ok(Mesh { eu, ap })
    }

    /// `(edge-eu, edge-ap)` requests answered so far.
    async fn handled(&self) -> (f64, f64) {
        (self.eu.requests(None).await, self.ap.requests(None).await)
    }

    /// Waits until the edges have answered `want` requests in all (each request is counted
    /// once its answer is done, which may be just after the client has it), then a moment
    /// more for any that should not come.
    async fn settle(&self, want: (f64, f64)) -> (f64, f64) {
        let _ = common::eventually(Duration::from_secs(5), || async {
            self.handled().await == want
        })
        .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.handled().await
    }
}

fn spawn_edge(
    name: &str,
    (listen, admin): (SocketAddr, SocketAddr),
    config: &str,
    table: &str,
) -> Edge {
    let dir = tempfile::tempdir().expect("edge dir");
    common::write(&dir, "router.yaml", config);
    common::write(&dir, "routing-table.yaml", table);
    let log = std::fs::File::create(dir.path().join("router.log")).expect("log");
    let child = ChildGuard::spawn(
        Command::new(env!("CARGO_BIN_EXE_iuid-router"))
            .args(["serve", "--config"])
            .arg(dir.path().join("router.yaml"))
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log)),
        &format!("edge-{name}"),
    );
    Edge {
        listen,
        admin,
        dir,
        _child: child,
    }
}

/// A client from `ip` (127.0.0.1 is a trusted peer of both edges, 127.0.0.2 is not).
fn client_from(ip: Ipv4Addr) -> reqwest::Client {
    client_over(ip, false)
}

/// [`client_from`], speaking h2c (prior knowledge) if `h2`: its requests take the shared
/// phases.
fn client_over(ip: Ipv4Addr, h2: bool) -> reqwest::Client {
    let builder = reqwest::Client::builder()
        .local_address(IpAddr::V4(ip))
        .redirect(reqwest::redirect::Policy::none());
    let builder = if h2 {
        builder.http2_prior_knowledge()
    } else {
        builder
    };
    builder.build().expect("client")
}

const TRUSTED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 1);
const UNTRUSTED: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// An answer: status, `X-Iuid-Failover`, body.
#[derive(Debug)]
struct Got {
    status: u16,
    failover: Option<String>,
    body: String,
}

async fn send(
    client: &reqwest::Client,
    edge: &Edge,
    method: &str,
    country: u8,
    fields: &[(&str, &str)],
) -> Got {
    let url = format!("http://{}/v1/orders/{}", edge.listen, iuid_for(country));
    let method = http::Method::from_bytes(method.as_bytes()).expect("method");
    let body = if method == http::Method::GET { "" } else { "w" };
    let mut req = client.request(method, url).body(body);
    for (name, value) in fields {
        req = req.header(*name, *value);
    }
    let resp = req.send().await.expect("answer");
    let status = resp.status().as_u16();
    let failover = resp
        .headers()
        .get("x-iuid-failover")
        .map(|v| v.to_str().unwrap_or("?").to_owned());
    let body = resp.text().await.expect("body");
    Got {
        status,
        failover,
        body,
    }
}

fn marked(r: &common::Received) -> Option<&str> {
    r.headers
        .get("x-iuid-failover")
        .map(|v| v.to_str().unwrap_or("?"))
}

/// edge-ap's `ap` dark, failing over to `eu`; edge-eu's `eu` on `eu_svc`.
fn dark_ap<'a>(eu_svc: &'a str, dead: &'a str, peering: Peering) -> Tables<'a> {
    Tables {
        eu: (eu_svc, None),
        ap: (dead, Some("{ region: eu }")),
        peering,
        eu_limits: None,
    }
}

async fn a_read_comes_back_once(peering: Peering) {
    let eu_svc = Upstream::start("eu-svc").await;
    let dead = common::url(common::free_port());
    let mesh = Mesh::start(dark_ap(&eu_svc.url(), &dead, peering)).await;
    let client = client_from(TRUSTED);

    let got = send(&client, &mesh.eu, "GET", AP, &[]).await;
    let log = || format!("edge-eu:\n{}\nedge-ap:\n{}", mesh.eu.log(), mesh.ap.log());
    assert_eq!(
        (got.status, got.body.as_str(), got.failover.as_deref()),
        (200, "eu-svc", Some("ap")),
        "{peering:?}: {got:?}\n{}",
        log()
    );
    assert_eq!(eu_svc.count(), 1, "{peering:?}: eu's services asked once");
    let served = eu_svc.last();
    assert_eq!(marked(&served), Some("ap"), "{peering:?}: {served:?}");
    assert_eq!(
        mesh.settle((2.0, 1.0)).await,
        (2.0, 1.0),
        "{peering:?}: (edge-eu, edge-ap) requests: the client's and the failed-over one on \
         edge-eu, one on edge-ap"
    );
    assert_eq!(
        mesh.eu.requests(Some("2xx")).await,
        2.0,
        "{peering:?}: no 508"
    );
    assert_eq!(mesh.ap.requests(Some("2xx")).await, 1.0, "{peering:?}");
    let failed_over = metric_sum(
        &metrics_text(mesh.ap.admin).await,
        "iuid_router_failover_requests_total",
        &["region=\"ap\"", "to=\"eu\"", "access=\"read\""],
    );
    assert_eq!(failed_over, 1.0, "{peering:?}: counted on edge-ap");

    // A write stays with its owner: edge-ap refuses it at once, nothing reaches eu.
    let got = send(&client, &mesh.eu, "POST", AP, &[]).await;
    assert_eq!(
        got.status, 503,
        "{peering:?}: a write of a dark region: {got:?}"
    );
    assert_eq!(eu_svc.count(), 1, "{peering:?}: the write never reached eu");
    assert_eq!(mesh.settle((3.0, 2.0)).await, (3.0, 2.0), "{peering:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_a_dark_region_is_served_once_by_the_edge_it_came_from_over_http1() {
    a_read_comes_back_once(Peering::Http1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_a_dark_region_is_served_once_by_the_edge_it_came_from_over_h2c() {
    a_read_comes_back_once(Peering::H2c).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_hops_still_bounds_a_failed_over_read() {
    for peering in [Peering::Http1, Peering::H2c] {
        let eu_svc = Upstream::start("eu-svc").await;
        let dead = common::url(common::free_port());
        let eu_svc_url = eu_svc.url();
        let tables = Tables {
            eu_limits: Some("max_hops: 2"),
            ..dark_ap(&eu_svc_url, &dead, peering)
        };
        let mesh = Mesh::start(tables).await;
        // edge-eu (0 hops) → edge-ap (1) → back to edge-eu with `Via: 1.1 eu, 1.1 ap`: 2.
        let got = send(&client_from(TRUSTED), &mesh.eu, "GET", AP, &[]).await;
        assert_eq!(got.status, 508, "{peering:?}: {got:?}");
        assert!(got.body.contains(LOOP), "{peering:?}: {got:?}");
        assert_eq!(eu_svc.count(), 0, "{peering:?}");
        assert_eq!(mesh.settle((2.0, 1.0)).await, (2.0, 1.0), "{peering:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_failed_over_to_a_dark_region_is_never_failed_over_again() {
    for peering in [Peering::Http1, Peering::H2c] {
        // Each region dark, each failing over to the other: a read may move once, no more.
        let (dead_eu, dead_ap) = (
            common::url(common::free_port()),
            common::url(common::free_port()),
        );
        let mesh = Mesh::start(Tables {
            eu: (&dead_eu, Some("{ region: ap }")),
            ap: (&dead_ap, Some("{ region: eu }")),
            peering,
            eu_limits: None,
        })
        .await;
        let client = client_from(TRUSTED);
        // ap's read: edge-eu → edge-ap (dark) → edge-eu, whose `eu` is dark too: refused there.
        let got = send(&client, &mesh.eu, "GET", AP, &[]).await;
        assert_eq!(got.status, 503, "{peering:?}: {got:?}");
        assert_eq!(got.failover.as_deref(), Some("ap"), "{peering:?}: {got:?}");
        assert!(!got.body.contains(LOOP), "{peering:?}: {got:?}");
        assert_eq!(
            mesh.settle((2.0, 1.0)).await,
            (2.0, 1.0),
            "{peering:?}: no loop"
        );
        // eu's read: edge-eu (dark) fails it over to edge-ap, whose `ap` is dark: refused there.
        let got = send(&client, &mesh.eu, "GET", EU, &[]).await;
        assert_eq!(got.status, 503, "{peering:?}: {got:?}");
        assert_eq!(got.failover.as_deref(), Some("eu"), "{peering:?}: {got:?}");
        assert_eq!(
            mesh.settle((3.0, 2.0)).await,
            (3.0, 2.0),
            "{peering:?}: no loop"
        );
        let back = metric_sum(
            &metrics_text(mesh.eu.admin).await,
            "iuid_router_failover_requests_total",
            &["region=\"eu\""],
        );
        assert_eq!(
            back, 1.0,
            "{peering:?}: edge-eu failed over its own read only"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_client_s_failover_field_is_removed_and_a_trusted_peer_s_believed() {
    let eu_svc = Upstream::start("eu-svc").await;
    let dead = common::url(common::free_port());
    let mesh = Mesh::start(dark_ap(&eu_svc.url(), &dead, Peering::Http1)).await;
    let claim = [("x-iuid-failover", "ap")];
    // Over HTTP/1.1 (the head path), then h2c (the shared phases): per round, edge-eu
    // answers 5 requests, edge-ap 1, eu's services 3.
    for (round, h2) in [false, true].into_iter().enumerate() {
        let (untrusted, trusted) = (client_over(UNTRUSTED, h2), client_over(TRUSTED, h2));
        let k = round as f64;
        let served = |n: usize| 3 * round + n;
        let p = if h2 { "h2c" } else { "HTTP/1.1" };

        // An eu read: served by eu, the field gone, the answer unmarked.
        let got = send(&untrusted, &mesh.eu, "GET", EU, &claim).await;
        assert_eq!(
            (got.status, got.failover.as_deref()),
            (200, None),
            "{p}: {got:?}"
        );
        assert_eq!(eu_svc.count(), served(1), "{p}");
        assert_eq!(
            marked(&eu_svc.last()),
            None,
            "{p}: the client's X-Iuid-Failover went on"
        );
        assert_eq!(
            mesh.settle((5.0 * k + 1.0, k)).await,
            (5.0 * k + 1.0, k),
            "{p}"
        );

        // An ap read: routed as any other, to edge-ap, which fails it over (and marks it).
        let got = send(&untrusted, &mesh.eu, "GET", AP, &claim).await;
        assert_eq!(
            (got.status, got.body.as_str(), got.failover.as_deref()),
            (200, "eu-svc", Some("ap")),
            "{p}: {got:?}"
        );
        assert_eq!(eu_svc.count(), served(2), "{p}");
        assert_eq!(marked(&eu_svc.last()), Some("ap"), "{p}: edge-ap's mark");
        assert_eq!(
            mesh.settle((5.0 * k + 3.0, k + 1.0)).await,
            (5.0 * k + 3.0, k + 1.0),
            "{p}: the claim was not believed: edge-ap asked"
        );

        // Its `Via` naming eu is a loop, the claim notwithstanding.
        let via = [("x-iuid-failover", "ap"), ("via", "1.1 eu")];
        let got = send(&untrusted, &mesh.eu, "GET", AP, &via).await;
        assert_eq!(got.status, 508, "{p}: {got:?}");
        assert!(got.body.contains(LOOP), "{p}: {got:?}");
        assert_eq!(eu_svc.count(), served(2), "{p}");
        assert_eq!(
            mesh.settle((5.0 * k + 4.0, k + 1.0)).await,
            (5.0 * k + 4.0, k + 1.0),
            "{p}"
        );

        // The same from a trusted peer: served in eu at once, kept, never sent to edge-ap.
        let got = send(&trusted, &mesh.eu, "GET", AP, &via).await;
        assert_eq!(
            (got.status, got.body.as_str()),
            (200, "eu-svc"),
            "{p}: {got:?}"
        );
        assert_eq!(eu_svc.count(), served(3), "{p}");
        assert_eq!(
            marked(&eu_svc.last()),
            Some("ap"),
            "{p}: a trusted peer's mark is kept"
        );
        assert_eq!(
            mesh.settle((5.0 * k + 5.0, k + 1.0)).await,
            (5.0 * k + 5.0, k + 1.0),
            "{p}: a trusted peer's failed-over read is not forwarded again"
        );
    }
}

/// Under `serves: all` a write moves too, and comes back to the edge it entered at once, the
/// same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_under_serves_all_comes_back_once_too() {
    let eu_svc = Upstream::start("eu-svc").await;
    let dead = common::url(common::free_port());
    let eu_svc_url = eu_svc.url();
    let mesh = Mesh::start(Tables {
        ap: (&dead, Some("{ region: eu, serves: all }")),
        ..dark_ap(&eu_svc_url, &dead, Peering::Http1)
    })
    .await;
    let got = send(&client_from(TRUSTED), &mesh.eu, "POST", AP, &[]).await;
    assert_eq!(
        (got.status, got.body.as_str(), got.failover.as_deref()),
        (200, "eu-svc", Some("ap")),
        "{got:?}"
    );
    assert_eq!(eu_svc.count(), 1);
    let served = eu_svc.last();
    assert_eq!(
        (served.method.as_str(), &served.body[..]),
        ("POST", &b"w"[..])
    );
    assert_eq!(marked(&served), Some("ap"));
    assert_eq!(mesh.settle((2.0, 1.0)).await, (2.0, 1.0), "no loop");
}
