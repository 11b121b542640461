//! `iuid-router demo`: three regional echo clusters and the router in one process (SPEC §3).
//!
//! The echo servers bind ephemeral loopback ports, and the embedded routing table is written
//! with those ports, so the demo never collides with what else runs on the machine; only the
//! router's own addresses (default `127.0.0.1:8080`, admin `127.0.0.1:9901`) are fixed, so
//! the printed `curl` lines work.
//!
//! The router is started as `serve` starts it ([`crate::app::App`]), from a config and table
//! written to a temporary directory: the demo has the admin API, and editing the printed
//! table file, `kill -HUP` or `POST /admin/reload` reload it.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::Request;
use iuid::{Generator, Iuid};
use tokio::net::TcpListener;

use crate::app::App;
use crate::config::RouterConfig;
use crate::scheme::hrw;
use crate::scheme::mint::{mint, MintSpec};
use crate::table::RoutingTable;

/// The demo's router config; `{listen}` and `{admin}` are filled in.
const CONFIG: &str = "\
listen: {listen}
admin_listen: {admin}
region: eu
routing_table: routing-table.yaml
routes:
  - path: /v1/orders/{id}
  - path: /v1/orders/{id}/{*rest}
  - header: x-entity-id
  - graphql: /graphql
  - { path: \"/v1/offers/{id}\", scheme: offers }
  - { path: \"/v1/legacy-orders/{id}\", scheme: legacy_orders }
  - { path: \"/v1/trips/{id}\", scheme: trips }
  - { path: \"/v1/posts/{id}\", scheme: posts }
  - { graphql: /graphql/posts, scheme: posts }
unrouted: default_region
";

/// The demo's routing table; `{eu}`, `{us}`, `{ap}` are filled in with the echo addresses.
const TABLE: &str = "\
version: demo
regions:
  eu: { upstreams: [\"http://{eu}\"] }
  us: { upstreams: [\"http://{us}\"] }
  ap: { upstreams: [\"http://{ap}\"] }
countries:
  1: { code: KZ, region: ap }
  2: { code: US, region: us }
  3: { code: DE, region: eu }
  4: { code: JP, region: ap }
services:
  1: AyanOrder
  2: WalletAccount
schemes:
  offers: { kind: guid_shard, route_by: { field: shard_key, shift: 22, bits: 10 }, map: { \"150\": eu, \"19\": us, \"142\": ap } }
  legacy_orders: { kind: uniqid_shard, total_shards: 8, map: { \"0-3\": eu, \"4-5\": us, \"6-7\": ap } }
  trips: { kind: composite, separator: \":\", hash: { weights: { eu: 2, us: 1, ap: 1 } } }
  posts: { kind: snowflake, layout: instagram, route_by: { field: shard }, map: { \"0-4095\": eu, \"4096-6143\": us, \"6144-8191\": ap }, default: eu }
overrides:
  - { service: WalletAccount, region: eu }
default_region: eu
";

/// An echo server for one region: answers every request with the region's name and what it
/// received (request line, headers, body length), as plain text.
pub async fn echo_server(region: &str, listener: TcpListener) -> std::io::Result<()> {
    let region: Arc<str> = region.into();
    let app = axum::Router::new().fallback(move |req: Request| echo(region.clone(), req));
    axum::serve(listener, app).await
}

async fn echo(region: Arc<str>, req: Request) -> String {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, 16 << 20).await;
    let mut out = String::new();
    let _ = writeln!(out, "region: {region}");
    let _ = writeln!(out, "{} {} {:?}", parts.method, parts.uri, parts.version);
    for (name, value) in &parts.headers {
        let _ = writeln!(out, "{name}: {}", String::from_utf8_lossy(value.as_bytes()));
    }
    match body {
        Ok(b) => {
            let _ = writeln!(out, "body: {} bytes", b.len());
        }
        Err(e) => {
            let _ = writeln!(out, "body: unreadable ({e})");
        }
    }
    out
}

/// Runs the demo until Ctrl-C or `SIGTERM`: echo regions, the router on `listen` with its
/// admin API on `admin`, and a printed tour of ids and `curl` lines.
///
/// Errors: a port cannot be bound, or the temporary directory cannot be written.
pub async fn run(listen: SocketAddr, admin: SocketAddr) -> Result<(), Box<dyn std::error::Error>> {
    let mut addrs = Vec::new();
    for region in ["eu", "us", "ap"] {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        addrs.push(listener.local_addr()?);
        tokio::spawn(async move {
            if let Err(e) = echo_server(region, listener).await {
                tracing::error!(region, error = %e, "echo server stopped");
            }
        });
    }
    let table_text = TABLE
        .replace("{eu}", &addrs[0].to_string())
        .replace("{us}", &addrs[1].to_string())
        .replace("{ap}", &addrs[2].to_string());
    let dir = DemoDir::create()?;
    std::fs::write(dir.0.join("routing-table.yaml"), table_text)?;
    let config_path = dir.0.join("router.yaml");
    let config_text = CONFIG
        .replace("{listen}", &listen.to_string())
        .replace("{admin}", &admin.to_string());
    std::fs::write(&config_path, config_text)?;
    let config = RouterConfig::load(&config_path)?;

    let listener = crate::server::bind(listen, config.limits.listen_backlog).await?;
    let admin_listener = crate::server::bind(admin, crate::config::DEFAULT_BACKLOG).await?;
    let local = listener.local_addr()?;
    let admin_local = admin_listener.local_addr()?;
    let app = App::new(config)?;
    let table = app.table().current();
    println!(
        "{}",
        tour(
            local,
            admin_local,
            &addrs,
            &table,
            &dir.0.join("routing-table.yaml")
        )
    );
    app.run(listener, Some(admin_listener), crate::app::terminate())
        .await?;
    Ok(())
}

/// The demo's files, removed when the demo stops.
struct DemoDir(PathBuf);

impl DemoDir {
    fn create() -> std::io::Result<DemoDir> {
        let dir = std::env::temp_dir().join(format!("iuid-router-demo-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(DemoDir(dir))
    }
}

impl Drop for DemoDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The text printed at start: where things run, then ids with the `curl` lines that reach
/// each region. Each `curl` line follows a comment `# → <region or status>: <what>`.
fn tour(
    router: SocketAddr,
    admin: SocketAddr,
    echo: &[SocketAddr],
    table: &RoutingTable,
    table_path: &std::path::Path,
) -> String {
    let base = format!("http://{router}");
    let admin_base = format!("http://{admin}");
    let order = |country: u8| Generator::new(country, 1).mint();
    let wallet_us = Generator::new(2, 2).mint();
    let unknown = Generator::new(99, 1).mint();
    let mut out = String::new();
    let _ = writeln!(out, "iuid-router demo: router on {base}");
    for (name, addr) in ["eu", "us", "ap"].iter().zip(echo) {
        let _ = writeln!(out, "  region {name}: echo cluster on http://{addr}");
    }
    let _ = writeln!(
        out,
        "  routing table: {} regions, {} countries, {} overrides ({}: edit it and the router \
         reloads)\n  admin API on {admin_base}\n",
        table.regions.len(),
        table.country_count(),
        table.overrides.len(),
        table_path.display()
    );
    let mut line = |to: &str, what: &str, curl: String| {
        let _ = writeln!(out, "# → {to}: {what}\n{curl}\n");
    };
    let path = |id: &Iuid| format!("curl -s {base}/v1/orders/{id}");
    line(
        "ap",
        "an AyanOrder minted in KZ (country 1)",
        path(&order(1)),
    );
    line(
        "us",
        "an AyanOrder minted in the US (country 2)",
        path(&order(2)),
    );
    line(
        "eu",
        "an AyanOrder minted in DE (country 3), with a sub-path and query",
        format!("curl -s '{base}/v1/orders/{}/items?page=2'", order(3)),
    );
    line(
        "eu",
        "a WalletAccount minted in the US: the override homes wallets in eu",
        format!("curl -s -H 'x-entity-id: {wallet_us}' {base}/v1/wallets/balance"),
    );
    line(
        "us",
        "GraphQL: node(id:) of an order minted in the US",
        format!(
            "curl -s {base}/graphql -H 'content-type: application/json' \
             -d '{{\"query\":\"{{ node(id: \\\"{}\\\") {{ id }} }}\"}}'",
            order(2)
        ),
    );
    line(
        "eu",
        "a UUIDv4 has no routing bits: default_region",
        format!("curl -s {base}/v1/orders/9b2c4f7e-1d3a-4c5b-8e6f-0a1b2c3d4e5f"),
    );
    line(
        "404",
        "country 99 is owned by no region (problem+json)",
        path(&unknown),
    );
    line(
        "400",
        "a malformed id (problem+json)",
        format!("curl -s {base}/v1/orders/017f22e2-79b0-802a-8144-dc0c0c07398"),
    );
    // Ids of the other schemes (SPEC §10), minted for the demo table's schemes.
    let minted = |name: &str, spec: MintSpec| {
        table
            .scheme(name)
            .and_then(|(_, kind)| mint(kind, &spec, 1).ok())
            .and_then(|mut ids| ids.pop())
            .unwrap_or_default()
    };
    let offer = minted(
        "offers",
        MintSpec {
            shard_key: 142 << 22,
            ..MintSpec::default()
        },
    );
    line(
        "ap",
        "a HotGuid offer: its shard key's top 10 bits are UN M.49 region 142 (Asia)",
        format!("curl -s {base}/v1/offers/{offer}"),
    );
    let legacy = minted(
        "legacy_orders",
        MintSpec {
            shard: 5,
            ..MintSpec::default()
        },
    );
    line(
        "us",
        "a PHP uniqid with shard digit 5 (shards 4-5 live in us)",
        format!("curl -s {base}/v1/legacy-orders/{legacy}"),
    );
    let weights = [("eu", 2.0), ("us", 1.0), ("ap", 1.0)];
    let trip_region = hrw::place(&weights, b"dashcam-7").map_or("eu", |i| weights[i].0);
    line(
        trip_region,
        "a <device id>:<t*> trip id, its device placed by rendezvous hashing",
        format!("curl -s {base}/v1/trips/dashcam-7:1764000000000"),
    );
    let post = |shard: u64| {
        minted(
            "posts",
            MintSpec {
                fields: vec![("shard".into(), shard)],
                ..MintSpec::default()
            },
        )
    };
    line(
        "us",
        "an Instagram snowflake of shard 5000",
        format!("curl -s {base}/v1/posts/{}", post(5000)),
    );
    line(
        "ap",
        "GraphQL: a snowflake of shard 7000 as a JSON number",
        format!(
            "curl -s {base}/graphql/posts -H 'content-type: application/json' \
             -d '{{\"query\":\"query($id: ID!) {{ node(id: $id) {{ id }} }}\",\"variables\":{{\"id\":{}}}}}'",
            post(7000)
        ),
    );
    let kz = order(1);
    line(
        "200",
        "the admin API: where an id goes, and why",
        format!("curl -s {admin_base}/admin/resolve/{kz}"),
    );
    line(
        "200",
        "the admin API: the serving table's version, source and last reload",
        format!("curl -s {admin_base}/admin/routing-table"),
    );
    let _ = write!(
        out,
        "Decode any id with: cargo run --release -- decode {}\nPress Ctrl-C to stop.",
        order(1)
    );
    out
}
