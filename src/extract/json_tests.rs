//! The JSON id reader's tests: examples, the refusals, and a proptest against a model.

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
            J::Int(n) if *n > i128::from(u64::MAX) || *n < i128::from(i64::MIN) => Expect::Refused,
            J::Int(n) if numbers == Numbers::Safe && n.unsigned_abs() > 1 << 53 => Expect::Refused,
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
