//! Ids in JSON request bodies (docs/config.md `json:` routes): the string at a JSON pointer
//! (RFC 6901), e.g. `/order_id` or `/payment/order/id`.
//!
//! The body is walked once by a `serde_json` deserializer guided by the pointer: at each
//! level only the key (or index) the pointer names is descended into, every other value is
//! skipped with `IgnoredAny`, and no value is built. The whole body is still checked to be
//! JSON (a body cut short or with trailing bytes is refused), and the id is borrowed from
//! the body unless its string holds escapes.
//!
//! One reading (docs/data-path.md, "JSON bodies"): a body the upstream's parser could read
//! otherwise is refused, not routed by the router's reading. A member on the pointer's path
//! given twice (names compared after unescaping) is [`JsonError::Ambiguous`]: JavaScript,
//! Python and Go read the last, other parsers the first or refuse. So is an integer id beyond
//! 2^53, which JavaScript and Go (into `interface{}`) read as the nearest double, unless the
//! route reads [`Numbers::Exact`].

use std::borrow::Cow;
use std::cell::Cell;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// The largest integer every JSON parser reads exactly: 2^53 (a double's 53-bit
/// significand). Above it, `9007199254740993` is `9007199254740992` to JavaScript.
pub const EXACT_IN_DOUBLE: u64 = 1 << 53;

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
    /// The upstream could read the body another way (400 `ambiguous-json`): a member on the
    /// pointer's path given twice, or an integer id a double cannot hold.
    Ambiguous(String),
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonError::NotJson(m) => write!(f, "the body is not JSON: {m}"),
            JsonError::NotAnId(m) | JsonError::Ambiguous(m) => f.write_str(m),
        }
    }
}

/// How a route reads an integer id (docs/config.md `json_numbers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Numbers {
    /// Integers up to 2^53 in magnitude, which every parser reads alike; a larger one is
    /// [`JsonError::Ambiguous`] (the default).
    #[default]
    Safe,
    /// Any 64-bit integer, read exactly: the route's upstreams read big integers exactly too
    /// (Python, Go into an integer field, Java's `long`).
    Exact,
}

impl Numbers {
    /// The `json_numbers` key of a `json:` or `graphql:` route: `safe` (also when absent) or
    /// `exact`.
    ///
    /// Errors: another value; the message names the two.
    pub fn from_key(value: Option<&str>) -> Result<Numbers, String> {
        match value {
            None | Some("safe") => Ok(Numbers::Safe),
            Some("exact") => Ok(Numbers::Exact),
            Some(other) => Err(format!("json_numbers is `safe` or `exact`, not `{other}`")),
        }
    }
}

/// The id at `pointer` in `body`: a string's content (borrowed unless escaped), or an
/// integer's decimal text (for schemes of integer ids, such as snowflakes). `None` when the
/// pointer names nothing there, or `null`: the route does not apply.
///
/// Errors: [`JsonError`].
pub fn id_at<'b>(
    body: &'b [u8],
    pointer: &Pointer,
    numbers: Numbers,
) -> Result<Option<Cow<'b, [u8]>>, JsonError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let walk = Walk {
        numbers,
        ambiguous: Cell::new(None),
    };
    let found = At(&pointer.tokens, &walk)
        .deserialize(&mut de)
        .and_then(|found| de.end().map(|()| found));
    found.map_err(|e| match walk.ambiguous.take() {
        Some(Ambiguity::Duplicate(left)) => JsonError::Ambiguous(format!(
            "the member `{}` on the path of {} is given twice: parsers disagree on which \
             one counts (JavaScript, Python and Go read the last, others the first)",
            pointer.tokens[pointer.tokens.len() - 1 - left],
            pointer.as_str()
        )),
        Some(Ambiguity::Inexact(text)) => JsonError::Ambiguous(format!(
            "the integer id {text} at {} is beyond 2^53: JavaScript and Go read it as \
             another number; send it as a string (or the route sets `json_numbers: exact`)",
            pointer.as_str()
        )),
        None if e.classify() == serde_json::error::Category::Data => JsonError::NotAnId(format!(
            "the value at {} is not an id: {e}",
            pointer.as_str()
        )),
        None => JsonError::NotJson(e.to_string()),
    })
}

/// What one walk reads, and why it stopped if the body is ambiguous.
struct Walk {
    numbers: Numbers,
    ambiguous: Cell<Option<Ambiguity>>,
}

/// Why a body could be read two ways.
enum Ambiguity {
    /// A member on the pointer's path appears twice: the step with this many tokens after
    /// its own.
    Duplicate(usize),
    /// An integer id beyond 2^53, as written.
    Inexact(String),
}

impl Walk {
    /// Stops the walk: `why` is kept for the error.
    fn stop<E: de::Error>(&self, why: Ambiguity) -> E {
        self.ambiguous.set(Some(why));
        E::custom("ambiguous")
    }
}

/// The value at the rest of the pointer.
struct At<'p>(&'p [Box<str>], &'p Walk);

impl<'de> DeserializeSeed<'de> for At<'_> {
    type Value = Option<Cow<'de, [u8]>>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        let At(tokens, walk) = self;
        match tokens.split_first() {
            None => d.deserialize_any(Leaf(walk)),
            Some((token, rest)) => d.deserialize_any(Step { token, rest, walk }),
        }
    }
}

/// One level down: the member or item `token` names, every other one skipped.
struct Step<'p> {
    token: &'p str,
    rest: &'p [Box<str>],
    walk: &'p Walk,
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
            match (named, seen) {
                // The same member again: JavaScript, Python and Go take the last, others the
                // first; the router takes neither.
                (true, true) => {
                    let left = self.rest.len();
                    return Err(self.walk.stop(Ambiguity::Duplicate(left)));
                }
                (true, false) => {
                    seen = true;
                    found = map.next_value_seed(At(self.rest, self.walk))?;
                }
                (false, _) => {
                    map.next_value::<IgnoredAny>()?;
                }
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
                true => seq
                    .next_element_seed(At(self.rest, self.walk))?
                    .map(|f| found = f),
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

/// Whether a member's name is the token, compared without building it (an escaped name is
/// unescaped first, into the deserializer's scratch buffer).
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
struct Leaf<'p>(&'p Walk);

impl Leaf<'_> {
    /// An integer's text, unless the walk reads safe numbers and a double cannot hold it.
    fn integer<E: de::Error>(&self, magnitude: u64, text: String) -> Result<Vec<u8>, E> {
        match self.0.numbers == Numbers::Safe && magnitude > EXACT_IN_DOUBLE {
            true => Err(self.0.stop(Ambiguity::Inexact(text))),
            false => Ok(text.into_bytes()),
        }
    }
}

impl<'de> Visitor<'de> for Leaf<'_> {
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
        self.integer(v, v.to_string()).map(|t| Some(Cow::Owned(t)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        self.integer(v.unsigned_abs(), v.to_string())
            .map(|t| Some(Cow::Owned(t)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
