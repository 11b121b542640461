//! Which kind an entry of `routes:` is, from its keys, and the errors about keys that name
//! the kinds: an entry has exactly one kind key, and a key of another kind is named as such
//! (`order goes with a fanout route`) rather than as unknown.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};

use crate::extract::RouteKind;
use crate::source::{Seg, Source, SourceError};

/// Why an entry has no kind: the error, and the kind its other keys imply, if only one kind
/// takes them all (`cursor:` without `fanout:`), so that the caller can report what is wrong
/// inside them first.
pub(super) struct NoKind {
    pub error: SourceError,
    pub implied: Option<RouteKind>,
}

/// The kind of the entry at `at`: the one kind key it has. `keys_of` gives each kind's keys.
///
/// Errors: the entry is not a mapping, has a key no kind takes (listing every route key, as
/// serde does for one struct), has no kind key or several, or has a key that only another
/// kind takes.
pub(super) fn kind_of(
    source: &Source,
    at: &[Seg],
    keys_of: fn(RouteKind) -> &'static [&'static str],
) -> Result<RouteKind, NoKind> {
    let fail = |error| NoKind {
        error,
        implied: None,
    };
    let keys: EntryKeys = source.parse_at(at).map_err(fail)?;
    let key = |k: &str| [at, &[Seg::Key(k.to_owned())]].concat();
    let mut every: Vec<&str> = Vec::new();
    for k in RouteKind::ALL.into_iter().flat_map(keys_of) {
        if !every.contains(k) {
            every.push(k);
        }
    }
    if let Some(unknown) = keys.0.iter().find(|k| !every.contains(&k.as_str())) {
        let expected: Vec<String> = every.iter().map(|k| format!("`{k}`")).collect();
        let message = format!(
            "unknown field `{unknown}`, expected one of {}",
            expected.join(", ")
        );
        let at = [at, &[Seg::KeyName(unknown.clone(), 0)]].concat();
        return Err(fail(error_at(source, &at, message)));
    }
    let named: Vec<RouteKind> = RouteKind::ALL
        .into_iter()
        .filter(|kind| keys.0.iter().any(|k| k == kind.as_str()))
        .collect();
    // A kind's name that another named kind takes as one of its keys is that key there:
    // `{ path: /v1/rides, query: order_id }` is a `query` route with a `path`.
    let present: Vec<RouteKind> = named
        .iter()
        .copied()
        .filter(|kind| {
            !named
                .iter()
                .any(|other| other != kind && keys_of(*other).contains(&kind.as_str()))
        })
        .collect();
    let [kind] = present[..] else {
        // At the second kind key, or at the entry when it has none.
        let names: Vec<&str> = RouteKind::ALL.iter().map(|k| k.as_str()).collect();
        let message = format!("a route has exactly one of {}", names.join(", "));
        let at = match present.get(1) {
            Some(second) => key(second.as_str()),
            None => at.to_vec(),
        };
        let mut takers = RouteKind::ALL.into_iter().filter(|kind| {
            let own = keys_of(*kind);
            keys.0.iter().all(|k| own.contains(&k.as_str()))
        });
        let implied = match (present.is_empty(), takers.next(), takers.next()) {
            (true, Some(kind), None) => Some(kind),
            _ => None,
        };
        return Err(NoKind {
            error: error_at(source, &at, message),
            implied,
        });
    };
    let own = keys_of(kind);
    for k in keys.0.iter().filter(|k| !own.contains(&k.as_str())) {
        let others: Vec<&str> = RouteKind::ALL
            .into_iter()
            .filter(|other| keys_of(*other).contains(&k.as_str()))
            .map(RouteKind::as_str)
            .collect();
        if !others.is_empty() {
            let message = format!("{k} goes with a {} route", others.join(" or "));
            return Err(fail(error_at(source, &key(k), message)));
        }
    }
    Ok(kind)
}

/// An error at the node `at`, its message led by the node's path (`routes[0].field: …`) as
/// serde's are.
pub(super) fn error_at(source: &Source, at: &[Seg], message: impl fmt::Display) -> SourceError {
    let mut path = String::new();
    for seg in at {
        match seg {
            Seg::Key(k) | Seg::KeyName(k, _) if path.is_empty() => path.push_str(k),
            Seg::Key(k) | Seg::KeyName(k, _) => {
                path.push('.');
                path.push_str(k);
            }
            Seg::Index(i) => path.push_str(&format!("[{i}]")),
        }
    }
    source.error_at(at, format!("{path}: {message}"))
}

/// The keys of a mapping, as text, in order.
struct EntryKeys(Vec<String>);

impl<'de> Deserialize<'de> for EntryKeys {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<EntryKeys, D::Error> {
        d.deserialize_map(KeysVisitor).map(EntryKeys)
    }
}

struct KeysVisitor;

impl<'de> Visitor<'de> for KeysVisitor {
    type Value = Vec<String>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let names: Vec<&str> = RouteKind::ALL.iter().map(|k| k.as_str()).collect();
        write!(f, "a route: a mapping with one of {}", names.join(", "))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<String>, A::Error> {
        let mut keys = Vec::new();
        while let Some(key) = map.next_key::<serde_yaml::Value>()? {
            map.next_value::<IgnoredAny>()?;
            keys.push(match key {
                serde_yaml::Value::String(s) => s,
                other => serde_yaml::to_string(&other)
                    .unwrap_or_default()
                    .trim()
                    .to_owned(),
            });
        }
        Ok(keys)
    }
}

/// The field names a derived `Deserialize` struct accepts: what serde hands to
/// `deserialize_struct`, caught by a deserializer that only records them. So a kind's keys
/// are written once, in its struct.
pub(super) fn fields_of<T: de::DeserializeOwned>() -> &'static [&'static str] {
    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldsProbe(&mut fields));
    fields
}

struct FieldsProbe<'a>(&'a mut &'static [&'static str]);

impl<'de> Deserializer<'de> for FieldsProbe<'_> {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("only structs are probed"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        *self.0 = fields;
        Err(de::Error::custom("probed"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize)]
    #[allow(dead_code)]
    struct Two {
        a: u8,
        #[serde(rename = "bee")]
        b: Option<String>,
    }

    #[test]
    fn a_structs_fields_are_read_from_serde() {
        assert_eq!(fields_of::<Two>(), ["a", "bee"]);
    }
}
