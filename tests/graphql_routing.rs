//! GraphQL routes end to end (docs/config.md `graphql:`, §6): every request form and every decision,
//! with real upstreams, asserting where each request arrived and that its body arrived
//! byte-exact with its headers.

mod common;

use common::{client, relay_id, ConfigYaml, Router, Upstream};
use serde_json::{json, Value};

/// An id of `country`: [`common::iuid_for`]'s fields but random bits 0xabc, the ids this
/// file has always sent.
fn id(country: u8) -> String {
    common::iuid(common::MINTED_MS, country, 1, 0xabc)
}

struct World {
    eu: Upstream,
    us: Upstream,
    ap: Upstream,
    router: Router,
}

/// The GraphQL route `graphql_route` (a `routes:` item) and `/v1/orders/{id}`, the `unrouted`
/// policy, GraphQL bodies up to 8 KiB and at most 3 hops.
fn config(graphql_route: &str, unrouted: &str) -> ConfigYaml {
    ConfigYaml::new()
        .route(graphql_route)
        .route_path("/v1/orders/{id}")
        .unrouted(unrouted)
        .limits("graphql_body_bytes: 8192, max_hops: 3")
}

/// The plain GraphQL route.
const GRAPHQL: &str = "graphql: /graphql";

impl World {
    async fn start_with(config: &str) -> World {
        let (eu, us, ap) = (
            Upstream::start("eu").await,
            Upstream::start("us").await,
            Upstream::start("ap").await,
        );
        let table = common::three_regions("gql", &eu.url(), &us.url(), &ap.url());
        let router = Router::start(config, &table).await;
        World { eu, us, ap, router }
    }

    async fn start() -> World {
        World::start_with(&config(GRAPHQL, "default_region").yaml()).await
    }

    fn total(&self) -> usize {
        self.eu.count() + self.us.count() + self.ap.count()
    }

    fn upstream(&self, name: &str) -> &Upstream {
        match name {
            "eu" => &self.eu,
            "us" => &self.us,
            _ => &self.ap,
        }
    }

    /// POSTs `body` and returns (status, upstream that answered, problem body if any).
    async fn post(&self, content_type: &str, body: &str) -> (u16, String, Value) {
        let resp = client()
            .post(self.router.url("/graphql"))
            .header("content-type", content_type)
            .header("x-client", "gql-test")
            .body(body.to_owned())
            .send()
            .await
            .expect("router answers");
        answer(resp).await
    }

    /// POSTs and asserts the request reached `region` with its body and headers intact.
    async fn post_reaches(&self, content_type: &str, body: &str, region: &str) {
        let (status, up, problem) = self.post(content_type, body).await;
        assert_eq!((status, up.as_str()), (200, region), "{body} → {problem}");
        let got = self.upstream(region).last();
        assert_eq!(got.method, "POST");
        assert_eq!(got.target, "/graphql");
        assert_eq!(got.body.as_ref(), body.as_bytes(), "body byte-exact");
        assert_eq!(got.headers["content-type"], content_type);
        assert_eq!(got.headers["x-client"], "gql-test");
        assert_eq!(
            got.headers["content-length"],
            body.len().to_string().as_str()
        );
    }
}

async fn answer(resp: reqwest::Response) -> (u16, String, Value) {
    let status = resp.status().as_u16();
    let upstream = resp
        .headers()
        .get("x-upstream")
        .map(|v| v.to_str().expect("ascii").to_owned())
        .unwrap_or_default();
    let is_problem = resp
        .headers()
        .get("content-type")
        .is_some_and(|v| v == "application/problem+json");
    let text = resp.text().await.expect("body");
    let problem = if is_problem {
        serde_json::from_str(&text).expect("problem json")
    } else {
        Value::Null
    };
    (status, upstream, problem)
}

fn op(query: &str, variables: Value) -> String {
    json!({ "query": query, "variables": variables, "operationName": null }).to_string()
}

#[tokio::test]
async fn post_json_literals_variables_defaults_aliases_and_fragments() {
    let w = World::start().await;
    let literal = op(
        &format!(r#"{{ order: node(id: "{}") {{ id }} }}"#, id(2)),
        Value::Null,
    );
    w.post_reaches("application/json", &literal, "us").await;

    let variables = op(
        "query Get($id: ID!) { node(id: $id) { id } }",
        json!({ "id": id(1) }),
    );
    w.post_reaches("application/json", &variables, "ap").await;

    let default = op(
        &format!(
            r#"query Get($id: ID = "{}") {{ node(id: $id) {{ id }} }}"#,
            id(3)
        ),
        json!({}),
    );
    w.post_reaches("application/json", &default, "eu").await;

    let lists = op(
        &format!(
            r#"query Get($a: ID!, $many: [ID!]!) {{
                 nodes(ids: ["{}", $a]) {{ id }}
                 more: nodes(ids: $many) {{ id }}
               }}"#,
            id(2)
        ),
        json!({ "a": id(2), "many": [id(2), id(2)] }),
    );
    w.post_reaches("application/json; charset=utf-8", &lists, "us")
        .await;

    let fragments = op(
        &format!(
            r#"query Get {{ ...Root ... on Query {{ b: node(id: "{}") {{ id }} }} }}
               fragment Root on Query {{ a: node(id: "{}") {{ id }} }}"#,
            id(1),
            id(1)
        ),
        Value::Null,
    );
    w.post_reaches("application/json", &fragments, "ap").await;

    // A Relay global id (base64 of "Order:<uuid>") in a variable.
    let relay = op(
        "query($id: ID!) { node(id: $id) { id } }",
        json!({ "id": relay_id("Order", &id(2)) }),
    );
    w.post_reaches("application/json", &relay, "us").await;
    assert_eq!(w.total(), 6);
}

#[tokio::test]
async fn operation_name_chooses_and_ambiguity_is_400() {
    let w = World::start().await;
    let doc = format!(
        r#"query InUs {{ node(id: "{}") {{ id }} }} query InAp {{ node(id: "{}") {{ id }} }}"#,
        id(2),
        id(1)
    );
    let named = |name: &str| json!({ "query": doc, "operationName": name }).to_string();
    w.post_reaches("application/json", &named("InAp"), "ap")
        .await;
    w.post_reaches("application/json", &named("InUs"), "us")
        .await;
    let (status, _, problem) = w.post("application/json", &op(&doc, Value::Null)).await;
    assert_eq!(status, 400);
    assert!(problem["detail"]
        .as_str()
        .expect("detail")
        .contains("operationName"));
    assert_eq!(w.total(), 2);
}

#[tokio::test]
async fn raw_document_get_and_batched_forms() {
    let w = World::start().await;
    let raw = format!(r#"{{ node(id: "{}") {{ id }} }}"#, id(1));
    w.post_reaches("application/graphql", &raw, "ap").await;

    let batch = format!(
        "[{}, {}]",
        op(
            &format!(r#"{{ node(id: "{}") {{ id }} }}"#, id(3)),
            Value::Null
        ),
        op(
            "query($id: ID!) { node(id: $id) { id } }",
            json!({ "id": id(3) })
        )
    );
    w.post_reaches("application/json", &batch, "eu").await;

    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("query", "query Get($id: ID!) { node(id: $id) { id } }")
        .append_pair("variables", &json!({ "id": id(2) }).to_string())
        .append_pair("operationName", "Get")
        .finish();
    let target = format!("/graphql?{query}");
    let resp = client()
        .get(w.router.url(&target))
        .send()
        .await
        .expect("answer");
    let (status, up, _) = answer(resp).await;
    assert_eq!((status, up.as_str()), (200, "us"));
    let got = w.us.last();
    assert_eq!(
        (got.method.as_str(), got.target.as_str()),
        ("GET", target.as_str())
    );
    assert!(got.body.is_empty());
}

#[tokio::test]
async fn graphql_plus_json_bodies_are_read_as_json_not_as_raw_documents() {
    // `application/graphql+json` (the request type of earlier GraphQL-over-HTTP drafts) and
    // `application/graphql-response+json` start like `application/graphql` but carry JSON.
    let w = World::start().await;
    let body = op(
        "query($id: ID!) { node(id: $id) { id } }",
        json!({ "id": id(2) }),
    );
    w.post_reaches("application/graphql+json", &body, "us")
        .await;
    w.post_reaches("application/graphql+json; charset=utf-8", &body, "us")
        .await;
    w.post_reaches("application/graphql-response+json", &body, "us")
        .await;
    // The raw-document type itself, with a parameter, is still a document.
    let raw = format!(r#"{{ node(id: "{}") {{ id }} }}"#, id(1));
    w.post_reaches("application/graphql;charset=utf-8", &raw, "ap")
        .await;
    assert_eq!(w.total(), 4);
}

#[tokio::test]
async fn persisted_queries_route_by_variable_names() {
    let w = World::start().await;
    let persisted = |vars: Value| {
        json!({
            "extensions": { "persistedQuery": { "version": 1, "sha256Hash": "ecf4edb46db40b5132295c0291d62fb65d6759a9eedfa4d5d612dd5ec54a6b38" } },
            "variables": vars,
            "operationName": "Get",
        })
        .to_string()
    };
    w.post_reaches(
        "application/json",
        &persisted(json!({ "nodeId": id(1) })),
        "ap",
    )
    .await;
    w.post_reaches(
        "application/json",
        &persisted(json!({ "ids": [id(2), id(2)] })),
        "us",
    )
    .await;

    // Configured names replace the defaults.
    let custom = World::start_with(
        &config(
            "{ graphql: /graphql, persisted_id_variables: [entityRef] }",
            "default_region",
        )
        .yaml(),
    )
    .await;
    let body = persisted(json!({ "entityRef": id(1), "id": id(2) }));
    custom.post_reaches("application/json", &body, "ap").await;
}

#[tokio::test]
async fn ids_in_several_regions_are_400_naming_the_regions_and_ids() {
    let w = World::start().await;
    let body = op(
        "query($a: ID!, $b: ID!) { a: node(id: $a) { id } b: node(id: $b) { id } }",
        json!({ "a": id(1), "b": id(2) }),
    );
    let (status, _, problem) = w.post("application/json", &body).await;
    assert_eq!(status, 400);
    assert_eq!(problem["regions"], json!(["ap", "us"]));
    let detail = problem["detail"].as_str().expect("detail");
    assert!(
        detail.contains(&id(1)) && detail.contains(&id(2)),
        "{detail}"
    );
    assert_eq!(problem["ids"][0]["region"], "ap");
    assert_eq!(w.total(), 0);
}

#[tokio::test]
async fn no_id_follows_the_unrouted_policy() {
    let w = World::start().await;
    let body = op("{ viewer { name } }", Value::Null);
    w.post_reaches("application/json", &body, "eu").await;
    // A mutation's root field argument that is not one of the route's `id_arguments`
    // (default `id`, `input.id`) holds no id; one that is routes it (`tests/write_routing.rs`).
    let mutation = op(
        &format!(r#"mutation {{ cancel(orderId: "{}") {{ ok }} }}"#, id(2)),
        Value::Null,
    );
    w.post_reaches("application/json", &mutation, "eu").await;
    let mutation = op(
        &format!(r#"mutation {{ cancel(id: "{}") {{ ok }} }}"#, id(2)),
        Value::Null,
    );
    w.post_reaches("application/json", &mutation, "us").await;

    // A GET that is no GraphQL request at all (GraphiQL in a browser) is unrouted too.
    for page in ["/graphql", "/graphql?theme=dark"] {
        let resp = client()
            .get(w.router.url(page))
            .header("accept", "text/html")
            .send()
            .await
            .expect("answer");
        let (status, up, problem) = answer(resp).await;
        assert_eq!((status, up.as_str()), (200, "eu"), "GET {page} → {problem}");
        assert_eq!(w.eu.last().target, page);
    }

    let strict = World::start_with(&config(GRAPHQL, "reject").yaml()).await;
    let (status, _, problem) = strict.post("application/json", &body).await;
    assert_eq!(status, 404);
    assert_eq!(problem["status"], 404);
    assert_eq!(strict.total(), 0);
}

#[tokio::test]
async fn bad_bodies_are_4xx_problems_and_nothing_is_forwarded() {
    let w = World::start().await;
    let cases: Vec<(String, &str, u16, &str)> = vec![
        ("{\"query\": ".into(), "application/json", 400, "JSON"),
        (
            op("{ node(id: ", Value::Null),
            "application/json",
            400,
            "syntax",
        ),
        (
            "{ node(id: \"x\" ".into(),
            "application/graphql",
            400,
            "syntax",
        ),
        (
            op(
                r#"{ node(id: "017f22e2-79b0-802a-8144-dc0c0c07398") { id } }"#,
                Value::Null,
            ),
            "application/json",
            400,
            "length",
        ),
        (
            op(
                "query($id: ID!) { node(id: $id) { id } }",
                json!({ "id": 42 }),
            ),
            "application/json",
            400,
            "42",
        ),
        (
            op(
                &format!(r#"{{ node(id: "{}") {{ id }} }}"#, id(77)),
                Value::Null,
            ),
            "application/json",
            404,
            "country 77",
        ),
        (
            json!({ "variables": {} }).to_string(),
            "application/json",
            400,
            "no query",
        ),
        (
            format!("{{\"query\": \"{}\"}}", "x".repeat(9000)),
            "application/json",
            413,
            "8192",
        ),
    ];
    for (body, ct, status, words) in cases {
        let (got, _, problem) = w.post(ct, &body).await;
        assert_eq!(got, status, "{body:.80} → {problem}");
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(words), "{words:?} not in {detail:?}");
    }
    assert_eq!(w.total(), 0);
}

#[tokio::test]
async fn an_oversized_chunked_body_is_413_without_a_content_length() {
    use std::io::{Read, Write};
    let w = World::start().await;
    let addr = w.router.addr;
    let reply = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).expect("connect");
        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        let head = "POST /graphql HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                    Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
        s.write_all(head.as_bytes()).expect("head");
        let chunk = "y".repeat(4096);
        for _ in 0..3 {
            let _ = write!(s, "{:x}\r\n{chunk}\r\n", chunk.len());
        }
        let _ = s.write_all(b"0\r\n\r\n");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    })
    .await
    .expect("join");
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert!(reply.contains("application/problem+json"));
    assert_eq!(w.total(), 0);
}

#[tokio::test]
async fn megabyte_pathological_documents_are_refused_by_the_limits() {
    let config =
        config(GRAPHQL, "default_region").limits("graphql_body_bytes: 2097152, max_hops: 3");
    let w = World::start_with(&config.yaml()).await;
    let deep = format!("{{{}{}}}", "a {".repeat(350_000), "}".repeat(350_000));
    let mut aliases = String::from("{ ");
    let mut i = 0;
    while aliases.len() < 1 << 20 {
        aliases.push_str(&format!("a{i}: node(id: \"{}\") {{ id }} ", id(3)));
        i += 1;
    }
    aliases.push('}');
    for (what, doc) in [("deep nesting", deep), ("thousands of aliases", aliases)] {
        assert!(doc.len() >= 1 << 20, "{what}: {} bytes", doc.len());
        let (status, _, problem) = w.post("application/json", &op(&doc, Value::Null)).await;
        assert_eq!(status, 400, "{what}");
        let detail = problem["detail"].as_str().expect("detail");
        assert!(detail.contains("limit"), "{what}: {detail}");
    }
    // Still serving.
    let small = op(
        &format!(r#"{{ node(id: "{}") {{ id }} }}"#, id(2)),
        Value::Null,
    );
    w.post_reaches("application/json", &small, "us").await;
}

#[tokio::test]
async fn large_documents_are_parsed_off_the_workers_and_still_routed() {
    let w = World::start().await;
    // Over the 4 KiB inline-parse bound: the first request is parsed on the blocking pool,
    // the second is a cache hit served inline; both by POST and by GET.
    let fields = "field ".repeat(1000);
    let doc = format!(r#"query Big {{ node(id: "{}") {{ id {fields} }} }}"#, id(1));
    for _ in 0..2 {
        w.post_reaches("application/json", &op(&doc, Value::Null), "ap")
            .await;
    }
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("query", &doc.replace(&id(1), &id(2)))
        .finish();
    let resp = client()
        .get(w.router.url(&format!("/graphql?{query}")))
        .send()
        .await
        .expect("answer");
    let (status, up, problem) = answer(resp).await;
    assert_eq!((status, up.as_str()), (200, "us"), "{problem}");

    // A batch of distinct small documents, each under the bound but over it together: the
    // bound is per request, so this batch goes to the blocking pool too, and still routes.
    let ops: Vec<String> = (0..6)
        .map(|i| {
            let fields: String = (0..150).map(|f| format!("f{i}_{f} ")).collect();
            op(
                &format!(r#"{{ node(id: "{}") {{ id {fields}}} }}"#, id(1)),
                Value::Null,
            )
        })
        .collect();
    let batch = format!("[{}]", ops.join(","));
    assert!(batch.len() > 4 << 10 && ops.iter().all(|o| o.len() < 4 << 10));
    w.post_reaches("application/json", &batch, "ap").await;
}

/// Issue 37: a GraphQL `node(id:)` request is served by the own HTTP/1.1 engine itself (main
/// handed its connection to hyper's): the body is read whole, its id routed, and the request
/// goes upstream with its fields in the case and order they came (hyper's engine lowercases
/// them) and its body byte-exact; the connection then serves the next request, and a body
/// that is not GraphQL is refused 400 without closing it.
#[tokio::test]
async fn graphql_requests_are_carried_by_the_own_engine() {
    use std::io::Write;
    let (eu, eu_seen) = common::recording_upstream().await;
    let (ap, ap_seen) = common::recording_upstream().await;
    let table = common::three_regions("gql", &eu, &eu, &ap);
    let config = config(GRAPHQL, "default_region").yaml();
    let router = Router::start(&config, &table).await;
    let addr = router.addr;
    let ap_id = id(1);
    let eu_id = id(3);
    let exchange = move |bodies: Vec<String>| {
        let mut conn = std::net::TcpStream::connect(addr).expect("connect");
        conn.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        let mut answers = Vec::new();
        for body in bodies {
            let request = format!(
                "POST /graphql HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nX-Case-Kept: Yes\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            conn.write_all(request.as_bytes()).expect("write");
            answers.push(common::read_answer(&mut conn));
        }
        answers
    };
    let ap_body = json!({ "query": format!("{{ node(id: \"{ap_id}\") {{ id }} }}") }).to_string();
    let eu_body = json!({ "query": "query($id: ID!) { node(id: $id) { id } }", "variables": { "id": eu_id } })
        .to_string();
    let bodies = vec![ap_body.clone(), "not json".to_owned(), eu_body.clone()];
    let answers = tokio::task::spawn_blocking(move || exchange(bodies))
        .await
        .expect("client");
    assert!(answers[0].starts_with("HTTP/1.1 200"), "{}", answers[0]);
    assert!(answers[1].starts_with("HTTP/1.1 400"), "{}", answers[1]);
    assert!(
        answers[1].contains("application/problem+json"),
        "{}",
        answers[1]
    );
    assert!(answers[2].starts_with("HTTP/1.1 200"), "{}", answers[2]);
    for (seen, body) in [(&ap_seen, &ap_body), (&eu_seen, &eu_body)] {
        let seen = seen.lock().expect("seen");
        assert_eq!(seen.len(), 1, "one request each");
        let text = String::from_utf8_lossy(&seen[0]);
        assert!(text.starts_with("POST /graphql HTTP/1.1\r\n"), "{text}");
        assert!(
            text.contains("\r\nContent-Type: application/json\r\nX-Case-Kept: Yes\r\n"),
            "{text}"
        );
        assert!(text.ends_with(&format!("\r\n\r\n{body}")), "{text}");
    }
}
