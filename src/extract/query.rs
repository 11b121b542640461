//! Ids in query parameters (docs/config.md `query:` routes): `?order_id=<id>`.
//!
//! The query string is read the way the frameworks behind the router read it, or refused
//! where they read it apart (docs/data-path.md, "Query parameters"):
//!
//! - pairs split at `&`, and at `;` too (older Python, Rails and Java servlets split at
//!   both); a pair whose `;` reading and `&` reading give the routed parameter different
//!   values (`?order_id=<a>;x=1` is `<a>;x=1` to one, `<a>` to the other) is refused;
//! - names and values percent-decoded (RFC 3986 §2.1) and `+` read as a space, as every
//!   form decoder does (WHATWG `application/x-www-form-urlencoded`, Go's `ParseQuery`,
//!   Python's `parse_qsl`, PHP, Rack): a Relay id's `+` must come as `%2B`, or the upstream
//!   reads a space;
//! - a name is the same parameter as `name[]` (PHP, Rack, `qs`), and `.` or a space in it
//!   reads as `_` (PHP's `order.id` is `order_id`);
//! - the first non-empty value is the id; the same parameter again with another value is
//!   refused, since Go and Flask read the first, PHP and Django the last.
//!
//! No allocation unless a name or value holds `%` or `+`.

use std::borrow::Cow;

use super::path::decode_segment;

/// The value of the query parameter `name` in `query` (the target after `?`, without it),
/// decoded; `None` when it is absent or empty.
///
/// Errors: the parameter is given again with another value, or read apart by `;` and `&`;
/// the message names it (the caller answers 400 `invalid-parameter`).
pub fn param<'q>(query: &'q str, name: &str) -> Result<Option<Cow<'q, [u8]>>, String> {
    let mut found: Option<Cow<'q, [u8]>> = None;
    let mut take = |value: &'q str| -> Result<(), String> {
        let value = decode_value(value);
        match &found {
            None => found = Some(value),
            Some(first) if *first == value => {}
            Some(_) => {
                return Err(format!(
                    "the `{name}` parameter is given twice with different values (or reads \
                     apart split at `;` and at `&`): give one id"
                ));
            }
        }
        Ok(())
    };
    for pair in query.split('&') {
        if let Some(value) = value_of(pair, name)? {
            take(value)?;
        }
        if memchr::memchr(b';', pair.as_bytes()).is_some() {
            for part in pair.split(';') {
                if let Some(value) = value_of(part, name)? {
                    take(value)?;
                }
            }
        }
    }
    Ok(found)
}

/// The value of `pair` (`name=value`) when its name is `name` and its value is not empty.
///
/// Errors: `name[key]=…`, which PHP and Rack read as a map holding the value.
fn value_of<'q>(pair: &'q str, name: &str) -> Result<Option<&'q str>, String> {
    let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
    if value.is_empty() {
        return Ok(None);
    }
    let key = decode_value(key);
    if same_name(&key, name.as_bytes()) {
        return Ok(Some(value));
    }
    match key.len() > name.len() + 1 && same_name(&key[..name.len()], name.as_bytes()) {
        true if key[name.len()] == b'[' => Err(format!(
            "the `{name}` parameter is sent as a map (`{name}[…]`), which some upstreams read \
             as holding an id: give one id as `{name}=`"
        )),
        _ => Ok(None),
    }
}

/// Whether the decoded parameter name `key` names `name`: `name[]` is `name`, and `.` or a
/// space reads as `_` (PHP).
fn same_name(key: &[u8], name: &[u8]) -> bool {
    let key = key.strip_suffix(b"[]").unwrap_or(key);
    key.len() == name.len()
        && key.iter().zip(name).all(|(&k, &n)| {
            k == n
                || (n == b'_' && matches!(k, b'.' | b' '))
                || (k == b'_' && matches!(n, b'.' | b' '))
        })
}

/// A form-encoded name or value decoded: `+` is a space, then percent-escapes.
fn decode_value(raw: &str) -> Cow<'_, [u8]> {
    if memchr::memchr(b'+', raw.as_bytes()).is_none() {
        return decode_segment(raw);
    }
    let spaced = raw.replace('+', " ");
    Cow::Owned(decode_segment(&spaced).into_owned())
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
        assert_eq!(text("order_id=a+b%2B", "order_id"), Ok(Some("a b+".into())));
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

    #[test]
    fn semicolons_split_pairs_too() {
        assert_eq!(text("x=1;order_id=u", "order_id"), Ok(Some("u".into())));
        // `&` reads `u;x=1`, `;` reads `u`.
        assert!(text("order_id=u;order_id=u", "order_id").is_err());
        assert!(text("order_id=u;x=1", "order_id").is_err());
        assert!(text("x=1;order_id=u&order_id=a", "order_id").is_err());
    }

    #[test]
    fn php_spellings_of_the_name_are_the_same_parameter() {
        assert_eq!(text("order_id[]=u", "order_id"), Ok(Some("u".into())));
        assert_eq!(text("order%5Fid%5B%5D=u", "order_id"), Ok(Some("u".into())));
        assert_eq!(text("order.id=u", "order_id"), Ok(Some("u".into())));
        assert_eq!(text("order+id=u", "order_id"), Ok(Some("u".into())));
        assert!(text("order_id=u&order_id[]=a", "order_id").is_err());
        assert!(text("order_id=u&order.id=a", "order_id").is_err());
        assert!(text("order_id[0]=u", "order_id").is_err());
        assert_eq!(text("order_idx[0]=u", "order_id"), Ok(None));
    }
}
