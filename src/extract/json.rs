//! Ids in JSON request bodies (docs/config.md `json:` routes): the string at a JSON pointer
//! (RFC 6901), e.g. `/order_id` or `/payment/order/id`.
//!
//! The body is walked once by a `serde_json` deserializer guided by the pointer: at each
//! level only the key (or index) the pointer names is descended into, every other value is
//! skipped with `IgnoredAny`, and no value is built. The whole body is still checked to be
//! JSON (a body cut short or with trailing bytes is refused), and the id is borrowed from
//! the body unless its string holds escapes.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A JSON pointer (RFC 6901) split into its reference tokens, `~1` and `~0` unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pointer {
    tokens: Box<[Box<str>]>,
    text: Box<str>,
}

impl Pointer {
    /// Parses a pointer written in the config.
    ///
    /// Errors: it does not start with `/` (the whole document is never an id), or a `~` is
    /// not followed by `0` or `1` (RFC 6901 §3).
    pub fn parse(text: &str) -> Result<Pointer, String> {
        let Some(rest) = text.strip_prefix('/') else {
            return Err(format!(
                "`{text}` is not a JSON pointer: it starts with / (RFC 6901), e.g. `/order_id`"
            ));
        };
        let mut tokens = Vec::new();
        for raw in rest.split('/') {
            let mut token = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                match (c, c == '~') {
                    (_, false) => token.push(c),
                    (_, true) => match chars.next() {
                        Some('0') => token.push('~'),
                        Some('1') => token.push('/'),
                        _ => {
                            return Err(format!(
                            "`{text}`: `~` is followed by 0 or 1 in a JSON pointer (RFC 6901 §3)"
                        ))
                        }
                    },
                }
            }
            tokens.push(token.into_boxed_str());
        }
        Ok(Pointer {
            tokens: tokens.into_boxed_slice(),
            text: text.into(),
        })
    }

    /// The pointer as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

/// Why a body yields no id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonError {
    /// The body is not JSON (400 `invalid-json`): the parser's message with its position.
    NotJson(String),
    /// The value at the pointer is neither a string nor an integer (400 `invalid-json`).
    NotAnId(String),
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonError::NotJson(m) => write!(f, "the body is not JSON: {m}"),
            JsonError::NotAnId(m) => f.write_str(m),
        }
    }
}

/// The id at `pointer` in `body`: a string's content (borrowed unless escaped), or an
/// integer's decimal text (for schemes of integer ids, such as snowflakes). `None` when the
/// pointer names nothing there, or `null`: the route does not apply.
///
/// Errors: [`JsonError`].
pub fn id_at<'b>(body: &'b [u8], pointer: &Pointer) -> Result<Option<Cow<'b, [u8]>>, JsonError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let found = At(&pointer.tokens)
        .deserialize(&mut de)
        .and_then(|found| de.end().map(|()| found));
    found.map_err(|e| match e.classify() {
        serde_json::error::Category::Data => JsonError::NotAnId(format!(
            "the value at {} is not an id: {e}",
            pointer.as_str()
        )),
        _ => JsonError::NotJson(e.to_string()),
    })
}

/// The value at the rest of the pointer.
struct At<'p>(&'p [Box<str>]);

impl<'de> DeserializeSeed<'de> for At<'_> {
    type Value = Option<Cow<'de, [u8]>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        match self.0.split_first() {
            None => d.deserialize_any(Leaf),
            Some((token, rest)) => d.deserialize_any(Step { token, rest }),
        }
    }
}

/// One level down: the member or item `token` names, every other one skipped.
struct Step<'p> {
    token: &'p str,
    rest: &'p [Box<str>],
}

impl<'de> Visitor<'de> for Step<'_> {
    type Value = Option<Cow<'de, [u8]>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("JSON")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        let mut seen = false;
        while let Some(named) = map.next_key_seed(KeyIs(self.token))? {
            // The first of duplicate members counts; the rest are read and skipped.
            if named && !seen {
                seen = true;
                found = map.next_value_seed(At(self.rest))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        // RFC 6901 §4: an index is `0` or digits without a leading zero.
        let index = match self.token.as_bytes() {
            [b'0'] => Some(0),
            [b'1'..=b'9', ..] => self.token.parse::<usize>().ok(),
            _ => None,
        };
        let mut found = None;
        let mut at = 0usize;
        loop {
            let more = match Some(at) == index {
                true => seq.next_element_seed(At(self.rest))?.map(|f| found = f),
                false => seq.next_element::<IgnoredAny>()?.map(|_| ()),
            };
            if more.is_none() {
                return Ok(found);
            }
            at += 1;
        }
    }

    // A scalar where the pointer goes on: nothing there.
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

/// Whether a member's name is the token, compared without building it.
struct KeyIs<'p>(&'p str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        Ok(v == self.0)
    }
}

/// The value the pointer names: an id, or nothing (`null`).
struct Leaf;

impl<'de> Visitor<'de> for Leaf {
    type Value = Option<Cow<'de, [u8]>>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an id (a string or an integer)")
    }

    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(v.trim().as_bytes())))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.trim().as_bytes().to_vec())))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string().into_bytes())))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string().into_bytes())))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(body: &str, pointer: &str) -> Result<Option<String>, JsonError> {
        let pointer = Pointer::parse(pointer).expect("pointer");
        id_at(body.as_bytes(), &pointer)
            .map(|found| found.map(|t| String::from_utf8_lossy(&t).into_owned()))
    }

    #[test]
    fn pointers_walk_objects_and_arrays() {
        let body = r#"{"a":1,"order_id":"x","p":{"o":[{"id":"y"},{"id":"z"}]},"a/b":{"~":"w"}}"#;
        assert_eq!(at(body, "/order_id"), Ok(Some("x".into())));
        assert_eq!(at(body, "/p/o/1/id"), Ok(Some("z".into())));
        assert_eq!(at(body, "/a~1b/~0"), Ok(Some("w".into())));
        assert_eq!(at(body, "/a"), Ok(Some("1".into())));
        assert_eq!(at(body, "/nope"), Ok(None));
        assert_eq!(at(body, "/p/o/2/id"), Ok(None));
        assert_eq!(at(body, "/p/o/01/id"), Ok(None));
        assert_eq!(at(body, "/order_id/deeper"), Ok(None));
        assert_eq!(at(r#"{"order_id":null}"#, "/order_id"), Ok(None));
        assert_eq!(
            at(r#"{"order_id":"\u0078"}"#, "/order_id"),
            Ok(Some("x".into()))
        );
        // The first of duplicate members.
        assert_eq!(at(r#"{"k":"1","k":"2"}"#, "/k"), Ok(Some("1".into())));
    }

    #[test]
    fn a_body_that_is_not_json_or_a_value_that_is_no_id_is_refused() {
        assert!(matches!(
            at(r#"{"order_id":"x""#, "/order_id"),
            Err(JsonError::NotJson(_))
        ));
        assert!(matches!(
            at(r#"{"order_id":"x"} x"#, "/order_id"),
            Err(JsonError::NotJson(_))
        ));
        assert!(matches!(
            at("order_id=x", "/order_id"),
            Err(JsonError::NotJson(_))
        ));
        assert!(matches!(
            at(r#"{"order_id":{"a":1}}"#, "/order_id"),
            Err(JsonError::NotAnId(_))
        ));
        assert!(matches!(
            at(r#"{"order_id":1.5}"#, "/order_id"),
            Err(JsonError::NotAnId(_))
        ));
        // Malformed after the id: still refused.
        assert!(matches!(
            at(r#"{"order_id":"x", nope}"#, "/order_id"),
            Err(JsonError::NotJson(_))
        ));
    }

    #[test]
    fn pointers_are_checked() {
        assert!(Pointer::parse("order_id").is_err());
        assert!(Pointer::parse("/a~2").is_err());
        assert!(Pointer::parse("").is_err());
        assert_eq!(
            Pointer::parse("/a~1b").expect("ok").tokens[0].as_ref(),
            "a/b"
        );
    }
}
