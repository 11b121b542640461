//! Ids in query parameters (docs/config.md `query:` routes): `?order_id=<id>`.
//!
//! The query string is read as sent, pairs split at `&` and `=`, names and values
//! percent-decoded (RFC 3986 §2.1) as path segments are ([`super::path::decode_segment`]:
//! no allocation unless a `%` is there). `+` is kept as it is: a Relay id in standard base64
//! carries it, and an id never holds a space. The first non-empty occurrence is the id; the
//! same name again with another value is refused, as a fan-out cursor given twice is: which
//! one would the region read?

use std::borrow::Cow;

use super::path::decode_segment;

/// The value of the query parameter `name` in `query` (the target after `?`, without it),
/// percent-decoded; `None` when it is absent or empty.
///
/// Errors: the parameter is given again with another value; the message names it (the
/// caller answers 400 `invalid-parameter`).
pub fn param<'q>(query: &'q str, name: &str) -> Result<Option<Cow<'q, [u8]>>, String> {
    let mut found: Option<Cow<'q, [u8]>> = None;
    for pair in query.split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if value.is_empty() || *decode_segment(key) != *name.as_bytes() {
            continue;
        }
        let value = decode_segment(value);
        match &found {
            None => found = Some(value),
            Some(first) if *first == value => {}
            Some(_) => {
                return Err(format!(
                    "the `{name}` parameter is given twice with different values: give one id"
                ))
            }
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(query: &str, name: &str) -> Result<Option<String>, String> {
        param(query, name).map(|v| v.map(|v| String::from_utf8_lossy(&v).into_owned()))
    }

    #[test]
    fn first_decoded_value_of_the_name() {
        assert_eq!(text("a=1&order_id=x&b=2", "order_id"), Ok(Some("x".into())));
        assert_eq!(
            text("order%5Fid=%7Bx%7D", "order_id"),
            Ok(Some("{x}".into()))
        );
        assert_eq!(text("order_id=a+b%2B", "order_id"), Ok(Some("a+b+".into())));
        assert_eq!(
            text("order_id=&order_id=y", "order_id"),
            Ok(Some("y".into()))
        );
        assert_eq!(text("order_ids=x&order_id", "order_id"), Ok(None));
        assert_eq!(text("", "order_id"), Ok(None));
        // Borrowed when nothing is encoded.
        assert!(matches!(
            param("order_id=x", "order_id"),
            Ok(Some(Cow::Borrowed(_)))
        ));
    }

    #[test]
    fn repeated_with_another_value_is_refused() {
        assert_eq!(
            text("order_id=x&order_id=x", "order_id"),
            Ok(Some("x".into()))
        );
        assert_eq!(
            text("order_id=x&order_id=%78", "order_id"),
            Ok(Some("x".into()))
        );
        let e = text("order_id=x&order_id=y", "order_id").expect_err("twice");
        assert!(e.contains("`order_id`"), "{e}");
    }
}
