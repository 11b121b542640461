//! Issue 47: ids where APIs put them, end to end over HTTP/1.1 (the own engine) and h2c
//! (hyper's HTTP/2 server, the shared phases) alike: GraphQL mutations and root fields by
//! their `id_arguments` (docs/config.md `graphql:`), `query:` parameters and `json:` body
//! pointers. Each request goes to the real router in front of three recording upstreams;
//! what is asserted is where it arrived, that its body arrived byte for byte, and that a
//! refused request reached no upstream.

mod common;

use common::{relay_id, ConfigYaml, Router, Upstream};
use serde_json::{json, Value};

/// An id minted in `country` (1 ap, 2 us, 3 eu).
fn id(country: u8) -> String {
    common::iuid_for(country)
}

struct World {
    eu: Upstream,
    us: Upstream,
    ap: Upstream,
    router: Router,
}

/// The two protocols every case runs over: HTTP/1.1 and h2c (prior knowledge).
fn clients() -> [(&'static str, reqwest::Client); 2] {
    let h2c = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("h2c client");
    [("HTTP/1.1", common::client()), ("h2c", h2c)]
}

impl World {
    async fn start() -> World {
        let config = ConfigYaml::new()
            .route("graphql: /graphql")
            .route("{ graphql: /graphql-nodes-only, id_arguments: [] }")
            .route("{ graphql: /graphql-split, split_nodes: true, id_arguments: [id, ids] }")
            .route("{ path: /v1/rides, query: order_id }")
            .route("{ path: /v1/payments, json: /order_id }")
            .route("{ path: \"/v1/shops/{shop}/payments\", json: /payment/order/id }")
            .route_path("/v1/orders/{id}")
            .unrouted("default_region")
            .limits("json_body_bytes: 1024, graphql_body_bytes: 8192, max_hops: 3")
            .timeouts(500, 2000, 10000)
            .watch(false);
        let (eu, us, ap) = (
            Upstream::start("eu").await,
            Upstream::start("us").await,
            Upstream::start("ap").await,
        );
        let table = common::three_regions("writes", &eu.url(), &us.url(), &ap.url());
        let router = Router::start(&config.yaml(), &table).await;
        World { eu, us, ap, router }
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

    /// Sends `method path` with `body` (JSON when given) and returns the status, the
    /// upstream that answered and the problem body (if the router refused).
    async fn send(
        &self,
        client: &reqwest::Client,
        method: &str,
        path: &str,
        body: Option<&str>,
    ) -> (u16, String, Value) {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut req = client.request(method, self.router.url(path));
        if let Some(body) = body {
            req = req
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        let resp = req.send().await.expect("router answers");
        let status = resp.status().as_u16();
        let upstream = resp
            .headers()
            .get("x-upstream")
            .map(|v| v.to_str().expect("ascii").to_owned())
            .unwrap_or_default();
        let problem = match resp.headers().get("content-type") {
            Some(t) if t == "application/problem+json" => resp.json().await.expect("problem"),
            _ => Value::Null,
        };
        (status, upstream, problem)
    }

    /// Sends and asserts the request reached `region` with its target and body intact.
    async fn reaches(
        &self,
        (proto, client): &(&str, reqwest::Client),
        method: &str,
        path: &str,
        body: Option<&str>,
        region: &str,
    ) {
        let (status, up, problem) = self.send(client, method, path, body).await;
        assert_eq!(
            (status, up.as_str()),
            (200, region),
            "{proto} {method} {path} {body:?} → {problem}"
        );
        let got = self.upstream(region).last();
        assert_eq!(got.method, method, "{proto}");
        assert_eq!(got.target, path, "{proto}");
        assert_eq!(
            got.body.as_ref(),
            body.unwrap_or("").as_bytes(),
            "{proto} {path}: the body byte for byte"
        );
    }

    /// Sends and asserts the router refused with `status` and problem `slug`, and that no
    /// upstream saw the request.
    async fn refused(
        &self,
        (proto, client): &(&str, reqwest::Client),
        method: &str,
        path: &str,
        body: Option<&str>,
        status: u16,
        slug: &str,
    ) -> Value {
        let before = self.total();
        let (got, _, problem) = self.send(client, method, path, body).await;
        assert_eq!(got, status, "{proto} {method} {path} {body:?} → {problem}");
        assert_eq!(
            problem["type"],
            format!("urn:iuid-router:problem:{slug}"),
            "{proto} {path}: {problem}"
        );
        assert_eq!(self.total(), before, "{proto} {path}: nothing forwarded");
        problem
    }
}

fn graphql(query: &str, variables: Value) -> String {
    json!({ "query": query, "variables": variables }).to_string()
}

#[tokio::test]
async fn mutations_and_root_fields_are_routed_by_their_id_arguments() {
    let w = World::start().await;
    let (us, ap) = (id(2), id(1));
    for client in &clients() {
        // `id`, as a literal.
        let body = graphql(
            &format!(r#"mutation {{ cancelOrder(id: "{us}") {{ id }} }}"#),
            Value::Null,
        );
        w.reaches(client, "POST", "/graphql", Some(&body), "us")
            .await;
        // Relay's form: `input.id` through a variable, holding a Relay global id.
        let relay = relay_id("Order", &ap);
        let body = graphql(
            "mutation Cancel($id: ID!) { cancelOrder(input: {id: $id}) { order { id } } }",
            json!({ "id": relay }),
        );
        w.reaches(client, "POST", "/graphql", Some(&body), "ap")
            .await;
        // The whole input object as a variable.
        let body = graphql(
            "mutation Cancel($input: CancelOrderInput!) { cancelOrder(input: $input) { order { id } } }",
            json!({ "input": { "id": us, "reason": "duplicate" } }),
        );
        w.reaches(client, "POST", "/graphql", Some(&body), "us")
            .await;
        // A root `order(id:)` query.
        let body = graphql(
            "query Order($id: ID!) { order(id: $id) { id total } }",
            json!({ "id": ap }),
        );
        w.reaches(client, "POST", "/graphql", Some(&body), "ap")
            .await;
        // A nested field's `id` is not the operation's entity: unrouted, the default region.
        let body = graphql(
            &format!(r#"{{ viewer {{ order(id: "{us}") {{ id }} }} }}"#),
            Value::Null,
        );
        w.reaches(client, "POST", "/graphql", Some(&body), "eu")
            .await;
    }
}

#[tokio::test]
async fn a_mutation_over_two_regions_is_refused_and_never_split() {
    let w = World::start().await;
    let (us, ap) = (id(2), id(1));
    for client in &clients() {
        let body = graphql(
            &format!(
                r#"mutation {{ a: cancelOrder(id: "{us}") {{ id }} b: cancelOrder(input: {{id: "{ap}"}}) {{ id }} }}"#
            ),
            Value::Null,
        );
        let problem = w
            .refused(
                client,
                "POST",
                "/graphql",
                Some(&body),
                400,
                "ids-in-several-regions",
            )
            .await;
        assert!(problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("ap") && d.contains("us")));
        // `split_nodes` splits a query's `nodes(ids: $ids)`, never a mutation.
        let doc = |op: &str| format!("{op} Q($ids: [ID!]!) {{ nodes(ids: $ids) {{ id }} }}");
        let body = graphql(&doc("mutation"), json!({ "ids": [us, ap] }));
        w.refused(
            client,
            "POST",
            "/graphql-split",
            Some(&body),
            400,
            "ids-in-several-regions",
        )
        .await;
        let body = graphql(&doc("query"), json!({ "ids": [us, ap] }));
        let (status, _, problem) = w
            .send(&client.1, "POST", "/graphql-split", Some(&body))
            .await;
        assert_eq!(status, 200, "{}: a query is split: {problem}", client.0);
    }
}

#[tokio::test]
async fn no_id_arguments_is_the_routing_of_before() {
    let w = World::start().await;
    let us = id(2);
    for client in &clients() {
        let mutation = graphql(
            &format!(r#"mutation {{ cancelOrder(id: "{us}") {{ id }} }}"#),
            Value::Null,
        );
        w.reaches(client, "POST", "/graphql-nodes-only", Some(&mutation), "eu")
            .await;
        let query = graphql(&format!(r#"{{ order(id: "{us}") {{ id }} }}"#), Value::Null);
        w.reaches(client, "POST", "/graphql-nodes-only", Some(&query), "eu")
            .await;
        let node = graphql(&format!(r#"{{ node(id: "{us}") {{ id }} }}"#), Value::Null);
        w.reaches(client, "POST", "/graphql-nodes-only", Some(&node), "us")
            .await;
    }
}

#[tokio::test]
async fn query_parameters_route_decoded_and_repeated_ones_are_refused() {
    let w = World::start().await;
    let (us, ap) = (id(2), id(1));
    for client in &clients() {
        let path = format!("/v1/rides?status=open&order_id={us}");
        w.reaches(client, "GET", &path, None, "us").await;
        // Percent-encoded (a braced id), and the same value twice.
        let path = format!("/v1/rides?order_id=%7B{ap}%7D&order%5Fid=%7b{ap}%7d");
        w.reaches(client, "GET", &path, None, "ap").await;
        // Absent: the unrouted policy.
        w.reaches(client, "GET", "/v1/rides?status=open", None, "eu")
            .await;
        // Another value the second time: which would the region read?
        let path = format!("/v1/rides?order_id={us}&order_id={ap}");
        let problem = w
            .refused(client, "GET", &path, None, 400, "invalid-parameter")
            .await;
        assert!(problem["detail"]
            .as_str()
            .is_some_and(|d| d.contains("order_id")));
        // A malformed id: 400, as a path's.
        w.refused(
            client,
            "GET",
            "/v1/rides?order_id=nope",
            None,
            400,
            "malformed-id",
        )
        .await;
    }
}

#[tokio::test]
async fn json_body_fields_route_and_the_body_arrives_byte_for_byte() {
    let w = World::start().await;
    let (us, ap) = (id(2), id(1));
    for client in &clients() {
        let body = format!(r#"{{ "amount": 12.5, "order_id": "{us}", "note": "\u00e9" }}"#);
        w.reaches(client, "POST", "/v1/payments", Some(&body), "us")
            .await;
        // A nested pointer, on a path template.
        let body = format!(r#"{{"payment":{{"order":{{"id":"{ap}"}},"amount":3}}}}"#);
        w.reaches(client, "POST", "/v1/shops/7/payments", Some(&body), "ap")
            .await;
        // The pointer names nothing: the next route (none matches), then unrouted.
        let body = r#"{"amount": 1}"#;
        w.reaches(client, "POST", "/v1/payments", Some(body), "eu")
            .await;
        // No body at all: the same.
        w.reaches(client, "GET", "/v1/payments", None, "eu").await;
        // Over `limits.json_body_bytes` (1 KiB): 413, nothing forwarded.
        let big = format!(r#"{{"order_id":"{us}","pad":"{}"}}"#, "x".repeat(2000));
        w.refused(
            client,
            "POST",
            "/v1/payments",
            Some(&big),
            413,
            "payload-too-large",
        )
        .await;
        // Not JSON: 400.
        w.refused(
            client,
            "POST",
            "/v1/payments",
            Some("order_id=1"),
            400,
            "invalid-json",
        )
        .await;
        let cut = format!(r#"{{"order_id":"{us}""#);
        w.refused(
            client,
            "POST",
            "/v1/payments",
            Some(&cut),
            400,
            "invalid-json",
        )
        .await;
    }
}

#[tokio::test]
async fn a_chunked_json_body_is_routed_through_the_shared_phases() {
    let w = World::start().await;
    let us = id(2);
    let body = format!(r#"{{"order_id":"{us}"}}"#);
    let (a, b) = body.split_at(7);
    let request = format!(
        "POST /v1/payments HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    let answer = common::raw_http(w.router.addr, request.into_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("x-upstream: us"), "{answer}");
    assert_eq!(w.us.last().body.as_ref(), body.as_bytes());
}

/// A GraphQL query is a read whatever its method: sent again after a reset. A mutation is a
/// write: never, even over `GET`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_is_sent_again_after_a_reset_and_a_mutation_never() {
    let (resetter, seen) = common::resetting_upstream().await;
    let resets = || seen.lock().expect("log").len();
    let healthy = Upstream::start("healthy").await;
    let config = ConfigYaml::new()
        .route("graphql: /graphql")
        .unrouted("default_region")
        .timeouts(500, 2000, 10000)
        .watch(false)
        .extra(
            "health: { eject_after: 1000 }\nretries: { budget_percent: 100, min_per_second: 1000 }\n",
        );
    let table = common::lettered_table("resend", &[&[common::url(resetter), healthy.url()]]);
    let router = Router::start(&config.yaml(), &table).await;
    let us = id(1);
    for (proto, client) in clients() {
        let send = |query: String, get: bool| {
            let body = graphql(&query, Value::Null);
            let req = match get {
                true => {
                    let qs = form_urlencoded::Serializer::new(String::new())
                        .append_pair("query", &query)
                        .finish();
                    client.get(router.url(&format!("/graphql?{qs}")))
                }
                false => client
                    .post(router.url("/graphql"))
                    .header("content-type", "application/json")
                    .body(body),
            };
            async move { req.send().await.expect("answer").status().as_u16() }
        };
        // Queries: every one answered, whichever upstream each tried first.
        let before = resets();
        for n in 0..16 {
            let query = format!(r#"query Q{n} {{ order(id: "{us}") {{ id }} }}"#);
            assert_eq!(send(query, false).await, 200, "{proto}: query {n}");
        }
        let reset_queries = resets() - before;
        assert!(
            reset_queries > 0,
            "{proto}: no query met the resetting upstream"
        );
        // Mutations, POST and GET: each that met the reset is 502, the others 200.
        for get in [false, true] {
            let before = resets();
            let mut failed = 0;
            for n in 0..16 {
                let mutation = format!(r#"mutation M{n} {{ cancelOrder(id: "{us}") {{ id }} }}"#);
                match send(mutation, get).await {
                    200 => {}
                    502 => failed += 1,
                    other => panic!("{proto}: mutation {n}: status {other}"),
                }
            }
            let met = resets() - before;
            assert!(met > 0, "{proto}: no mutation met the resetting upstream");
            assert_eq!(
                failed, met,
                "{proto} (GET: {get}): every reset mutation is 502, none sent again"
            );
        }
    }
}

/// A body the route must read whose `Content-Length` already passes its limit is refused
/// at once with 413, the body never awaited, nothing forwarded, and the connection closed
/// (its body was never read): a client that waits before sending it is not left to time
/// out.
#[tokio::test]
async fn a_declared_length_over_the_limit_is_413_at_once() {
    let w = World::start().await;
    // GraphQL: 8 KiB; JSON: 1 KiB; both bodies within what a retry would hold (64 KiB).
    for (path, length) in [("/graphql", 9000), ("/v1/payments", 2000)] {
        let addr = w.router.addr;
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
        );
        // Read to the end, 5 s at most: the answer and the close come at once.
        let answer = common::raw_http(addr, head.into_bytes()).await;
        assert!(answer.starts_with("HTTP/1.1 413 "), "{path}: {answer:?}");
        assert!(answer.contains("connection: close"), "{path}: {answer}");
    }
    assert_eq!(w.total(), 0, "nothing forwarded");
}
