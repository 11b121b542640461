//! GraphQL `split_nodes` (docs/fanout.md) over real sockets: a `nodes(ids: $ids)` whose ids live in
//! three regions goes to each region with only its ids, and the answers come back as one, in
//! the request's id order, errors renumbered, a failed region's ids `null`.

mod common;

use std::sync::{Arc, Mutex};

use common::{client, free_port, url, ConfigYaml, Router};
use serde_json::{json, Value};

/// A GraphQL server standing for one region: `nodes(ids:)` answers each id it owns as
/// `{"id", "region"}`, an id ending in `0dead` as `null` with an error at its path, and
/// records the ids it was asked for.
async fn graphql_region(name: &'static str) -> (String, Arc<Mutex<Vec<Vec<String>>>>) {
    let asked: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let log = asked.clone();
    let app = axum::Router::new().fallback(move |body: axum::body::Bytes| {
        let log = log.clone();
        async move {
            let op: Value = serde_json::from_slice(&body).expect("JSON operation");
            let ids: Vec<String> = op["variables"]["ids"]
                .as_array()
                .expect("ids")
                .iter()
                .map(|v| v.as_str().expect("id").to_owned())
                .collect();
            log.lock().expect("log").push(ids.clone());
            let mut errors = Vec::new();
            let nodes: Vec<Value> = ids
                .iter()
                .enumerate()
                .map(|(j, id)| {
                    if id.ends_with("0dead") {
                        errors.push(json!({"message": "not found", "path": ["list", j]}));
                        Value::Null
                    } else {
                        json!({"id": id, "region": name})
                    }
                })
                .collect();
            let mut answer = json!({"data": {"list": nodes, "viewer": name}});
            if !errors.is_empty() {
                answer["errors"] = Value::Array(errors);
            }
            axum::Json(answer)
        }
    });
    (url(common::serve(app).await), asked)
}

fn id(country: u8, rand: u64) -> String {
    common::iuid(common::MINTED_MS, country, 1, rand)
}

const QUERY: &str = "query Q($ids: [ID!]!) { list: nodes(ids: $ids) { id } viewer }";

async fn post(router: &Router, body: &Value) -> (u16, Value) {
    let resp = client()
        .post(router.url("/graphql"))
        .json(body)
        .send()
        .await
        .expect("request");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("JSON answer"))
}

fn config(split: bool) -> String {
    ConfigYaml::new()
        .route(&format!("{{ graphql: /graphql, split_nodes: {split} }}"))
        .timeouts(300, 2000, 10000)
        .watch(false)
        .yaml()
}

#[tokio::test]
async fn ids_in_three_regions_come_back_in_request_order() {
    let (a, a_asked) = graphql_region("a").await;
    let (b, b_asked) = graphql_region("b").await;
    let (c, c_asked) = graphql_region("c").await;
    let table = common::lettered_table("split", &[&[a], &[b], &[c]]);
    let router = Router::start(&config(true), &table).await;
    // Countries 1, 2, 3 are regions a, b, c; the dead id is b's.
    let dead = common::iuid(common::MINTED_MS, 2, 1, 0xdead);
    assert!(dead.ends_with("0dead"), "{dead}");
    let ids = [
        id(3, 1),
        id(1, 2),
        dead.clone(),
        id(1, 3),
        id(2, 4),
        id(3, 5),
    ];
    let (status, answer) = post(&router, &json!({"query": QUERY, "variables": {"ids": ids}})).await;
    assert_eq!(status, 200, "{answer}");

    let nodes = answer["data"]["list"].as_array().expect("list");
    assert_eq!(nodes.len(), ids.len());
    let regions = ["c", "a", "", "a", "b", "c"];
    for (k, node) in nodes.iter().enumerate() {
        if k == 2 {
            assert!(node.is_null());
            continue;
        }
        assert_eq!(node["id"], ids[k], "{answer}");
        assert_eq!(node["region"], regions[k]);
    }
    assert!(
        answer["data"]["viewer"].is_string(),
        "other data members kept"
    );
    // b answered the dead id at its own index 0; the merged path says 2.
    assert_eq!(
        answer["errors"],
        json!([{"message": "not found", "path": ["list", 2]}])
    );
    // Each region was asked only for its ids, in request order.
    assert_eq!(
        *a_asked.lock().expect("a"),
        vec![vec![ids[1].clone(), ids[3].clone()]]
    );
    assert_eq!(
        *b_asked.lock().expect("b"),
        vec![vec![dead, ids[4].clone()]]
    );
    assert_eq!(
        *c_asked.lock().expect("c"),
        vec![vec![ids[0].clone(), ids[5].clone()]]
    );

    // Ids of one region are not split: one request as before.
    let one = [id(1, 7), id(1, 8)];
    let (status, answer) = post(&router, &json!({"query": QUERY, "variables": {"ids": one}})).await;
    assert_eq!(status, 200);
    assert_eq!(answer["data"]["list"][1]["id"], one[1]);
    assert_eq!(a_asked.lock().expect("a").len(), 2);
}

#[tokio::test]
async fn a_failed_region_s_ids_are_null_with_an_error_naming_it() {
    let (a, _) = graphql_region("a").await;
    let (b, _) = graphql_region("b").await;
    let table = common::lettered_table("split", &[&[a], &[b], &[url(free_port())]]);
    let router = Router::start(&config(true), &table).await;
    let ids = [id(3, 1), id(1, 2), id(2, 3)];
    let (status, answer) = post(&router, &json!({"query": QUERY, "variables": {"ids": ids}})).await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer["data"]["list"][0].is_null());
    assert_eq!(answer["data"]["list"][1]["region"], "a");
    assert_eq!(answer["data"]["list"][2]["region"], "b");
    let errors = answer["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0]["path"], json!(["list", 0]));
    assert_eq!(errors[0]["extensions"]["region"], "c");
    assert!(errors[0]["message"]
        .as_str()
        .is_some_and(|m| m.contains("region c") && m.contains("connect")));
}

#[tokio::test]
async fn without_split_nodes_or_with_literals_the_400_stands() {
    let (a, _) = graphql_region("a").await;
    let (b, _) = graphql_region("b").await;
    let (c, _) = graphql_region("c").await;
    let table = common::lettered_table("split", &[&[a], &[b], &[c]]);
    let ids = [id(1, 1), id(2, 2)];
    let unsplit = Router::start(&config(false), &table).await;
    let (status, problem) = post(
        &unsplit,
        &json!({"query": QUERY, "variables": {"ids": ids}}),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        problem["type"],
        "urn:iuid-router:problem:ids-in-several-regions"
    );

    let split = Router::start(&config(true), &table).await;
    let literals = format!(
        "{{ nodes(ids: [\"{}\", \"{}\"]) {{ id }} }}",
        ids[0], ids[1]
    );
    let (status, problem) = post(&split, &json!({"query": literals})).await;
    assert_eq!(status, 400, "{problem}");
    let two_fields =
        "query Q($ids: [ID!]!, $x: ID!) { nodes(ids: $ids) { id } node(id: $x) { id } }";
    let body = json!({"query": two_fields, "variables": {"ids": [ids[0]], "x": ids[1]}});
    let (status, _) = post(&split, &body).await;
    assert_eq!(status, 400);
}
