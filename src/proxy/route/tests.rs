//! Compiling `routes:` and extracting with them: first match wins, errors at their keys,
//! the `query:` and `json:` kinds.

use super::*;
use crate::scheme::iuid::IuidKey;
use iuid::ParseError;

pub const ID: &str = "017f22e2-79b0-802a-8144-dc0c0c07398f";
const LIMITS: ParseLimits = ParseLimits {
    tokens: 1000,
    depth: 32,
};

/// `routes:` written as YAML (its entries, `- path: …` lines), compiled.
pub fn compile(entries: &str) -> Result<Routes, SourceErrors> {
    let indented: String = entries.lines().map(|l| format!("  {l}\n")).collect();
    let text = format!("routes:\n{indented}");
    let source = Source {
        path: "router.yaml".into(),
        text,
    };
    let entries = RouteEntries::of(&source).expect("routes");
    Routes::compile(&entries, LIMITS, Path::new("t.yaml"))
}

/// Like [`compile`], for valid routes.
pub fn routes(entries: &str) -> Routes {
    compile(entries).expect("valid routes")
}

/// What the route found, parsed as the table would: the id with its route kind, the
/// parse error with its route kind, or nothing.
pub fn found(e: Extraction) -> Option<(Result<IuidKey, ParseError>, RouteKind)> {
    match e {
        Extraction::Id(token, kind) => {
            assert_eq!(token.scheme, "iuid");
            Some((crate::scheme::iuid::parse(&token.text), kind))
        }
        _ => None,
    }
}

pub fn parts(uri: &str, header: Option<&str>) -> Parts {
    let mut b = http::Request::builder().uri(uri);
    if let Some(h) = header {
        b = b.header("x-entity-id", h);
    }
    b.body(()).expect("request").into_parts().0
}

#[test]
fn path_then_header_first_match_wins() {
    let r =
        routes("- path: /v1/orders/{id}\n- path: /v1/orders/{id}/{*rest}\n- header: x-entity-id\n");
    assert_eq!(r.len(), 3);
    let want = crate::scheme::iuid::parse(ID.as_bytes()).expect("vector");
    let uri = format!("/v1/orders/{ID}/items?x=1");
    assert_eq!(
        found(r.extract(&parts(&uri, None))),
        Some((Ok(want), RouteKind::Path))
    );
    assert_eq!(
        found(r.extract(&parts("/other", Some(ID)))),
        Some((Ok(want), RouteKind::Header))
    );
    assert_eq!(r.extract(&parts("/other", None)), Extraction::NoId);
    assert!(matches!(
        found(r.extract(&parts("/v1/orders/nope", Some(ID)))),
        Some((Err(_), RouteKind::Path))
    ));
}

#[test]
fn bad_routes_are_reported_at_their_keys() {
    let errors = compile(
        "- path: /x/{key}\n- header: bad header\n- { path: \"/a/{id}\", header: x }\n- { path: \"/b/{id}\", order: asc }\n- { path: \"/c/{id}\", nope: 1 }\n- {}\n- grpc: /a.B/C\n- { path: \"/d/{id}\", scheme: '' }\n- cursor: { nope: 1 }\n- cursor: { param: p }\n",
    )
    .expect_err("invalid")
    .0;
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let want = [
        "router.yaml:2:11: routes[0].path: path template `/x/{key}` has no {id}",
        "router.yaml:3:13: routes[1].header: `bad header` is not a header name",
        "router.yaml:4:32: routes[2].header: a route has exactly one of path, header, graphql, fanout, grpc, query, json",
        "router.yaml:5:31: routes[3].order: order goes with a fanout route",
        "router.yaml:6:24: routes[4].nope: unknown field `nope`, expected one of `path`, `scheme`, `header`, `graphql`, `persisted_id_variables`, `split_nodes`, `id_arguments`, `json_numbers`, `fanout`, `items`, `id_field`, `order`, `limit`, `cursor`, `timeout_ms`, `on_region_error`, `grpc`, `field`, `reads`, `query`, `json`",
        "router.yaml:7:5: routes[5]: a route has exactly one of path, header, graphql, fanout, grpc, query, json",
        "router.yaml:8:11: routes[6].grpc: a grpc route needs `field:`, the field holding the id",
        "router.yaml:9:32: routes[7].scheme: the scheme name is empty",
        "router.yaml:10:15: routes[8].cursor: unknown field `nope`, expected `param`",
        "router.yaml:11:5: routes[9]: a route has exactly one of path, header, graphql, fanout, grpc, query, json",
    ];
    assert_eq!(lines, want);
}

#[test]
fn query_and_json_routes_take_a_path() {
    let r = routes(
        "- { path: /v1/rides, query: order_id }\n- { path: \"/v1/shops/{shop}/payments\", json: /order/id }\n- { path: /v1/payments, json: /order_id }\n- { path: /v1/payments, json: /shop_id }\n- header: x-entity-id\n",
    );
    assert_eq!(r.len(), 5);
    let want = crate::scheme::iuid::parse(ID.as_bytes()).expect("vector");
    let found_in = |path: &str, query: &str| found(r.extract_head(path, query, |_| None));
    assert_eq!(
        found_in("/v1/rides", &format!("a=1&order_id={ID}")),
        Some((Ok(want), RouteKind::Query))
    );
    assert_eq!(found_in("/v1/rides", "a=1"), None);
    assert!(matches!(
        r.extract_head("/v1/rides", &format!("order_id={ID}&order_id=x"), |_| None),
        Extraction::Invalid(_, RouteKind::Query)
    ));
    let Extraction::Pending(shop) = r.extract_head("/v1/shops/7/payments", "", |_| None) else {
        panic!("a json route is pending")
    };
    assert_eq!(shop.index(), 1);
    let Extraction::Pending(first) = r.extract_head("/v1/payments", "", |_| None) else {
        panic!("a json route is pending")
    };
    assert_eq!(first.index(), 2);
    // Nothing at the first pointer: the second json route reads the same body, then the
    // header route applies.
    let body = format!(r#"{{"shop_id":"{ID}"}}"#);
    let after = |body: &str, header: Option<&'static [u8]>| {
        r.after_body(
            first,
            "/v1/payments",
            "",
            |_| header,
            None,
            Some(body.as_bytes()),
        )
        .map(found)
    };
    assert_eq!(
        after(&body, None).expect("json"),
        Some((Ok(want), RouteKind::Json))
    );
    assert_eq!(
        after("{}", Some(ID.as_bytes())).expect("json"),
        Some((Ok(want), RouteKind::Header))
    );
    assert!(after("{", None).is_err());
}

#[test]
fn query_and_json_routes_are_checked() {
    let errors = compile(
        "- { path: v1, query: a }\n- { path: /v1, query: '' }\n- { path: /v1, json: a }\n- { json: /a }\n- { path: /v1, graphql: /g }\n- { graphql: /g, id_arguments: [id, 'input.'] }\n- { path: /v1, json: /a, json_numbers: big }\n- { path: \"/v1/{id}\", json_numbers: exact }\n",
    )
    .expect_err("invalid")
    .0;
    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let want = [
        "router.yaml:2:13: routes[0].path: path `v1` must start with /",
        "router.yaml:3:25: routes[1].query: the parameter name is empty",
        "router.yaml:4:24: routes[2].json: `a` is not a JSON pointer: it starts with / (RFC 6901), e.g. `/order_id`",
        "router.yaml:5:5: routes[3]: missing field `path`",
        "router.yaml:6:27: routes[4].graphql: a route has exactly one of path, header, graphql, fanout, grpc, query, json",
        "router.yaml:7:34: routes[5].id_arguments: `input.` is not an argument path: GraphQL names joined by dots, e.g. `input.id`",
        "router.yaml:8:42: routes[6].json_numbers: json_numbers is `safe` or `exact`, not `big`",
        "router.yaml:9:39: routes[7].json_numbers: json_numbers goes with a graphql or json route",
    ];
    assert_eq!(lines, want);
}
