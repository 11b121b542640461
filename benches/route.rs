//! The router's own hot-path steps, without sockets: reading the id out of a request head and
//! resolving its region. Run with `cargo bench --bench route`.

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion};
use iuid::Iuid;
use iuid_router::config::RouteEntries;
use iuid_router::extract::graphql::plan::ParseLimits;
use iuid_router::proxy::route::{Extraction, Routes};
use iuid_router::scheme::iuid::IuidKey;
use iuid_router::scheme::Key;
use iuid_router::source::Source;
use iuid_router::table::load_source;

const TABLE: &str = "\
version: bench
regions:
  eu: { upstreams: [\"http://127.0.0.1:1\", \"http://127.0.0.1:2\"] }
  us: { upstreams: [\"http://127.0.0.1:3\"] }
  ap: { upstreams: [\"http://127.0.0.1:4\"] }
countries:
  1: ap
  2: us
  3: eu
  4: eu
services:
  1: AyanOrder
  2: WalletAccount
overrides:
  - { service: WalletAccount, region: eu }
  - { country: 1, created_before: \"2026-06-01T00:00:00Z\", region: eu }
default_region: eu
";

const LIMITS: ParseLimits = ParseLimits {
    tokens: 50_000,
    depth: 64,
};

const ROUTES: &str = "\
routes:
  - path: /v1/orders/{id}
  - path: /v1/orders/{id}/{*rest}
  - header: x-entity-id
";

fn bench(c: &mut Criterion) {
    let table = load_source(&Source {
        path: PathBuf::from("bench.yaml"),
        text: TABLE.into(),
    })
    .expect("table");
    let entries = RouteEntries::of(&Source {
        path: PathBuf::from("router.yaml"),
        text: ROUTES.into(),
    })
    .expect("routes: is a list");
    let routes = Routes::compile(&entries, LIMITS, "bench.yaml".as_ref()).expect("routes");

    let kz_migrated = Iuid::from_fields(1_700_000_000_000, 1, 1, 42);
    let us_order = Iuid::from_fields(1_800_000_000_000, 2, 1, 42);
    let text = us_order.to_string();
    let parts = http::Request::get(format!("/v1/orders/{text}/items?page=2"))
        .header("host", "api.example.com")
        .header("accept", "application/json")
        .body(())
        .expect("request")
        .into_parts()
        .0;

    c.bench_function("resolve/country", |b| {
        let id = Key::Iuid(IuidKey::Iuid(us_order));
        b.iter(|| table.resolve(black_box(&id)))
    });
    c.bench_function("resolve/timed_override", |b| {
        let id = Key::Iuid(IuidKey::Iuid(kz_migrated));
        b.iter(|| table.resolve(black_box(&id)))
    });
    c.bench_function("extract+resolve/path", |b| {
        b.iter(|| match routes.extract(black_box(&parts)) {
            Extraction::Id(token, _) => table
                .resolve_text(token.scheme, &token.text)
                .ok()
                .map(|(_, d)| d),
            _ => None,
        })
    });
}

/// Parse + resolve of one id of each scheme of docs/schemes.md (target: 60 ns each), on the
/// shipped routing table's schemes.
fn schemes(c: &mut Criterion) {
    use iuid_router::scheme::mint::{mint, MintSpec};
    let path = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/routing-table.yaml"));
    let table = iuid_router::table::load_file(&path).expect("shipped table");
    let cases = [
        (
            "iuid",
            MintSpec {
                country: 2,
                service: 1,
                ..MintSpec::default()
            },
        ),
        (
            "offers",
            MintSpec {
                shard_key: 142 << 22,
                ..MintSpec::default()
            },
        ),
        (
            "legacy_orders",
            MintSpec {
                shard: 5,
                ..MintSpec::default()
            },
        ),
        (
            "trips",
            MintSpec {
                key: "dashcam-7".into(),
                ..MintSpec::default()
            },
        ),
        (
            "posts",
            MintSpec {
                fields: vec![("shard".into(), 5000)],
                ..MintSpec::default()
            },
        ),
    ];
    // docs/schemes.md's fixed function alone: per region one xxHash64 and one ln (perf: they are
    // two thirds of it).
    let placer = iuid_router::scheme::hrw::Placer::new(&[("eu", 2.0), ("us", 1.0), ("ap", 1.0)]);
    c.bench_function("hrw/place_3_regions", |b| {
        b.iter(|| placer.place(black_box(b"dashcam-7")))
    });
    for (name, spec) in cases {
        let (_, kind) = table.scheme(name).expect("scheme");
        let id = mint(kind, &spec, 1).expect("mint").remove(0);
        c.bench_function(&format!("scheme/{name}"), |b| {
            b.iter(|| {
                table
                    .resolve_text(black_box(name), black_box(id.as_bytes()))
                    .map(|(_, d)| d)
            })
        });
    }
}

/// docs/data-path.md header rules on a typical browser-ish request and an upstream's response.
fn headers(c: &mut Criterion) {
    use http::header::{HeaderMap, HeaderValue};
    use iuid_router::proxy::headers::{self, ClientAddr, Forwarding, ViaValues};

    let mut request = HeaderMap::new();
    for (k, v) in [
        ("host", "api.example.com"),
        (
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0",
        ),
        ("accept", "application/json"),
        ("accept-encoding", "gzip, br"),
        ("accept-language", "en-GB,en;q=0.5"),
        ("authorization", "Bearer eyJhbGciOiJIUzI1NiJ9.e30.signature"),
        ("connection", "keep-alive"),
        ("x-request-id", "9f0c1e7a2b3d4c5e"),
    ] {
        request.insert(k, HeaderValue::from_static(v));
    }
    let mut response = HeaderMap::new();
    for (k, v) in [
        ("server", "nginx"),
        ("date", "Mon, 23 Nov 2026 10:00:00 GMT"),
        ("content-type", "application/json"),
        ("content-length", "512"),
        ("connection", "keep-alive"),
        ("cache-control", "no-store"),
    ] {
        response.insert(k, HeaderValue::from_static(v));
    }
    let client = ClientAddr::new("192.0.2.10:50000".parse().expect("addr"));
    let via = ViaValues::new("eu");
    let upstream: http::uri::Authority = "10.0.0.1:8080".parse().expect("authority");
    let host = HeaderValue::from_static("10.0.0.1:8080");

    c.bench_function("headers/rewrite_request+aim", |b| {
        b.iter_batched_ref(
            || {
                let mut parts = http::Request::get("/v1/orders/x?page=2")
                    .body(())
                    .expect("request")
                    .into_parts()
                    .0;
                parts.headers = request.clone();
                parts
            },
            |parts| {
                let original_host = parts.headers.get("host").cloned();
                headers::rewrite_request(
                    &mut parts.headers,
                    &Forwarding {
                        client: &client,
                        original_host: original_host.as_ref(),
                        via: via.for_version(http::Version::HTTP_11),
                        preserve_host: false,
                        underscores: iuid_router::config::UnderscoreFields::Drop,
                    },
                );
                headers::aim(parts, &upstream, &host, false);
            },
            criterion::BatchSize::SmallInput,
        )
    });
    c.bench_function("headers/rewrite_response", |b| {
        b.iter_batched_ref(
            || response.clone(),
            |h| headers::rewrite_response(http::StatusCode::OK, h, &via.http11),
            criterion::BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, bench, headers, schemes);
criterion_main!(benches, more);

/// matchit's lookup alone, for the same templates and path as `extract+resolve/path`: how
/// much of that is the path-template library.
fn matchit_only(c: &mut Criterion) {
    let mut tail = matchit::Router::new();
    tail.insert("/v1/orders/{id}", ()).expect("route");
    tail.insert("/v1/orders/{id}/{*rest}", ()).expect("route");
    let path = "/v1/orders/017f22e2-79b0-802a-8144-dc0c0c07398f/items";
    c.bench_function("matchit/tail", |b| {
        b.iter(|| {
            black_box(&tail)
                .at(black_box(path))
                .ok()
                .and_then(|m| m.params.get("id").map(|s| s.len()))
        })
    });
    let short = "/v1/orders/017f22e2-79b0-802a-8144-dc0c0c07398f";
    c.bench_function("matchit/short", |b| {
        b.iter(|| {
            black_box(&tail)
                .at(black_box(short))
                .ok()
                .and_then(|m| m.params.get("id").map(|s| s.len()))
        })
    });
}
criterion_group!(more, matchit_only);
