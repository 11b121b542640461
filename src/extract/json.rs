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
mod tests {
    use super::*;

    fn at(body: &str, pointer: &str) -> Result<Option<String>, JsonError> {
        read(body, pointer, Numbers::Safe)
    }

    fn read(body: &str, pointer: &str, numbers: Numbers) -> Result<Option<String>, JsonError> {
        let pointer = Pointer::parse(pointer).expect("pointer");
        id_at(body.as_bytes(), &pointer, numbers)
            .map(|found| found.map(|t| String::from_utf8_lossy(&t).into_owned()))
    }

    fn ambiguous(found: Result<Option<String>, JsonError>) -> bool {
        matches!(found, Err(JsonError::Ambiguous(_)))
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
        // Duplicates off the pointer's path do not matter.
        assert_eq!(at(r#"{"k":1,"k":2,"id":"x"}"#, "/id"), Ok(Some("x".into())));
        assert_eq!(
            at(r#"{"p":{"a":1,"a":2,"id":"x"}}"#, "/p/id"),
            Ok(Some("x".into()))
        );
    }

    /// JavaScript, Python and Go read the last of duplicate members, other parsers the first
    /// (or refuse): a duplicate on the pointer's path is refused, never read one way.
    #[test]
    fn a_member_on_the_path_given_twice_is_ambiguous() {
        assert!(ambiguous(at(r#"{"k":"1","k":"2"}"#, "/k")));
        assert!(ambiguous(at(r#"{"k":"1","k":"1"}"#, "/k")));
        // Names compared after unescaping.
        assert!(ambiguous(at(
            r#"{"order_id":"a","order\u005fid":"b"}"#,
            "/order_id"
        )));
        // A first `null` does not let the second through.
        assert!(ambiguous(at(
            r#"{"order_id":null,"order_id":"b"}"#,
            "/order_id"
        )));
        // A parent given twice, whatever the second holds.
        assert!(ambiguous(at(
            r#"{"order":{"id":"a"},"order":{"id":"b"}}"#,
            "/order/id"
        )));
        assert!(ambiguous(at(
            r#"{"order":{"id":"a"},"order":{}}"#,
            "/order/id"
        )));
        assert!(ambiguous(at(r#"[{"id":"a","id":"b"}]"#, "/0/id")));
        let Err(JsonError::Ambiguous(m)) = at(r#"{"o":{"id":1,"id":2}}"#, "/o/id") else {
            panic!("refused")
        };
        assert!(m.contains("`id`") && m.contains("/o/id"), "{m}");
    }

    /// Above 2^53, JavaScript and Go (into `interface{}`) read the nearest double: another id.
    #[test]
    fn an_integer_id_beyond_2_to_the_53_is_ambiguous_unless_exact() {
        let safe = "9007199254740992";
        assert_eq!(
            at(&format!(r#"{{"id":{safe}}}"#), "/id"),
            Ok(Some(safe.into()))
        );
        assert_eq!(
            at(&format!(r#"{{"id":-{safe}}}"#), "/id"),
            Ok(Some(format!("-{safe}")))
        );
        for big in [
            "9007199254740993",
            "-9007199254740993",
            "18446744073709551615",
        ] {
            let body = format!(r#"{{"id":{big}}}"#);
            assert!(ambiguous(at(&body, "/id")), "{big}");
            assert_eq!(read(&body, "/id", Numbers::Exact), Ok(Some(big.into())));
        }
        // Beyond 64 bits: no integer id either way.
        let huge = r#"{"id":123456789012345678901234567890}"#;
        assert!(matches!(at(huge, "/id"), Err(JsonError::NotAnId(_))));
        assert!(matches!(
            read(huge, "/id", Numbers::Exact),
            Err(JsonError::NotAnId(_))
        ));
        // A big number off the path is not read.
        assert_eq!(
            at(r#"{"n":9007199254740993,"id":"x"}"#, "/id"),
            Ok(Some("x".into()))
        );
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

    /// A JSON value as generated: objects keep their members in order, duplicates and all,
    /// and each name may be written escaped.
    #[derive(Debug, Clone)]
    enum J {
        Str(String),
        Int(i128),
        Null,
        Bool,
        Arr(Vec<J>),
        Obj(Vec<(String, bool, J)>),
    }

    impl J {
        fn render(&self, out: &mut String) {
            match self {
                J::Str(s) => out.push_str(&serde_json::to_string(s).expect("string")),
                J::Int(n) => out.push_str(&n.to_string()),
                J::Null => out.push_str("null"),
                J::Bool => out.push_str("true"),
                J::Arr(items) => {
                    out.push('[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        item.render(out);
                    }
                    out.push(']');
                }
                J::Obj(members) => {
                    out.push('{');
                    for (i, (name, escaped, value)) in members.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push('"');
                        for c in name.chars() {
                            match escaped {
                                true => out.push_str(&format!("\\u{:04x}", c as u32)),
                                false => out.push(c),
                            }
                        }
                        out.push_str("\":");
                        value.render(out);
                    }
                    out.push('}');
                }
            }
        }
    }

    /// The reading the router must give: independent of serde, from the generated tree.
    #[derive(Debug, PartialEq)]
    enum Expect {
        Nothing,
        Id(String),
        Refused,
    }

    fn expect(j: &J, tokens: &[&str], numbers: Numbers) -> Expect {
        let Some((token, rest)) = tokens.split_first() else {
            return match j {
                J::Str(s) => Expect::Id(s.trim().to_owned()),
                J::Int(n) if *n > i128::from(u64::MAX) || *n < i128::from(i64::MIN) => {
                    Expect::Refused
                }
                J::Int(n) if numbers == Numbers::Safe && n.unsigned_abs() > 1 << 53 => {
                    Expect::Refused
                }
                J::Int(n) => Expect::Id(n.to_string()),
                J::Null => Expect::Nothing,
                _ => Expect::Refused,
            };
        };
        match j {
            J::Obj(members) => {
                let mut named = members.iter().filter(|(n, _, _)| n == token);
                match (named.next(), named.next()) {
                    (Some(_), Some(_)) => Expect::Refused,
                    (Some((_, _, value)), None) => expect(value, rest, numbers),
                    (None, _) => Expect::Nothing,
                }
            }
            J::Arr(items) => match token.parse::<usize>().ok().and_then(|i| items.get(i)) {
                Some(item) => expect(item, rest, numbers),
                None => Expect::Nothing,
            },
            _ => Expect::Nothing,
        }
    }

    fn value() -> impl proptest::strategy::Strategy<Value = J> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            prop::sample::select(vec![" s1 ", "s2", "q\"3", "é4", "a\\b"])
                .prop_map(|s| J::Str(s.to_owned())),
            prop::sample::select(vec![
                0i128,
                7,
                -7,
                1 << 53,
                -(1 << 53),
                (1 << 53) + 1,
                -(1 << 53) - 1,
                i128::from(i64::MIN),
                i128::from(u64::MAX),
                i128::from(u64::MAX) + 1,
            ])
            .prop_map(J::Int),
            Just(J::Null),
            Just(J::Bool),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..3).prop_map(J::Arr),
                prop::collection::vec(
                    (
                        prop::sample::select(vec!["a", "b", "id"]),
                        any::<bool>(),
                        inner
                    ),
                    0..5
                )
                .prop_map(|members| J::Obj(
                    members
                        .into_iter()
                        .map(|(n, e, v)| (n.to_owned(), e, v))
                        .collect()
                )),
            ]
        })
    }

    proptest::proptest! {
        /// The router's reading is the tree's (a member on the path given once, an integer
        /// every parser reads alike), and then equals serde_json's last-wins reading; or it
        /// refuses, exactly where the tree is ambiguous or holds no id.
        #[test]
        fn the_reading_is_every_parsers_or_a_refusal(
            j in value(),
            pointer in proptest::sample::select(vec!["/id", "/a/id", "/a/0/id", "/b/a"]),
            exact in proptest::bool::ANY,
        ) {
            let numbers = if exact { Numbers::Exact } else { Numbers::Safe };
            let mut body = String::new();
            j.render(&mut body);
            let tokens: Vec<&str> = pointer[1..].split('/').collect();
            let want = expect(&j, &tokens, numbers);
            let got = read(&body, pointer, numbers);
            match (&want, &got) {
                (Expect::Refused, Err(JsonError::Ambiguous(_) | JsonError::NotAnId(_))) => {}
                (Expect::Nothing, Ok(None)) => {}
                (Expect::Id(id), Ok(Some(read))) if id == read => {
                    // serde_json's own value (the last of duplicates, as JavaScript's and
                    // Python's) names the same id.
                    let last: serde_json::Value = serde_json::from_str(&body).expect("JSON");
                    let at = last.pointer(pointer).expect("there");
                    let text = match at {
                        serde_json::Value::String(s) => s.trim().to_owned(),
                        other => other.to_string(),
                    };
                    proptest::prop_assert_eq!(&text, id);
                }
                _ => proptest::prop_assert!(false, "{body} at {pointer}: want {want:?}, got {got:?}"),
            }
        }
    }
}
