//! Random and mutated GraphQL bodies against the real router: no panic, no 5xx, and the
//! router keeps serving. A 200 means the mutation still held a routable request.

mod common;

use std::sync::OnceLock;

use common::{ConfigYaml, Router, Upstream};
use proptest::prelude::*;

struct Fixture {
    rt: tokio::runtime::Runtime,
    url: String,
    _router: Router,
    _upstream: Upstream,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (router, upstream) = rt.block_on(async {
            let up = Upstream::start("eu").await;
            let table = format!(
                "version: f\nregions:\n  eu: {{ upstreams: [\"{}\"] }}\ncountries:\n  3: eu\ndefault_region: eu\n",
                up.url()
            );
            let config = ConfigYaml::new().route_graphql("/graphql").limits(
                "graphql_body_bytes: 65536, max_hops: 3, graphql_max_tokens: 2000, graphql_max_depth: 32",
            );
            (Router::start(&config.yaml(), &table).await, up)
        });
        let url = router.url("/graphql");
        Fixture {
            rt,
            url,
            _router: router,
            _upstream: upstream,
        }
    })
}

const SEEDS: [&str; 4] = [
    r#"{"query":"query Q($id: ID!) { node(id: $id) { id ... on Order { total } } }","variables":{"id":"017f22e2-79b0-8003-8044-dc0c0c07398f"},"operationName":"Q"}"#,
    r#"{"query":"{ a: node(id: \"017f22e2-79b0-8003-8044-dc0c0c07398f\") { id } ...F } fragment F on Query { nodes(ids: [\"017f22e2-79b0-8003-8044-dc0c0c07398f\"]) { id } }"}"#,
    r#"[{"query":"query($i: [ID!]! = [\"017f22e2-79b0-8003-8044-dc0c0c07398f\"]) { nodes(ids: $i) { id } }"},{"extensions":{"persistedQuery":{"sha256Hash":"ab"}},"variables":{"nodeId":"017f22e2-79b0-8003-8044-dc0c0c07398f"}}]"#,
    r#"{"query":"query A { node(id: \"x\") { id } } query B { viewer { id } }","operationName":"B"}"#,
];

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, Vec<u8>),
    Truncate(usize),
    Duplicate(usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), proptest::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        any::<usize>().prop_map(Mutation::Truncate),
        (any::<usize>(), 1usize..40).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
    ]
}

fn apply(seed: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut body = seed.to_vec();
    for m in mutations {
        let len = body.len().max(1);
        match m {
            Mutation::Flip(i, b) => {
                if !body.is_empty() {
                    body[i % len] = *b;
                }
            }
            Mutation::Insert(i, bytes) => {
                let at = i % (body.len() + 1);
                body.splice(at..at, bytes.iter().copied());
            }
            Mutation::Truncate(i) => body.truncate(i % len),
            Mutation::Duplicate(i, n) => {
                let at = i % len;
                let end = (at + n).min(body.len());
                let copy = body[at.min(end)..end].to_vec();
                body.splice(at.min(end)..at.min(end), copy);
            }
        }
    }
    body
}

fn send(body: Vec<u8>, content_type: &'static str) -> u16 {
    let f = fixture();
    f.rt.block_on(async {
        let resp = reqwest::Client::new()
            .post(&f.url)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .expect("the router keeps answering");
        resp.status().as_u16()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn mutated_bodies_get_200_or_4xx(
        seed in 0usize..SEEDS.len(),
        mutations in proptest::collection::vec(mutation(), 1..6),
        graphql_type in any::<bool>(),
    ) {
        let body = apply(SEEDS[seed].as_bytes(), &mutations);
        let ct = if graphql_type { "application/graphql" } else { "application/json" };
        let status = send(body, ct);
        prop_assert!(status == 200 || (400..500).contains(&status), "status {}", status);
    }

    #[test]
    fn random_bytes_get_200_or_4xx(body in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let status = send(body, "application/json");
        prop_assert!(status == 200 || (400..500).contains(&status), "status {}", status);
    }
}

#[test]
fn unmutated_seeds_are_routed() {
    for seed in SEEDS {
        assert_eq!(
            send(seed.as_bytes().to_vec(), "application/json"),
            200,
            "{seed}"
        );
    }
}
