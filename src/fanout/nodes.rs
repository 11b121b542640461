//! GraphQL `split_nodes` (docs/fanout.md): one `nodes(ids: $var)` request whose ids live in several
//! regions becomes one request per region with only that region's ids, and their answers one
//! answer in the order of the request's ids.
//!
//! Both halves are pure: [`region_body`] rewrites the variable, [`merge`] puts `data.<key>`
//! back in request order, renumbers the `path` of errors under that key to the merged
//! positions, and stands in `null` plus an error naming the region for a region that failed.

use serde_json::{json, Map, Value};

/// The request body for one region: `body` (one GraphQL-over-HTTP JSON operation) with
/// `variables.<variable>` replaced by `ids`.
///
/// Errors: the body is not a JSON object (it was read before, so this is not expected).
pub fn region_body(body: &[u8], variable: &str, ids: Vec<Value>) -> Result<Vec<u8>, String> {
    let mut op: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| format!("the body is not a JSON object: {e}"))?;
    let variables = op
        .entry("variables")
        .or_insert_with(|| Value::Object(Map::new()));
    match variables {
        Value::Object(vars) => {
            vars.insert(variable.to_owned(), Value::Array(ids));
        }
        _ => return Err("variables is not an object".to_owned()),
    }
    serde_json::to_vec(&op).map_err(|e| e.to_string())
}

/// One region's part of a split request.
#[derive(Debug)]
pub struct Part {
    /// The region's name.
    pub region: String,
    /// Positions in the request's id list of the ids sent to this region, in the order sent.
    pub positions: Vec<usize>,
    /// The region's GraphQL answer, or why there is none.
    pub answer: Result<Value, String>,
    /// The failover region that answered in its place (docs/failover.md).
    pub served_by: Option<String>,
}

/// The merged answer for a request of `total` ids whose list is `data.<key>`.
pub fn merge(total: usize, key: &str, parts: Vec<Part>) -> Value {
    let mut nodes = vec![Value::Null; total];
    let mut data = Map::new();
    let mut errors = Vec::new();
    let mut failovers = Vec::new();
    for part in parts {
        if let Some(by) = &part.served_by {
            failovers.push(json!({ "region": part.region, "served_by": by, "failover": true }));
        }
        let answer = part.answer.and_then(|mut a| {
            let list = match a
                .pointer_mut(&format!("/data/{}", escape(key)))
                .map(Value::take)
            {
                Some(Value::Array(list)) => list,
                _ => return Err(format!("the answer has no list at data.{key}")),
            };
            Ok((list, a))
        });
        let (list, mut answer) = match answer {
            Ok(found) => found,
            Err(reason) => {
                for &at in &part.positions {
                    errors.push(json!({
                        "message": format!("region {} failed: {reason}", part.region),
                        "path": [key, at],
                        "extensions": { "code": "REGION_FAILED", "region": part.region },
                    }));
                }
                continue;
            }
        };
        for (node, &at) in list.into_iter().zip(&part.positions) {
            nodes[at] = node;
        }
        if let Some(Value::Object(other)) = answer.get_mut("data").map(Value::take) {
            for (k, v) in other {
                if k != key {
                    data.entry(k).or_insert(v);
                }
            }
        }
        if let Some(Value::Array(list)) = answer.get_mut("errors").map(Value::take) {
            for mut error in list {
                renumber(&mut error, key, &part.positions);
                errors.push(error);
            }
        }
    }
    data.insert(key.to_owned(), Value::Array(nodes));
    let mut out = Map::new();
    out.insert("data".to_owned(), Value::Object(data));
    if !errors.is_empty() {
        out.insert("errors".to_owned(), Value::Array(errors));
    }
    if !failovers.is_empty() {
        // A console says which ids came from a standby (they may be stale).
        out.insert("extensions".to_owned(), json!({ "regions": failovers }));
    }
    Value::Object(out)
}

/// An error whose `path` starts `[key, j, …]` gets `j` replaced by the merged position.
fn renumber(error: &mut Value, key: &str, positions: &[usize]) {
    let Some(Value::Array(path)) = error.get_mut("path") else {
        return;
    };
    if path.first().and_then(Value::as_str) != Some(key) {
        return;
    }
    if let Some(index) = path.get_mut(1) {
        if let Some(&at) = index.as_u64().and_then(|j| positions.get(j as usize)) {
            *index = json!(at);
        }
    }
}

/// A member name as an RFC 6901 pointer token.
fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_is_replaced_and_the_rest_kept() {
        let body = br#"{"query": "query($ids: [ID!]!) { nodes(ids: $ids) { id } }", "variables": {"ids": ["a", "b"], "x": 1}}"#;
        let out: Value =
            serde_json::from_slice(&region_body(body, "ids", vec![json!("b")]).expect("body"))
                .expect("json");
        assert_eq!(out["variables"], json!({"ids": ["b"], "x": 1}));
        assert!(out["query"].as_str().is_some_and(|q| q.contains("nodes")));
    }

    #[test]
    fn answers_go_back_in_request_order_with_errors_renumbered() {
        let parts = vec![
            Part {
                region: "eu".into(),
                positions: vec![0, 2],
                answer: Ok(json!({
                    "data": { "nodes": [{"id": "a"}, null] },
                    "errors": [{"message": "gone", "path": ["nodes", 1]}, {"message": "other"}],
                })),
                served_by: None,
            },
            Part {
                region: "us".into(),
                positions: vec![1],
                answer: Ok(json!({ "data": { "nodes": [{"id": "b"}] } })),
                served_by: None,
            },
            Part {
                region: "ap".into(),
                positions: vec![3],
                answer: Err("timeout".into()),
                served_by: None,
            },
        ];
        let merged = merge(4, "nodes", parts);
        assert_eq!(
            merged["data"]["nodes"],
            json!([{"id": "a"}, {"id": "b"}, null, null])
        );
        let errors = merged["errors"].as_array().expect("errors");
        assert_eq!(errors[0]["path"], json!(["nodes", 2]));
        assert_eq!(errors[1]["message"], "other");
        assert_eq!(errors[2]["path"], json!(["nodes", 3]));
        assert_eq!(errors[2]["extensions"]["region"], "ap");
    }
}
