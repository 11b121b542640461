//! The GraphQL reader's unit tests: forms, operations, persisted queries, batches, the cold-parse
//! budget and the parse limits.

use super::*;

const A: &str = "017f22e2-79b0-802a-8144-dc0c0c07398f";
const B: &str = "017f22e2-79b0-8003-8044-dc0c0c07398f";

fn route() -> GraphqlRoute {
    GraphqlRoute::new(
        "/graphql".into(),
        Vec::new(),
        "iuid".to_owned(),
        ParseLimits {
            tokens: 10_000,
            depth: 64,
        },
    )
}

/// The ids a body names, parsed as the table would and written canonically; an id that
/// does not parse is written `malformed: <text>`.
fn ids(route: &GraphqlRoute, body: &str) -> Result<Vec<String>, GraphqlError> {
    let mut out = Vec::new();
    route.ids_from_body(None, body.as_bytes(), ColdParse::Here, &mut out)?;
    Ok(out.iter().map(|t| canonical(t)).collect())
}

fn canonical(text: &[u8]) -> String {
    match crate::scheme::iuid::parse(text) {
        Ok(key) => key.to_string(),
        Err(_) => format!("malformed: {}", String::from_utf8_lossy(text)),
    }
}

fn json(query: &str, variables: serde_json::Value) -> String {
    serde_json::json!({ "query": query, "variables": variables }).to_string()
}

#[test]
fn literals_variables_defaults_lists_aliases_fragments() {
    let r = route();
    let q = format!(
        r#"query Q($a: ID!, $d: ID = "{B}", $l: [ID!]!) {{
            x: node(id: "{A}") {{ id }}
            node(id: $a) {{ id }}
            y: node(id: $d) {{ id }}
            nodes(ids: ["{B}", $a]) {{ id }}
            z: nodes(ids: $l) {{ id }}
            ...Root
            ... on Query {{ w: node(id: "{A}") {{ id }} }}
            viewer {{ node(id: "not-root") {{ id }} }}
        }}
        fragment Root on Query {{ v: node(id: "{B}") {{ id }} }}"#
    );
    let got = ids(&r, &json(&q, serde_json::json!({ "a": A, "l": [A, B] }))).expect("ids");
    assert_eq!(got, vec![A, A, B, B, A, A, B, B, A]);
    // Same shape, other literal values: served from the cache, reading the new values.
    let q2 = q.replace(A, B);
    let got = ids(
        &r,
        &json(&q2, serde_json::json!({ "a": B, "d": A, "l": [] })),
    )
    .expect("ids");
    assert_eq!(got, vec![B, B, A, B, B, B, B]);
    assert_eq!(r.cached_plans(), 1);
}

#[test]
fn operation_choice() {
    let r = route();
    let doc = format!(
        r#"query One {{ node(id: "{A}") {{ id }} }} query Two {{ node(id: "{B}") {{ id }} }}"#
    );
    let body = |name: &str| serde_json::json!({ "query": doc, "operationName": name }).to_string();
    assert_eq!(ids(&r, &body("Two")).expect("two"), vec![B]);
    assert_eq!(ids(&r, &body("One")).expect("one"), vec![A]);
    let e = ids(&r, &json(&doc, serde_json::Value::Null)).expect_err("ambiguous");
    assert!(e.to_string().contains("several operations"), "{e}");
    let e = ids(&r, &body("Three")).expect_err("unknown");
    assert!(e.to_string().contains("Three"), "{e}");
}

#[test]
fn persisted_batched_and_bad_requests() {
    let r = route();
    let persisted = serde_json::json!({
        "extensions": { "persistedQuery": { "version": 1, "sha256Hash": "abc" } },
        "variables": { "nodeId": A, "other": B },
    });
    assert_eq!(ids(&r, &persisted.to_string()).expect("persisted"), vec![A]);
    let batch = format!(
        "[{}, {}]",
        json(
            &format!(r#"{{ node(id: "{A}") {{ id }} }}"#),
            serde_json::Value::Null
        ),
        json(
            "query($id: ID!) { node(id: $id) { id } }",
            serde_json::json!({ "id": B })
        )
    );
    assert_eq!(ids(&r, &batch).expect("batch"), vec![A, B]);
    for bad in [
        "{",
        "[]",
        "{\"query\": 5}",
        "{}",
        "{\"query\": \"{ node(id: \"}",
    ] {
        assert!(
            matches!(ids(&r, bad), Err(GraphqlError::Invalid(_))),
            "{bad}"
        );
    }
    let bad_id = json(r#"{ node(id: "nope") { id } }"#, serde_json::Value::Null);
    assert_eq!(ids(&r, &bad_id).expect("read"), vec!["malformed: nope"]);
}

#[test]
fn get_and_raw_document_forms() {
    let r = route();
    let query: String = form_urlencoded::Serializer::new(String::new())
        .append_pair("query", "query($id: ID!) { node(id: $id) { id } }")
        .append_pair("variables", &serde_json::json!({ "id": A }).to_string())
        .finish();
    let mut out = Vec::new();
    r.ids_from_query(&query, ColdParse::Here, &mut out)
        .expect("get");
    assert_eq!(out.len(), 1);
    let mut out = Vec::new();
    let doc = format!(r#"{{ nodes(ids: ["{A}", "{B}"]) {{ id }} }}"#);
    r.ids_from_body(
        Some(b"application/graphql; charset=utf-8"),
        doc.as_bytes(),
        ColdParse::Here,
        &mut out,
    )
    .expect("raw");
    assert_eq!(out.len(), 2);
}

#[test]
fn only_application_graphql_itself_is_a_raw_document() {
    for raw in [
        &b"application/graphql"[..],
        b"Application/GraphQL",
        b"application/graphql; charset=utf-8",
        b"application/graphql ;charset=utf-8",
    ] {
        assert!(is_raw_document(raw), "{}", String::from_utf8_lossy(raw));
    }
    for json in [
        &b"application/graphql+json"[..],
        b"application/graphql+json; charset=utf-8",
        b"application/graphql-response+json",
        b"application/graphqlx",
        b"application/json",
        b"application/graph",
    ] {
        assert!(!is_raw_document(json), "{}", String::from_utf8_lossy(json));
    }
}

#[test]
fn large_cold_documents_are_parsed_elsewhere_but_hits_are_served() {
    let r = route();
    let doc = format!(r#"{{ node(id: "{A}") {{ id {} }} }}"#, "f ".repeat(3000));
    let body = json(&doc, serde_json::Value::Null);
    let mut out = Vec::new();
    let small_only = r.ids_from_body(None, body.as_bytes(), ColdParse::SmallOnly, &mut out);
    assert_eq!(small_only, Err(GraphqlError::ParseElsewhere));
    r.ids_from_body(None, body.as_bytes(), ColdParse::Here, &mut out)
        .expect("here");
    out.clear();
    r.ids_from_body(None, body.as_bytes(), ColdParse::SmallOnly, &mut out)
        .expect("hit");
    assert_eq!(out.len(), 1);
}

#[test]
fn the_inline_cold_budget_is_per_request_not_per_document() {
    let mut here = ColdBudget::new(ColdParse::Here);
    assert!(here.admit(1 << 20) && here.admit(1 << 20));
    let mut small = ColdBudget::new(ColdParse::SmallOnly);
    assert!(small.admit(INLINE_PARSE_MAX / 2));
    assert!(small.admit(INLINE_PARSE_MAX / 4));
    // Each of these would fit alone; together with the earlier ones they do not.
    assert!(!small.admit(INLINE_PARSE_MAX / 2));
    assert!(small.admit(INLINE_PARSE_MAX / 4));
    assert!(!small.admit(1));
    let mut one = ColdBudget::new(ColdParse::SmallOnly);
    assert!(
        one.admit(INLINE_PARSE_MAX),
        "one document up to the bound stays inline"
    );
    let mut big = ColdBudget::new(ColdParse::SmallOnly);
    assert!(!big.admit(INLINE_PARSE_MAX + 1));
}

#[test]
fn a_batch_of_many_small_cold_documents_is_parsed_elsewhere() {
    let r = route();
    // Eight distinct shapes of about 1 KiB each: each under the bound, 8 KiB together.
    let ops: Vec<String> = (0..8)
        .map(|i| {
            let fields: String = (0..150).map(|f| format!("f{i}_{f} ")).collect();
            json(
                &format!(r#"{{ node(id: "{A}") {{ id {fields}}} }}"#),
                serde_json::Value::Null,
            )
        })
        .collect();
    let batch = format!("[{}]", ops.join(","));
    let mut out = Vec::new();
    let small_only = r.ids_from_body(None, batch.as_bytes(), ColdParse::SmallOnly, &mut out);
    assert_eq!(small_only, Err(GraphqlError::ParseElsewhere));
    assert!(r.cached_plans() < 8, "at most 4 KiB was parsed inline");
    let mut out = Vec::new();
    r.ids_from_body(None, batch.as_bytes(), ColdParse::Here, &mut out)
        .expect("here");
    assert_eq!((out.len(), r.cached_plans()), (8, 8));
    // Warm now: the same batch is served inline.
    let mut out = Vec::new();
    r.ids_from_body(None, batch.as_bytes(), ColdParse::SmallOnly, &mut out)
        .expect("hits");
    assert_eq!(out.len(), 8);
    // A small batch of cold documents still fits inline.
    let two = format!(
        "[{},{}]",
        ops[0].replace("f0_", "g0_"),
        ops[1].replace("f1_", "g1_")
    );
    let mut out = Vec::new();
    r.ids_from_body(None, two.as_bytes(), ColdParse::SmallOnly, &mut out)
        .expect("two cold documents under the bound");
    assert_eq!(out.len(), 2);
}

#[test]
fn limits_bound_pathological_documents() {
    let r = route();
    let deep = format!("{{{}}}", "a {".repeat(200) + &"}".repeat(200));
    let e = ids(&r, &json(&deep, serde_json::Value::Null)).expect_err("too deep");
    assert!(e.to_string().contains("limit"), "{e}");
    let wide = format!("{{ {} }}", "a: b ".repeat(5_000));
    let e = ids(&r, &json(&wide, serde_json::Value::Null)).expect_err("too many tokens");
    assert!(e.to_string().contains("limit"), "{e}");
}

/// Ids and the access of a body, read by a route with the given `id_arguments`.
fn read_with(route: &GraphqlRoute, body: &str) -> Result<(Vec<String>, Access), GraphqlError> {
    let mut out = Vec::new();
    let access = route.ids_from_body(None, body.as_bytes(), ColdParse::Here, &mut out)?;
    Ok((out.iter().map(|t| canonical(t)).collect(), access))
}

fn with_arguments(paths: &[&str]) -> GraphqlRoute {
    let paths: Vec<String> = paths.iter().map(|p| p.to_string()).collect();
    route().with_id_arguments(plan::arg_paths(&paths).expect("paths"))
}

#[test]
fn root_field_arguments_of_mutations_and_queries() {
    let r = route();
    // A literal `id`, and Relay's `input.id` as a literal, through a variable in the
    // object, and as a whole-object variable.
    let m = format!(r#"mutation {{ cancelOrder(id: "{A}") {{ id }} }}"#);
    assert_eq!(
        read_with(&r, &json(&m, serde_json::Value::Null)),
        Ok((vec![A.into()], Access::Write))
    );
    let m =
        r#"mutation M($id: ID!) { cancelOrder(input: {id: $id, reason: "x"}) { order { id } } }"#;
    let body = json(m, serde_json::json!({ "id": B }));
    assert_eq!(read_with(&r, &body), Ok((vec![B.into()], Access::Write)));
    let m = r#"mutation M($input: CancelInput!) { cancelOrder(input: $input) { order { id } } }"#;
    let body = json(
        m,
        serde_json::json!({ "input": { "id": A, "reason": "x" } }),
    );
    assert_eq!(read_with(&r, &body), Ok((vec![A.into()], Access::Write)));
    // A default inside an input object's default.
    let m = format!(
        r#"mutation M($input: CancelInput = {{id: "{B}"}}) {{ cancelOrder(input: $input) {{ ok }} }}"#
    );
    assert_eq!(
        read_with(&r, &json(&m, serde_json::Value::Null)),
        Ok((vec![B.into()], Access::Write))
    );
    // A root `order(id:)` query is a read; a nested field's `id` argument is never read.
    let q = format!(
        r#"{{ order(id: "{A}") {{ items(id: "{B}") {{ id }} }} viewer {{ order(id: "{B}") {{ id }} }} }}"#
    );
    assert_eq!(
        read_with(&r, &json(&q, serde_json::Value::Null)),
        Ok((vec![A.into()], Access::Read))
    );
    // Lists of ids and lists of input objects.
    let m = r#"mutation M($ids: [ID!]!) { cancelOrders(id: $ids) { ok } archive(input: [{id: $ids}]) { ok } }"#;
    let body = json(m, serde_json::json!({ "ids": [A, B] }));
    assert_eq!(
        read_with(&r, &body),
        Ok((vec![A.into(), B.into(), A.into(), B.into()], Access::Write))
    );
}

#[test]
fn configured_arguments_and_none() {
    let m = format!(
        r#"mutation {{ pay(orderId: "{A}", id: "{B}", payment: {{order: {{id: "{B}"}}}}) {{ ok }} }}"#
    );
    let body = json(&m, serde_json::Value::Null);
    let r = with_arguments(&["orderId", "payment.order.id"]);
    assert_eq!(
        read_with(&r, &body),
        Ok((vec![A.into(), B.into()], Access::Write))
    );
    // `[]`: as before id arguments: a mutation has no ids, a query only `node`/`nodes`.
    let none = with_arguments(&[]);
    assert_eq!(read_with(&none, &body), Ok((vec![], Access::Write)));
    let q = format!(r#"{{ order(id: "{A}") {{ id }} node(id: "{B}") {{ id }} }}"#);
    let body = json(&q, serde_json::Value::Null);
    assert_eq!(read_with(&none, &body), Ok((vec![B.into()], Access::Read)));
}

#[test]
fn batches_with_a_mutation_write_and_mutations_never_split() {
    let r = route().with_split_nodes(true);
    let q = format!(r#"query {{ node(id: "{A}") {{ id }} }}"#);
    let m = format!(r#"mutation {{ cancelOrder(id: "{B}") {{ id }} }}"#);
    let batch = format!(
        "[{},{}]",
        json(&q, serde_json::Value::Null),
        json(&m, serde_json::Value::Null)
    );
    assert_eq!(
        read_with(&r, &batch),
        Ok((vec![A.into(), B.into()], Access::Write))
    );
    // A persisted query sent by hash: its document is unknown, so it may write.
    let persisted = r#"{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab"}},"variables":{"id":"x"}}"#;
    assert_eq!(read_with(&r, persisted).map(|(_, a)| a), Ok(Access::Write));
    // `nodes(ids: $ids)` in a query splits; in a mutation it never does, even when its
    // `ids` argument is read.
    let r = with_arguments(&["ids"]).with_split_nodes(true);
    let split = |op: &str| {
        let doc = format!("{op} Q($ids: [ID!]!) {{ nodes(ids: $ids) {{ id }} }}");
        let body = json(&doc, serde_json::json!({ "ids": [A, B] }));
        r.split_of(None, body.as_bytes())
    };
    assert!(split("query").is_some());
    assert!(split("mutation").is_none());
}

/// The ids of a `GET`'s query string made of `pairs`.
fn get(route: &GraphqlRoute, pairs: &[(&str, &str)]) -> Result<Vec<String>, GraphqlError> {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        query.append_pair(k, v);
    }
    let mut out = Vec::new();
    route.ids_from_query(&query.finish(), ColdParse::Here, &mut out)?;
    Ok(out.iter().map(|t| canonical(t)).collect())
}

fn ambiguous<T: std::fmt::Debug>(read: Result<T, GraphqlError>) -> bool {
    matches!(read, Err(GraphqlError::Ambiguous(_)))
}

/// graphql-http, express-graphql and Hono execute the first of a repeated parameter, Apollo
/// Server refuses: the router refuses too, unless the values are the same.
#[test]
fn a_get_parameter_repeated_with_another_value_is_ambiguous() {
    let r = route();
    let (a, b) = (
        format!(r#"{{ node(id: "{A}") {{ id }} }}"#),
        format!(r#"{{ node(id: "{B}") {{ id }} }}"#),
    );
    assert!(ambiguous(get(&r, &[("query", &a), ("query", &b)])));
    assert_eq!(get(&r, &[("query", &a), ("query", &a)]).expect("same"), [A]);
    let doc = "query($id: ID!) { node(id: $id) { id } }";
    let (va, vb) = (format!(r#"{{"id":"{A}"}}"#), format!(r#"{{"id":"{B}"}}"#));
    for (name, first, second) in [
        ("variables", va.as_str(), vb.as_str()),
        ("operationName", "One", "Two"),
        ("extensions", "{}", r#"{"x":1}"#),
    ] {
        let mut pairs = vec![("query", doc)];
        if name != "variables" {
            pairs.push(("variables", va.as_str()));
        }
        pairs.extend([(name, first), (name, second)]);
        assert!(ambiguous(get(&r, &pairs)), "{name}");
    }
    // A member given twice in `variables`: refused, not read as the last.
    let twice = format!(r#"{{"id":"{A}","id":"{B}"}}"#);
    assert!(ambiguous(get(&r, &[("query", doc), ("variables", &twice)])));
}

/// express-graphql and Hono execute a `POST`'s URL parameters before its body's.
#[test]
fn a_post_whose_url_disagrees_with_its_body_is_ambiguous() {
    let r = route();
    let a = format!(r#"{{ node(id: "{A}") {{ id }} }}"#);
    let b = format!(r#"{{ node(id: "{B}") {{ id }} }}"#);
    let body = serde_json::json!({ "query": a }).to_string();
    let url = |pairs: &[(&str, &str)]| {
        let mut q = form_urlencoded::Serializer::new(String::new());
        for (k, v) in pairs {
            q.append_pair(k, v);
        }
        q.finish()
    };
    let agrees =
        |query: &str, ct: Option<&[u8]>, body: &str| r.url_agrees(query, ct, body.as_bytes());
    assert_eq!(agrees("", None, &body), Ok(()));
    assert_eq!(agrees("x=1&debug", None, &body), Ok(()));
    assert_eq!(agrees(&url(&[("query", &a)]), None, &body), Ok(()));
    assert!(ambiguous(agrees(&url(&[("query", &b)]), None, &body)));
    // A URL parameter the body does not have at all.
    assert!(ambiguous(agrees(
        &url(&[("operationName", "X")]),
        None,
        &body
    )));
    let vars = format!(r#"{{"id":"{A}"}}"#);
    assert!(ambiguous(agrees(
        &url(&[("variables", &vars)]),
        None,
        &body
    )));
    let with_vars = serde_json::json!({ "query": a, "variables": { "id": A } }).to_string();
    // The same JSON, written otherwise, agrees.
    let spaced = format!(r#"{{ "id" : "{A}" }}"#);
    assert_eq!(
        agrees(&url(&[("variables", &spaced)]), None, &with_vars),
        Ok(())
    );
    // A raw document is the body's `query`; a batch has nothing to agree with.
    let raw = Some(&b"application/graphql"[..]);
    assert_eq!(agrees(&url(&[("query", &a)]), raw, &a), Ok(()));
    assert!(ambiguous(agrees(&url(&[("query", &b)]), raw, &a)));
    let batch = format!("[{body}]");
    assert!(ambiguous(agrees(&url(&[("query", &a)]), None, &batch)));
}

/// `JSON.parse` reads the last of duplicate members, Go into a struct merges them: a body
/// naming a member twice (the operation's own, or in `variables`) is refused.
#[test]
fn a_member_given_twice_in_the_body_is_ambiguous() {
    let r = route();
    let (a, b) = (
        format!(r#"{{ node(id: \"{A}\") {{ id }} }}"#),
        format!(r#"{{ node(id: \"{B}\") {{ id }} }}"#),
    );
    assert!(ambiguous(ids(
        &r,
        &format!(r#"{{"query":"{a}","query":"{b}"}}"#)
    )));
    // Escaped, the same name.
    assert!(ambiguous(ids(
        &r,
        &format!(r#"{{"query":"{a}","quer\u0079":"{b}"}}"#)
    )));
    let doc = "query($id: ID!) { node(id: $id) { id } }";
    let vars = format!(r#"{{"query":"{doc}","variables":{{"id":"{A}","id":"{B}"}}}}"#);
    assert!(ambiguous(ids(&r, &vars)));
    let twice = format!(r#"{{"query":"{doc}","variables":{{"id":"{A}"}},"variables":{{}}}}"#);
    assert!(ambiguous(ids(&r, &twice)));
    let nested = format!(
        r#"{{"query":"mutation($input: I!) {{ cancelOrder(input: $input) {{ id }} }}","variables":{{"input":{{"id":"{A}","id":"{B}"}}}}}}"#
    );
    assert!(ambiguous(ids(&r, &nested)));
    assert!(ambiguous(ids(&r, &format!("[{vars}]"))));
    // Duplicates nowhere: read as before.
    let once = format!(r#"{{"query":"{doc}","variables":{{"id":"{A}","x":1}}}}"#);
    assert_eq!(ids(&r, &once).expect("read"), [A]);
}

/// A persisted query sent by hash only is read where a document passing the route's
/// `id_arguments` would be: `variables.input.id`, as `variables.id`.
#[test]
fn a_persisted_query_reads_the_id_arguments_in_its_variables() {
    let r = route();
    let hash = r#""extensions":{"persistedQuery":{"version":1,"sha256Hash":"abc"}}"#;
    let input = format!(r#"{{{hash},"variables":{{"input":{{"id":"{A}"}}}}}}"#);
    assert_eq!(
        read_with(&r, &input).expect("read"),
        (vec![A.to_owned()], Access::Write)
    );
    let both = format!(r#"{{{hash},"variables":{{"id":"{A}","input":{{"id":"{B}"}}}}}}"#);
    assert_eq!(read_with(&r, &both).expect("read").0, [A, B]);
    // `id` is read once, though it is both a persisted variable and an id argument; a
    // plain argument name is a variable's name, which `persisted_id_variables` decide.
    let id = format!(r#"{{{hash},"variables":{{"id":"{A}"}}}}"#);
    assert_eq!(read_with(&r, &id).expect("read").0, [A]);
    let named = GraphqlRoute::new(
        "/graphql".into(),
        vec!["entityRef".into()],
        "iuid".to_owned(),
        ParseLimits {
            tokens: 10_000,
            depth: 64,
        },
    );
    let both = format!(r#"{{{hash},"variables":{{"entityRef":"{A}","id":"{B}"}}}}"#);
    assert_eq!(read_with(&named, &both).expect("read").0, [A]);
    // A route whose id_arguments are others reads those.
    let custom = with_arguments(&["order.key"]);
    let order =
        format!(r#"{{{hash},"variables":{{"order":{{"key":"{B}"}},"input":{{"id":"{A}"}}}}}}"#);
    assert_eq!(read_with(&custom, &order).expect("read").0, [B]);
}

/// A JavaScript server reads a number as a double: an id variable beyond 2^53 is another id.
#[test]
fn an_integer_id_variable_beyond_2_to_the_53_is_ambiguous() {
    let r = route();
    let doc = "query($id: ID!) { node(id: $id) { id } }";
    let mut out = Vec::new();
    let big = json(doc, serde_json::json!({ "id": 9_007_199_254_740_993u64 }));
    assert!(ambiguous(r.ids_from_body(
        None,
        big.as_bytes(),
        ColdParse::Here,
        &mut out
    )));
    let safe = json(doc, serde_json::json!({ "id": 9_007_199_254_740_992u64 }));
    r.ids_from_body(None, safe.as_bytes(), ColdParse::Here, &mut out)
        .expect("safe");
    assert_eq!(out, [b"9007199254740992".to_vec()]);
}

/// With `json_numbers: exact` (servers that read 64-bit integers exactly), a big integer id
/// is read as written.
#[test]
fn an_integer_id_variable_beyond_2_to_the_53_is_read_exactly_when_the_route_says() {
    let r = route().with_numbers(crate::extract::json::Numbers::Exact);
    let doc = "query($id: ID!) { node(id: $id) { id } }";
    let mut out = Vec::new();
    let big = json(doc, serde_json::json!({ "id": 9_007_199_254_740_993u64 }));
    r.ids_from_body(None, big.as_bytes(), ColdParse::Here, &mut out)
        .expect("exact");
    assert_eq!(out, [b"9007199254740993".to_vec()]);
}
