//! GraphQL id extraction per request (issue: ≤ 5 µs on a plan-cache hit for a 2 KiB query).
//! `cargo bench --bench graphql`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use iuid_router::extract::graphql::plan::ParseLimits;
use iuid_router::extract::graphql::{ColdParse, GraphqlRoute};
use serde_json::json;

const LIMITS: ParseLimits = ParseLimits {
    tokens: 50_000,
    depth: 64,
};

/// A typical client query, about 2 KiB: a node lookup by variable with fragments.
fn typical_query() -> String {
    let mut q = String::from(
        "query OrderDetails($id: ID!, $first: Int = 10, $after: String) {\n  order: node(id: $id) {\n    id\n    __typename\n    ... on AyanOrder {\n      ...OrderHeader\n      items(first: $first, after: $after) {\n        edges { cursor node { ...LineItem } }\n        pageInfo { hasNextPage endCursor }\n      }\n      customer { id name email phone address { line1 line2 city postalCode country } }\n    }\n  }\n}\n",
    );
    q.push_str("fragment OrderHeader on AyanOrder {\n  number status createdAt updatedAt currency\n  total { amount currency } subtotal { amount currency } tax { amount currency }\n  shipping { method carrier trackingNumber estimatedDelivery }\n}\n");
    q.push_str("fragment LineItem on LineItem {\n  id sku title quantity\n  price { amount currency } discount { amount currency reason }\n  product { id name brand category images(first: 3) { url width height alt } }\n}\n");
    while q.len() < 2000 {
        q.push_str("# padding comment to reach a realistic document size\n");
    }
    q
}

fn body(query: &str, operation_name: Option<&str>) -> Vec<u8> {
    json!({
        "query": query,
        "operationName": operation_name,
        "variables": { "id": "017f22e2-79b0-8003-8044-dc0c0c07398f", "first": 20 },
    })
    .to_string()
    .into_bytes()
}

/// A 64 KiB document: many aliased node lookups with literal ids.
fn large_query() -> String {
    let mut q = String::from("query Many {\n");
    let mut i = 0;
    while q.len() < 64 << 10 {
        q.push_str(&format!(
            "  n{i}: node(id: \"017f22e2-79b0-8003-8044-dc0c0c07{i:04x}\") {{ id __typename }}\n"
        ));
        i += 1;
    }
    q.push('}');
    q
}

fn bench(c: &mut Criterion) {
    let typical = body(&typical_query(), Some("OrderDetails"));
    println!("typical body: {} bytes", typical.len());
    let warm = GraphqlRoute::new("/graphql".into(), Vec::new(), LIMITS);
    let mut ids = Vec::with_capacity(8);
    warm.ids_from_body(None, &typical, ColdParse::Here, &mut ids)
        .expect("ids");
    assert_eq!(ids.len(), 1);

    c.bench_function("graphql/2KiB/cache_hit", |b| {
        b.iter(|| {
            ids.clear();
            warm.ids_from_body(None, black_box(&typical), ColdParse::Here, &mut ids)
        })
    });
    c.bench_function("graphql/2KiB/cold", |b| {
        b.iter_batched(
            || GraphqlRoute::new("/graphql".into(), Vec::new(), LIMITS),
            |route| {
                let mut ids = Vec::new();
                route
                    .ids_from_body(None, black_box(&typical), ColdParse::Here, &mut ids)
                    .map(|()| ids)
            },
            BatchSize::SmallInput,
        )
    });

    let large = body(&large_query(), Some("Many"));
    println!("large body: {} bytes", large.len());
    let warm_large = GraphqlRoute::new("/graphql".into(), Vec::new(), LIMITS);
    let mut large_ids = Vec::new();
    warm_large
        .ids_from_body(None, &large, ColdParse::Here, &mut large_ids)
        .expect("ids");
    c.bench_function("graphql/64KiB/cache_hit", |b| {
        b.iter(|| {
            large_ids.clear();
            warm_large.ids_from_body(None, black_box(&large), ColdParse::Here, &mut large_ids)
        })
    });
    c.bench_function("graphql/64KiB/cold", |b| {
        b.iter_batched(
            || GraphqlRoute::new("/graphql".into(), Vec::new(), LIMITS),
            |route| {
                let mut ids = Vec::new();
                route
                    .ids_from_body(None, black_box(&large), ColdParse::Here, &mut ids)
                    .map(|()| ids)
            },
            BatchSize::SmallInput,
        )
    });

    // The worst a cold request can cost before the limits stop it: 1 MiB of aliases.
    let mut aliases = String::from("{ ");
    let mut i = 0;
    while aliases.len() < 1 << 20 {
        aliases.push_str(&format!("a{i}: node(id: \"{i}\") {{ id }} "));
        i += 1;
    }
    aliases.push('}');
    let pathological = body(&aliases, None);
    c.bench_function("graphql/1MiB_aliases/refused", |b| {
        b.iter_batched(
            || GraphqlRoute::new("/graphql".into(), Vec::new(), LIMITS),
            |route| {
                let mut ids = Vec::new();
                route
                    .ids_from_body(None, black_box(&pathological), ColdParse::Here, &mut ids)
                    .expect_err("over the token limit")
            },
            BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
