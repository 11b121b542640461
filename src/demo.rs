//! `iuid-router demo`: three regional echo clusters and the router in one process (docs/cli.md).
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
mod bad_day;

const CONFIG: &str = include_str!("demo/router.yaml");

/// The demo's routing table; `{eu}`, `{us}`, `{ap}` are filled in with the echo addresses,
/// `{sa}` with a port nothing listens on.
const TABLE: &str = include_str!("demo/routing-table.yaml");

/// Orders created before the iUID (UUIDv4 ids, no routing bits) and the region holding each:
/// the demo's echo regions answer 404 for one they do not hold (docs/fanout.md `legacy: probe`).
const LEGACY_ORDERS: [(&str, &str); 2] = [
    ("9b2c4f7e-1d3a-4c5b-8e6f-0a1b2c3d4e5f", "eu"),
    ("5f0e8d1c-2b3a-4c9d-8e7f-6a5b4c3d2e1f", "ap"),
];

/// The demo's order history: six orders per region, minted in the region's country an hour
/// apart, the newest at a fixed instant so that the printed cursors stay valid.
pub fn history(region: &str) -> Vec<Iuid> {
    let (country, offset) = match region {
        "ap" => (1, 0),
        "us" => (2, 1),
        _ => (3, 2),
    };
    (0..6u64)
        .map(|k| {
            let ms = HISTORY_NEWEST_MS - (k * 3 + offset) * 1_200_000;
            Iuid::from_fields(ms, country, 1, 0x5eed + k)
        })
        .collect()
}

/// When the newest order of the demo history was created (2026-11-23T12:00:00Z).
const HISTORY_NEWEST_MS: u64 = 1_795_435_200_000;

/// An echo server for one region: answers every request with the region's name and what it
/// received (request line, headers, body length), as plain text. `GET /v1/orders` lists the
/// region's [`history`] as a fan-out region must (docs/fanout.md: `before`/`after`, `limit`);
/// GraphQL `nodes(ids: $ids)` is answered as GraphQL; a legacy order it does not hold is 404.
pub async fn echo_server(region: &str, listener: TcpListener) -> std::io::Result<()> {
    let region: Arc<str> = region.into();
    let app = axum::Router::new().fallback(move |req: Request| echo(region.clone(), req));
    axum::serve(listener, app).await
}

async fn echo(region: Arc<str>, req: Request) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (parts, body) = req.into_parts();
    if let Some(answer) = bad_day::misdirected(&region, parts.uri.path()) {
        return answer;
    }
    if parts.uri.path() == "/v1/orders" {
        return axum::Json(list(&region, parts.uri.query().unwrap_or(""))).into_response();
    }
    if let Some(id) = parts.uri.path().strip_prefix("/v1/orders/") {
        let legacy = iuid::Uuid::parse(id.as_bytes()).is_ok_and(|u| u.version() != 8);
        let held = LEGACY_ORDERS
            .iter()
            .any(|(o, r)| o.eq_ignore_ascii_case(id) && **r == *region);
        if legacy && !held {
            let text = format!("region: {region}\nno such order here\n");
            return (http::StatusCode::NOT_FOUND, text).into_response();
        }
    }
    let body = axum::body::to_bytes(body, 16 << 20).await;
    if let Some(answer) = body.as_ref().ok().and_then(|b| nodes(&region, b)) {
        return axum::Json(answer).into_response();
    }
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
    out.into_response()
}

/// The region's page of [`history`] for a fan-out: newest first, before the cursor.
fn list(region: &str, query: &str) -> serde_json::Value {
    let mut limit = 5usize;
    let mut before: Option<(u64, String)> = None;
    for (k, v) in form_urlencoded::parse(query.as_bytes()) {
        match &*k {
            "limit" => limit = v.parse().unwrap_or(5),
            "before" => {
                before = v
                    .parse::<Iuid>()
                    .ok()
                    .map(|id| (id.unix_ts_ms(), id.to_string()))
            }
            _ => {}
        }
    }
    let items: Vec<serde_json::Value> = history(region)
        .into_iter()
        .filter(|id| {
            before
                .as_ref()
                .is_none_or(|b| (id.unix_ts_ms(), id.to_string()) < *b)
        })
        .take(limit)
        .map(|id| serde_json::json!({ "id": id.to_string(), "region": region, "total": "12.50" }))
        .collect();
    serde_json::json!({ "items": items })
}

/// A GraphQL answer for a body whose `variables.ids` is a list: each id as a node of this
/// region.
fn nodes(region: &str, body: &[u8]) -> Option<serde_json::Value> {
    let op: serde_json::Value = serde_json::from_slice(body).ok()?;
    let ids = op.pointer("/variables/ids")?.as_array()?;
    let nodes: Vec<serde_json::Value> = ids
        .iter()
        .map(|id| serde_json::json!({ "id": id, "region": region }))
        .collect();
    Some(serde_json::json!({ "data": { "nodes": nodes } }))
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
    // The dark region's upstream: a port bound and let go, so connecting to it is refused.
    let dark = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
    let table_text = TABLE
        .replace("{sa}", &dark.to_string())
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
    // As `serve` does: the descriptor reserve and the memory guard (docs/overload.md).
    crate::nofile::raise_to_hard();
    crate::overload::start(config.overload.max_memory_mb);

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
        "ap",
        "GraphQL: a mutation, Relay's cancelOrder(input: {id: $id}), of an order minted in KZ",
        format!(
            "curl -s {base}/graphql -H 'content-type: application/json' \
             -d '{{\"query\":\"mutation Cancel($id: ID!) {{ cancelOrder(input: {{id: $id}}) \
             {{ order {{ id }} }} }}\",\"variables\":{{\"id\":\"{}\"}}}}'",
            order(1)
        ),
    );
    line(
        "us",
        "a search by the order it belongs to: the id in a query parameter (a `query:` route)",
        format!(
            "curl -s '{base}/v1/rides?status=open&order_id={}'",
            order(2)
        ),
    );
    line(
        "us",
        "the same search spelled another way (`%69` is `i`, `//` one slash): routes and rate \
         limits match the normalised path, as the region's framework will",
        format!(
            "curl -s '{base}/v1//r%69des?status=open&order_id={}'",
            order(2)
        ),
    );
    line(
        "400",
        "a path frameworks read two ways (an encoded slash: a separator to one, a byte to \
         another) is refused, not routed (problem+json, ambiguous-path)",
        format!("curl -s '{base}/v1/orders/a%2Fb'"),
    );
    line(
        "400",
        "a parameter read apart at `;` and at `&` is refused (problem+json, invalid-parameter)",
        format!(
            "curl -s '{base}/v1/rides?x=1;order_id={}&order_id={}'",
            order(2),
            order(1)
        ),
    );
    line(
        "ap",
        "a payment for an order minted in KZ: the id in the JSON body (a `json:` route)",
        format!(
            "curl -s {base}/v1/payments -H 'content-type: application/json' \
             -d '{{\"amount\": \"12.50\", \"order_id\": \"{}\"}}'",
            order(1)
        ),
    );
    line(
        "400",
        "a JSON body that names the id twice: Python, JavaScript and Go read the last, so it \
         is refused, not routed by either (problem+json, ambiguous-json)",
        format!(
            "curl -s {base}/v1/payments -H 'content-type: application/json' \
             -d '{{\"order_id\": \"{}\", \"order_id\": \"{}\"}}'",
            order(1),
            order(2)
        ),
    );
    line(
        "us",
        "a field spelled with _ where the router's own has - (Rack, WSGI and PHP read them as \
         one): removed, so the region's echo shows no X-Iuid_Region",
        format!(
            "curl -s -H 'X-Iuid_Region: ap' '{base}/v1/rides?order_id={}'",
            order(2)
        ),
    );
    line(
        "us",
        "a client that waits for 100 Continue before its body (curl asks for it past 1 KiB): \
         the router answers it, then the region answers the POST",
        format!(
            "curl -s {base}/v1/orders/{} -H 'Expect: 100-continue' -d 'note=hello'",
            order(2)
        ),
    );
    line(
        "eu",
        "a UUIDv4 has no routing bits: default_region",
        format!("curl -s {base}/v1/orders/{}", LEGACY_ORDERS[0].0),
    );
    line(
        "ap",
        "an order from before the iUID that lives in ap: eu says 404, every region is asked \
         (legacy: probe) and ap remembered for the next request",
        format!("curl -s {base}/v1/orders/{}", LEGACY_ORDERS[1].0),
    );
    // The global history: every region's orders merged newest first, four a page.
    let mut all: Vec<Iuid> = ["eu", "us", "ap"].iter().flat_map(|r| history(r)).collect();
    all.sort_by_key(|id| std::cmp::Reverse((id.unix_ts_ms(), id.to_string())));
    line(
        "all",
        "fan-out: the global order history, newest first, from every region in one page",
        format!("curl -s '{base}/v1/orders?limit=4'"),
    );
    line(
        "all",
        "fan-out: the next page, `before` the last id of the first (one cursor for every region)",
        format!("curl -s '{base}/v1/orders?limit=4&before={}'", all[3]),
    );
    line(
        "all",
        "GraphQL nodes(ids:) of orders in three regions: split by region, merged in request order",
        format!(
            "curl -s {base}/graphql -H 'content-type: application/json' \
             -d '{{\"query\":\"query($ids: [ID!]!) {{ nodes(ids: $ids) {{ id }} }}\",\"variables\":{{\"ids\":[\"{}\",\"{}\",\"{}\"]}}}}'",
            order(1),
            order(3),
            order(2)
        ),
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
    // Ids of the other schemes (docs/schemes.md), minted for the demo table's schemes.
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
        "GraphQL: a snowflake of shard 7000 as a JSON number (beyond 2^53: the route says \
         `json_numbers: exact`, as its servers read 64-bit integers exactly)",
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
    line(
        "200",
        "the admin API: every upstream's health (healthy, ejected until, probing, in flight)",
        format!("curl -s {admin_base}/admin/upstreams"),
    );
    line(
        "200",
        "the admin API: one id read in every scheme of the table, with its owner or why not",
        format!("curl -s {admin_base}/admin/decode/{}", post(5000)),
    );
    line(
        "200",
        "the admin API: the table at a glance (regions, countries, services, schemes, overrides)",
        format!("curl -s {admin_base}/admin/routing-table/summary"),
    );
    line(
        "200",
        "the admin API: requests and 5xx per region over the last minute",
        format!("curl -s {admin_base}/admin/rates"),
    );
    // A move between regions (docs/moves.md): JP's orders, from ap to us, in `mirror`.
    let jp = order(4);
    line(
        "ap",
        &format!(
            "moves (docs/moves.md): an AyanOrder minted in JP (country 4), a group moving from \
             ap to us (move jp-orders-to-us, phase mirror): ap answers, a copy goes to us with \
             X-Iuid-Mirror: 1 and the two status classes are compared; X-Iuid-Region and \
             X-Iuid-Move tell ap why (decision_headers: true)\n#   walk the move by editing \
             {} (the router reloads on save): phase: fence (writes held up to hold_ms), then \
             phase: flip (all to us), then replace the move by the override \
             {{ country: 4, service: AyanOrder, region: us }}",
            table_path.display()
        ),
        path(&jp),
    );
    line(
        "ap",
        "a write of the moving group in mirror: to ap only, never copied",
        format!("curl -s {base}/v1/orders/{jp} -d 'note=hello'"),
    );
    line(
        "200",
        "the admin API: each move, its phase and since when, writes held, mirror outcomes \
         (the console's Moves panel)",
        format!("curl -s {admin_base}/admin/moves"),
    );
    line(
        "eu",
        "rate limits (docs/rate-limits.md): an API key's first request of the minute          (rate_limits: x-api-key at 1/min)",
        format!("curl -s -H 'x-api-key: demo-key' {base}/v1/orders/{}", order(3)),
    );
    line(
        "429",
        "the same key again within the minute: 429 rate-limited with Retry-After,          RateLimit-Policy and RateLimit; nothing forwarded",
        format!("curl -si -H 'x-api-key: demo-key' {base}/v1/orders/{}", order(3)),
    );
    line(
        "200",
        "the admin API: each rate limit, its keys, refusals and the keys refused most",
        format!("curl -s {admin_base}/admin/rate-limits"),
    );
    line(
        "200",
        "Prometheus metrics; a region never holds more than its limit of requests of this \
         edge, here adaptive (limits.adaptive: iuid_router_region_limit follows its latency, \
         up to 1,024), the rest answered 503 region-overloaded at once and counted in \
         iuid_router_shed_total; above overload.max_memory_mb (4,096 here) new requests are \
         shed too (iuid_router_overloaded; docs/overload.md)",
        format!("curl -s {admin_base}/metrics"),
    );
    bad_day::tour(&mut line, &base, &admin_base);
    line(
        "200",
        "the support console: open this in a browser, paste any id",
        format!("curl -s {admin_base}/"),
    );
    line(
        "200",
        "gRPC: the router's own refusal (a malformed id in x-entity-id metadata) is a gRPC \
         status, grpc-status: 3, trailers-only",
        format!(
            "curl -si --http2-prior-knowledge {base}/orders.v1.Orders/GetOrder \
             -H 'content-type: application/grpc' -H 'x-entity-id: not-an-id' -d ''"
        ),
    );
    let _ = write!(
        out,
        "Decode any id with: iuid-router decode {} (from the source tree: cargo run \
         --release -- decode …)\nPress Ctrl-C to stop.",
        order(1)
    );
    out
}
