//! docs/schemes.md over real sockets: ids of every scheme reach the region the table says, through
//! path, header and GraphQL routes (numbers and strings); bad ids get 400 or 404
//! problem+json; a reload that changes a scheme's map moves routing, and one that removes a
//! scheme a route uses is refused.

mod common;

use common::{client, write, ConfigYaml, Router, Upstream};
use iuid_router::scheme::mint::{mint, MintSpec};
use iuid_router::scheme::snowflake::Layout;
use iuid_router::scheme::{hrw, Kind};

/// docs/schemes.md's schemes, with `offers`' map given (for the reload test), and one override.
fn table(
    eu: &Upstream,
    us: &Upstream,
    ap: &Upstream,
    offers_150: &str,
    with_trips: bool,
) -> String {
    let trips = if with_trips {
        "  trips:\n    kind: composite\n    separator: \":\"\n    hash: { weights: { eu: 2, us: 1, ap: 1 } }\n"
    } else {
        ""
    };
    format!(
        "version: schemes
regions:
  eu: {{ upstreams: [\"{}\"] }}
  us: {{ upstreams: [\"{}\"] }}
  ap: {{ upstreams: [\"{}\"] }}
countries:
  3: eu
schemes:
  offers:
    kind: guid_shard
    route_by: {{ field: shard_key, shift: 22, bits: 10 }}
    map: {{ \"150\": {offers_150}, \"19\": us, \"142\": ap }}
  legacy_orders:
    kind: uniqid_shard
    total_shards: 8
    map: {{ \"0-3\": eu, \"4-5\": us, \"6-7\": ap }}
{trips}  posts:
    kind: snowflake
    layout: instagram
    route_by: {{ field: shard }}
    map: {{ \"0-4095\": eu, \"4096-6143\": us, \"6144-8191\": ap }}
    default: eu
overrides:
  - {{ scheme: posts, shard: 17, region: ap }}
default_region: eu
",
        eu.url(),
        us.url(),
        ap.url()
    )
}

/// For each scheme a path route, a header route and a GraphQL route:
/// `/<s>/{id}`, `x-<s>-id`, `/graphql/<s>`.
fn config(with_trips: bool) -> String {
    let mut c = ConfigYaml::new();
    let mut schemes = vec![
        ("offers", "offers"),
        ("legacy", "legacy_orders"),
        ("posts", "posts"),
    ];
    if with_trips {
        schemes.push(("trips", "trips"));
    }
    for (short, scheme) in schemes {
        c = c
            .route(&format!(
                "{{ path: \"/{short}/{{id}}\", scheme: {scheme} }}"
            ))
            .route(&format!("{{ header: x-{short}-id, scheme: {scheme} }}"))
            // Snowflakes beyond 2^53 as JSON numbers: the route reads them exactly (its
            // default refuses them, tests/one_reading_bodies.rs).
            .route(&format!(
                "{{ graphql: /graphql/{short}, scheme: {scheme}, json_numbers: exact }}"
            ));
    }
    c.watch(false).yaml()
}

/// GraphQL `node(id: $id)` with `id` as given (a string, or a number).
fn node_query(id: serde_json::Value) -> serde_json::Value {
    serde_json::json!({ "query": "query($id: ID!) { node(id: $id) { id } }", "variables": { "id": id } })
}

fn one(kind: &Kind, spec: &MintSpec) -> String {
    mint(kind, spec, 1).expect("mint").remove(0)
}

fn offer(region_code: u32) -> String {
    let spec = MintSpec {
        shard_key: (region_code << 22) | 12345,
        ..MintSpec::default()
    };
    one(&Kind::GuidShard, &spec)
}

fn legacy(shard: u8) -> String {
    let spec = MintSpec {
        shard,
        ..MintSpec::default()
    };
    one(&Kind::UniqidShard { total_shards: 8 }, &spec)
}

fn post(shard: u64) -> String {
    let layout = Layout::preset("instagram").expect("preset");
    let spec = MintSpec {
        fields: vec![("shard".into(), shard)],
        ..MintSpec::default()
    };
    one(&Kind::Snowflake(layout), &spec)
}

/// The region that answered (the upstreams answer with their name).
async fn served_by(req: reqwest::RequestBuilder) -> (u16, String) {
    let resp = req.send().await.expect("answer");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

async fn three() -> (Upstream, Upstream, Upstream) {
    (
        Upstream::start("eu").await,
        Upstream::start("us").await,
        Upstream::start("ap").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_of_every_scheme_reach_their_region_by_path_header_and_graphql() {
    let (eu, us, ap) = three().await;
    let router = Router::start(&config(true), &table(&eu, &us, &ap, "eu", true)).await;
    let http = client();
    // Each id by its path route, its header route and its GraphQL route (as a string).
    let by_all_routes = |short: &'static str, id: String, want: &'static str| {
        let http = http.clone();
        let (path, header_url, gql) = (
            router.url(&format!("/{short}/{id}")),
            router.url("/any"),
            router.url(&format!("/graphql/{short}")),
        );
        async move {
            let got = served_by(http.get(&path)).await;
            assert_eq!(got, (200, want.into()), "{path}");
            let header = http.get(&header_url).header(format!("x-{short}-id"), &id);
            assert_eq!(served_by(header).await, (200, want.into()), "header {id}");
            let body = node_query(serde_json::Value::String(id.clone()));
            let got = served_by(http.post(&gql).json(&body)).await;
            assert_eq!(got, (200, want.into()), "graphql {id}");
        }
    };

    // guid_shard: the top 10 bits of the shard key are the UN M.49 region code.
    for (code, want) in [(150, "eu"), (19, "us"), (142, "ap")] {
        by_all_routes("offers", offer(code), want).await;
    }
    // uniqid_shard: ranges of the shard digit.
    for (shard, want) in [
        (0, "eu"),
        (3, "eu"),
        (4, "us"),
        (5, "us"),
        (6, "ap"),
        (7, "ap"),
    ] {
        by_all_routes("legacy", legacy(shard), want).await;
    }
    // composite: rendezvous hashing of the key, as docs/schemes.md's function places it.
    let weights = [("eu", 2.0), ("us", 1.0), ("ap", 1.0)];
    let mut seen = std::collections::BTreeSet::new();
    for device in 0..12 {
        let key = format!("device-{device}");
        let want = weights[hrw::place(&weights, key.as_bytes()).expect("a region")].0;
        by_all_routes("trips", format!("{key}:1764000000000"), want).await;
        seen.insert(want);
    }
    assert!(seen.len() >= 2, "keys spread over regions: {seen:?}");
    // snowflake: the shard field, an override for shard 17, a default past the map.
    for (shard, want) in [(5, "eu"), (17, "ap"), (5000, "us"), (7000, "ap")] {
        by_all_routes("posts", post(shard), want).await;
    }
    // GraphQL: a snowflake as a JSON number and as a string, in variables, in a literal, in
    // a list, and in a persisted query sent by hash only.
    let id = post(5000);
    let number: u64 = id.parse().expect("decimal");
    for body in [
        node_query(serde_json::json!(number)),
        node_query(serde_json::json!(id)),
        serde_json::json!({ "query": format!("{{ node(id: \"{id}\") {{ id }} }}") }),
        serde_json::json!({ "query": "query($ids: [ID!]!) { nodes(ids: $ids) { id } }", "variables": { "ids": [number, post(6000)] } }),
        serde_json::json!({ "variables": { "id": number }, "extensions": { "persistedQuery": { "version": 1, "sha256Hash": "ab" } } }),
    ] {
        let req = http.post(router.url("/graphql/posts")).json(&body);
        assert_eq!(served_by(req).await, (200, "us".into()), "{body}");
    }
    // The decision counter is labelled by scheme.
    let metrics = router.metrics().await;
    for want in [
        "scheme=\"offers\"",
        "scheme=\"trips\"",
        "rule=\"hash\"",
        "rule=\"map\"",
    ] {
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("iuid_router_routing_decisions_total") && l.contains(want)),
            "{want} not counted"
        );
    }
}

#[tokio::test]
async fn bad_ids_are_400_and_ids_no_region_covers_are_404() {
    let (eu, us, ap) = three().await;
    let router = Router::start(&config(true), &table(&eu, &us, &ap, "eu", true)).await;
    let wrong_digit = {
        let good = legacy(2);
        format!("5{}", &good[1..])
    };
    for (path, status, urn) in [
        ("/offers/not-a-guid".to_owned(), 400, "malformed-id"),
        (
            format!("/offers/urn:uuid:{}", offer(150)),
            400,
            "malformed-id",
        ),
        (format!("/legacy/{wrong_digit}"), 400, "malformed-id"),
        // An encoded slash: upstreams read it apart (docs/data-path.md "Paths").
        ("/trips/a%2Fb:17".to_owned(), 400, "ambiguous-path"),
        ("/trips/no-time".to_owned(), 400, "malformed-id"),
        ("/posts/9223372036854775808".to_owned(), 400, "malformed-id"),
        ("/posts/12ab".to_owned(), 400, "malformed-id"),
        (format!("/offers/{}", offer(2)), 404, "unmapped-value"),
    ] {
        let resp = client()
            .get(router.url(&path))
            .send()
            .await
            .expect("answer");
        assert_eq!(resp.status().as_u16(), status, "{path}");
        assert_eq!(resp.headers()["content-type"], "application/problem+json");
        let problem: serde_json::Value = resp.json().await.expect("json");
        assert_eq!(
            problem["type"],
            format!("urn:iuid-router:problem:{urn}"),
            "{path}"
        );
    }
    // Snowflakes of different regions in one GraphQL request: 400 naming both.
    let body = serde_json::json!({ "query": "query($ids: [ID!]!) { nodes(ids: $ids) { id } }", "variables": { "ids": [post(5), post(5000)] } });
    let resp = client()
        .post(router.url("/graphql/posts"))
        .json(&body)
        .send()
        .await
        .expect("answer");
    assert_eq!(resp.status(), 400);
    let problem: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(problem["regions"], serde_json::json!(["eu", "us"]));
    assert_eq!(eu.count() + us.count() + ap.count(), 0, "nothing forwarded");
}

#[tokio::test]
async fn a_reload_that_changes_a_map_moves_routing_and_one_that_drops_a_used_scheme_is_refused() {
    let (eu, us, ap) = three().await;
    let router = Router::start(&config(true), &table(&eu, &us, &ap, "eu", true)).await;
    let path = format!("/offers/{}", offer(150));
    let http = client();
    assert_eq!(
        served_by(http.get(router.url(&path))).await,
        (200, "eu".into())
    );

    write(
        &router.dir,
        "routing-table.yaml",
        &table(&eu, &us, &ap, "us", true),
    );
    let resp = http
        .post(router.admin_url("/admin/reload"))
        .send()
        .await
        .expect("reload");
    assert_eq!(resp.status(), 200);
    assert_eq!(
        served_by(http.get(router.url(&path))).await,
        (200, "us".into())
    );

    // `trips` is used by a route: a table without it is refused, and the last one serves.
    write(
        &router.dir,
        "routing-table.yaml",
        &table(&eu, &us, &ap, "ap", false),
    );
    let resp = http
        .post(router.admin_url("/admin/reload"))
        .send()
        .await
        .expect("reload");
    assert_eq!(resp.status(), 422);
    let problem: serde_json::Value = resp.json().await.expect("json");
    let errors = problem["errors"].to_string();
    assert!(
        errors.contains("scheme `trips` is not declared"),
        "{errors}"
    );
    assert!(
        errors.contains("router.yaml:"),
        "the error points at the route: {errors}"
    );
    assert_eq!(
        served_by(http.get(router.url(&path))).await,
        (200, "us".into())
    );
    let trip = served_by(http.get(router.url("/trips/device-1:1764000000000"))).await;
    assert_eq!(trip.0, 200);
}

#[tokio::test]
async fn admin_resolve_takes_a_scheme() {
    let (eu, us, ap) = three().await;
    let router = Router::start(&config(true), &table(&eu, &us, &ap, "eu", true)).await;
    let url = router.admin_url(&format!("/admin/resolve/{}?scheme=posts", post(5000)));
    let v: serde_json::Value = reqwest::get(url)
        .await
        .expect("resolve")
        .json()
        .await
        .expect("json");
    assert_eq!(v["region"], "us");
    assert_eq!(v["scheme"], "posts");
    assert_eq!(v["shard"], 5000);
    assert_eq!(v["rule"]["kind"], "map");
    assert!(v["created_at"].as_str().expect("created_at").ends_with('Z'));
    let resp = reqwest::get(router.admin_url("/admin/resolve/1?scheme=nope"))
        .await
        .expect("resolve");
    assert_eq!(resp.status(), 404);
}
