//! A JSON value read once (docs/data-path.md, "GraphQL requests"): an object that names a
//! member twice is refused, since `JSON.parse`, Python and Go into a map read the last and
//! Go into a struct merges both. The operation's own members get this from serde's derive
//! (`duplicate field`); `variables` and `extensions`, kept as `serde_json::Value`, from
//! [`Unique`].

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;

use super::GraphqlError;

/// The start of the message of a JSON member given twice: serde's (`duplicate field`, for
/// the operation's own members) and [`Unique`]'s.
pub(super) const DUPLICATE: &str = "duplicate ";

/// A JSON value built as `serde_json::Value`, refusing an object that names a member twice:
/// `JSON.parse`, Python and Go into a map read the last, Go into a struct merges both.
pub(super) struct Unique(Value);

pub(super) fn unique<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Option::<Unique>::deserialize(d).map(|v| v.map(|u| u.0))
}

impl<'de> Deserialize<'de> for Unique {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Unique, D::Error> {
        d.deserialize_any(UniqueVisitor).map(Unique)
    }
}

struct UniqueVisitor;

impl<'de> serde::de::Visitor<'de> for UniqueVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("JSON")
    }
    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        Unique::deserialize(d).map(|u| u.0)
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Unique(item)) = seq.next_element()? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = serde_json::Map::new();
        while let Some(name) = map.next_key::<String>()? {
            let Unique(value) = map.next_value()?;
            if members.contains_key(&name) {
                return Err(serde::de::Error::custom(format_args!(
                    "{DUPLICATE}member `{name}`"
                )));
            }
            members.insert(name, value);
        }
        Ok(Value::Object(members))
    }
}

/// A JSON decoding error as a [`GraphqlError`]: a member given twice is ambiguous, the rest
/// invalid.
pub(super) fn decoding(what: &str, e: serde_json::Error) -> GraphqlError {
    let message = e.to_string();
    match message.starts_with(DUPLICATE) {
        true => GraphqlError::Ambiguous(format!(
            "{what} names a JSON member twice ({message}): GraphQL servers read the last, or \
             merge both; send it once"
        )),
        false => GraphqlError::Invalid(format!("{what}: {message}")),
    }
}

/// Decodes a JSON-valued query-string parameter (a member given twice: ambiguous).
pub(super) fn json_param(
    name: &str,
    text: Option<Cow<'_, str>>,
) -> Result<Option<Value>, GraphqlError> {
    match text {
        None => Ok(None),
        Some(t) if t.trim().is_empty() => Ok(None),
        Some(t) => {
            let mut de = serde_json::Deserializer::from_str(&t);
            Unique::deserialize(&mut de)
                .and_then(|u| de.end().map(|()| Some(u.0)))
                .map_err(|e| decoding(&format!("invalid JSON in `{name}`"), e))
        }
    }
}
