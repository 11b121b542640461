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

/// A typical client query, about 2 KiB: an admin panel's detail page for any node, by
/// variable, with inline fragments per type, nested connections and named fragments.
const TYPICAL_QUERY: &str = r#"query AdminNodeDetail($id: ID!, $locale: String = "en", $auditFirst: Int = 20, $auditAfter: String, $withArchived: Boolean = false) {
  node(id: $id) {
    __typename
    id
    ... on Order {
      number
      status
      placedAt
      currency
      totals { ...MoneyBreakdown }
      customer { ...CustomerSummary }
      shippingAddress { ...AddressFields }
      lineItems(first: 50, includeArchived: $withArchived) {
        totalCount
        edges {
          node {
            id
            sku
            quantity
            unitPrice { amount currency }
            product { id title(locale: $locale) vendor { id name } }
          }
        }
      }
      fulfillments { id status carrier trackingNumber shippedAt }
    }
    ... on Customer {
      ...CustomerSummary
      defaultAddress { ...AddressFields }
      orders(first: 10, sortKey: PLACED_AT, reverse: true) {
        edges { node { id number status placedAt totals { grandTotal { amount currency } } } }
        pageInfo { hasNextPage endCursor }
      }
    }
    ... on Product {
      title(locale: $locale)
      handle
      status
      vendor { id name }
      variants(first: 25) {
        edges { node { id sku title inventoryQuantity price { amount currency } } }
      }
    }
    ... on StaffMember { email role lastSignInAt permissions }
    ... on Auditable {
      auditEvents(first: $auditFirst, after: $auditAfter) {
        edges {
          cursor
          node {
            id
            action
            occurredAt
            actor { __typename ... on StaffMember { id email } ... on ApiClient { id name } }
          }
        }
        pageInfo { hasNextPage endCursor }
      }
    }
  }
}

fragment CustomerSummary on Customer {
  id
  displayName
  email
  phone
  ordersCount
  lifetimeSpent { amount currency }
}

fragment AddressFields on Address {
  name company line1 line2 city province postalCode countryCode phone
}

fragment MoneyBreakdown on OrderTotals {
  subtotal { amount currency }
  discounts { amount currency }
  shipping { amount currency }
  tax { amount currency }
  grandTotal { amount currency }
}
"#;

fn body(query: &str, operation_name: Option<&str>) -> Vec<u8> {
    json!({
        "query": query,
        "operationName": operation_name,
        "variables": { "id": "017f22e2-79b0-8003-8044-dc0c0c07398f", "auditFirst": 20 },
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
    assert!(
        (1800..=2300).contains(&TYPICAL_QUERY.len()),
        "the typical query is {} bytes, not about 2 KiB",
        TYPICAL_QUERY.len()
    );
    let typical = body(TYPICAL_QUERY, Some("AdminNodeDetail"));
    println!(
        "typical query: {} bytes, body: {} bytes",
        TYPICAL_QUERY.len(),
        typical.len()
    );
    let warm = GraphqlRoute::new("/graphql".into(), Vec::new(), "iuid".to_owned(), LIMITS);
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
            || GraphqlRoute::new("/graphql".into(), Vec::new(), "iuid".to_owned(), LIMITS),
            |route| {
                let mut ids = Vec::new();
                route
                    .ids_from_body(None, black_box(&typical), ColdParse::Here, &mut ids)
                    .map(|_| ids)
            },
            BatchSize::SmallInput,
        )
    });

    let large = body(&large_query(), Some("Many"));
    println!("large body: {} bytes", large.len());
    let warm_large = GraphqlRoute::new("/graphql".into(), Vec::new(), "iuid".to_owned(), LIMITS);
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
            || GraphqlRoute::new("/graphql".into(), Vec::new(), "iuid".to_owned(), LIMITS),
            |route| {
                let mut ids = Vec::new();
                route
                    .ids_from_body(None, black_box(&large), ColdParse::Here, &mut ids)
                    .map(|_| ids)
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
            || GraphqlRoute::new("/graphql".into(), Vec::new(), "iuid".to_owned(), LIMITS),
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
