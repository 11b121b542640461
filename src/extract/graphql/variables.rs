//! Ids in a GraphQL request's `variables`: at an argument path through objects and lists,
//! each a string or an integer (docs/config.md `id_arguments`, `json_numbers`).

use serde_json::Value;

use super::GraphqlError;
use crate::extract::json::Numbers;

/// The ids at `path` inside a variable's value: through objects by key and lists item by
/// item; a key that is absent holds no id.
pub(super) fn push_at(
    value: &Value,
    path: &[Box<str>],
    numbers: Numbers,
    out: &mut Vec<Vec<u8>>,
) -> Result<(), GraphqlError> {
    let Some((key, rest)) = path.split_first() else {
        return push_value(value, numbers, out);
    };
    match value {
        Value::Object(map) => match map.get(&**key) {
            Some(inner) => push_at(inner, rest, numbers, out),
            None => Ok(()),
        },
        Value::Array(items) => items
            .iter()
            .try_for_each(|v| push_at(v, path, numbers, out)),
        _ => Ok(()),
    }
}

/// A variable's value: an id (a string, or a number for schemes of integer ids such as
/// snowflakes; beyond 2^53 only with [`Numbers::Exact`]), or a list of them
/// (`nodes(ids: $ids)`).
pub(super) fn push_value(
    value: &Value,
    numbers: Numbers,
    out: &mut Vec<Vec<u8>>,
) -> Result<(), GraphqlError> {
    let text = match value {
        Value::String(s) => s.trim().as_bytes().to_vec(),
        // GraphQL servers in JavaScript read a number as a double: above 2^53, another id.
        Value::Number(n)
            if numbers == Numbers::Safe
                && n.as_u64()
                    .or_else(|| n.as_i64().map(i64::unsigned_abs))
                    .is_some_and(|m| m > crate::extract::json::EXACT_IN_DOUBLE) =>
        {
            return Err(GraphqlError::Ambiguous(format!(
                "the integer id {n} is beyond 2^53: GraphQL servers in JavaScript read it as \
                 another number; send it as a string (or the route sets `json_numbers: exact`)"
            )))
        }
        Value::Number(n) => n.to_string().into_bytes(),
        Value::Array(items) => return items.iter().try_for_each(|v| push_value(v, numbers, out)),
        Value::Null => return Ok(()),
        other => {
            return Err(GraphqlError::Invalid(format!(
                "a node id variable holds {other}, not an id"
            )))
        }
    };
    out.push(text);
    Ok(())
}
