//! One reading of a request's path and query (docs/data-path.md, "One reading of a
//! request"), on arbitrary targets: the router's reading equals the reading of the
//! frameworks behind it, or the request is refused.
//!
//! - **Path.** Go's `net/http` matches `path.Clean(url.PathUnescape(path))`; Python's
//!   frameworks match `urllib.parse.unquote(path)`, cleaned the same way. Whenever
//!   [`normalize`] accepts a path, its normal form (trailing slash trimmed), decoded once,
//!   is exactly that path: so a template matches the same route and its `{id}` segment,
//!   decoded once by its route, is the same id. Where Go refuses an escape, so does the
//!   router.
//! - **Query.** The references are Go's (`&` and `;` split, `+` a space, a pair with a bad
//!   escape dropped), Python's `parse_qsl` (`&` only) and PHP's (`&` only, `name[]`, `.`
//!   and a space for `_`), each read first-wins and last-wins. Whenever
//!   [`param`] finds an id, every reading that finds a non-empty value finds that one, and
//!   none reads a map; when it finds none, neither does any reading.
//!
//! `tests/differential.rs` runs [`path_reading`] and [`query_readings`] on a generated
//! corpus and adds Python's own `urllib.parse` to the references.

use crate::extract::normalize::{normalize, trim_trailing};
use crate::extract::query::param;

/// The parameter the query check reads.
pub const NAME: &str = "order_id";

/// The input: a target (`path?query`); the bytes after a first `\n` are ignored.
pub fn check(data: &[u8]) {
    let target = data.split(|&b| b == b'\n').next().unwrap_or_default();
    let Ok(target) = std::str::from_utf8(target) else {
        return;
    };
    // The codecs refuse a target that is not ASCII before the phases run.
    if !target.is_ascii() {
        return;
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    if path.starts_with('/') {
        check_path(path);
    }
    check_query(query);
}

/// Asserts the path property of the module doc for `path` (starting with `/`).
pub fn check_path(path: &str) {
    let go = go_path(path);
    match (path_reading(path), go) {
        (Some(router), Some(go)) => assert_eq!(router, go, "path {path:?}: router vs Go"),
        (Some(router), None) => panic!("path {path:?}: routed as {router:?}, Go refuses it"),
        (None, _) => {}
    }
}

/// The path routes match, decoded once (as an upstream decodes it), or `None` when the
/// router refuses it.
pub fn path_reading(path: &str) -> Option<Vec<u8>> {
    let normal = normalize(path).ok()?;
    // Every escape left in a normal path has two hex digits.
    unescape(trim_trailing(&normal).as_bytes(), false)
}

/// Go's reading: `path.Clean(url.PathUnescape(path))`, `None` where `PathUnescape` fails.
pub fn go_path(path: &str) -> Option<Vec<u8>> {
    let decoded = unescape(path.as_bytes(), false)?;
    Some(clean(&decoded))
}

/// Go's `path.Clean` on a rooted path: slashes merged, dot segments removed (`..` at the
/// root stays at the root), no trailing slash but on `/`.
pub fn clean(path: &[u8]) -> Vec<u8> {
    let mut out: Vec<&[u8]> = Vec::new();
    for segment in path.split(|&b| b == b'/') {
        match segment {
            b"" | b"." => {}
            b".." => {
                out.pop();
            }
            _ => out.push(segment),
        }
    }
    match out.is_empty() {
        true => b"/".to_vec(),
        false => out.iter().flat_map(|s| [&b"/"[..], s].concat()).collect(),
    }
}

/// Percent-decodes `raw` (`+` a space when `form`); `None` for a `%` without two hex
/// digits, as Go's unescaping refuses it.
pub fn unescape(raw: &[u8], form: bool) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'%' => {
                let hex = raw.get(i + 1..i + 3)?;
                let text = std::str::from_utf8(hex).ok()?;
                if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return None;
                }
                out.push(u8::from_str_radix(text, 16).ok()?);
                i += 3;
                continue;
            }
            b'+' if form => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    Some(out)
}

/// A query reading: the value of [`NAME`] it acts on, or a map (`name[key]=`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Read {
    /// No value, or an empty one: no id.
    Absent,
    /// This value.
    Value(Vec<u8>),
    /// PHP's and Rack's map `name[key]=…`.
    Map,
}

/// The references' readings of `query` for [`NAME`]: Go first and last, PHP last (and its
/// map), Python first and last.
pub fn query_readings(query: &str) -> Vec<(&'static str, Read)> {
    let pairs = |seps: &[u8]| -> Vec<(Vec<u8>, Vec<u8>)> {
        query
            .as_bytes()
            .split(|b| seps.contains(b))
            .filter(|p| !p.is_empty())
            .filter_map(|p| {
                let (k, v) = match p.iter().position(|&b| b == b'=') {
                    Some(at) => (&p[..at], &p[at + 1..]),
                    None => (p, &b""[..]),
                };
                Some((unescape(k, true)?, unescape(v, true)?))
            })
            .collect()
    };
    let first_last = |pairs: &[(Vec<u8>, Vec<u8>)], same: &dyn Fn(&[u8]) -> bool| {
        let values: Vec<&Vec<u8>> = pairs
            .iter()
            .filter(|(k, _)| same(k))
            .map(|(_, v)| v)
            .collect();
        let read = |v: Option<&&Vec<u8>>| match v {
            Some(v) if !v.is_empty() => Read::Value(v.to_vec()),
            _ => Read::Absent,
        };
        (read(values.first()), read(values.last()))
    };
    let exact = |k: &[u8]| k == NAME.as_bytes();
    let (go_first, go_last) = first_last(&pairs(b"&;"), &exact);
    let php_pairs = pairs(b"&");
    let php_key = |k: &[u8]| -> Vec<u8> {
        let k: Vec<u8> = k
            .iter()
            .map(|&b| if matches!(b, b'.' | b' ') { b'_' } else { b })
            .collect();
        k.strip_suffix(b"[]").map(<[u8]>::to_vec).unwrap_or(k)
    };
    let php_map = php_pairs.iter().any(|(k, v)| {
        let k = php_key(k);
        !v.is_empty()
            && k.len() > NAME.len() + 1
            && k.starts_with(NAME.as_bytes())
            && k[NAME.len()] == b'['
    });
    let (_, php_last) = first_last(&php_pairs, &|k| php_key(k) == NAME.as_bytes());
    vec![
        ("go first", go_first),
        ("go last", go_last),
        ("php last", if php_map { Read::Map } else { php_last }),
    ]
}

/// Asserts the query property of the module doc for `query`, against `readings` (the
/// references').
pub fn check_query_against(query: &str, readings: &[(&str, Read)]) {
    let Ok(found) = param(query, NAME) else {
        return;
    };
    // A value longer than any id is passed on undecoded, for its scheme to refuse by its
    // length (`extract::path::MAX_SEGMENT`): refused, whatever it reads as.
    if found
        .as_ref()
        .is_some_and(|id| id.len() > crate::extract::path::MAX_SEGMENT)
    {
        return;
    }
    for (who, read) in readings {
        match (&found, read) {
            (_, Read::Map) => panic!("query {query:?}: {who} reads a map, the router {found:?}"),
            (Some(id), Read::Value(v)) => {
                assert_eq!(**id, **v, "query {query:?}: router vs {who}")
            }
            (None, Read::Value(v)) => panic!(
                "query {query:?}: no id for the router, {who} reads {:?}",
                String::from_utf8_lossy(v)
            ),
            (_, Read::Absent) => {}
        }
    }
}

/// [`check_query_against`] the Rust references.
pub fn check_query(query: &str) {
    check_query_against(query, &query_readings(query));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_references_read_as_their_frameworks() {
        assert_eq!(go_path("/a//b/../c/"), Some(b"/a/c".to_vec()));
        assert_eq!(go_path("/../a"), Some(b"/a".to_vec()));
        assert_eq!(go_path("/a%2Fb"), Some(b"/a/b".to_vec()));
        assert_eq!(go_path("/a%zz"), None);
        let read = |q: &str| {
            query_readings(q)
                .into_iter()
                .map(|(_, r)| r)
                .collect::<Vec<_>>()
        };
        let v = |s: &str| Read::Value(s.as_bytes().to_vec());
        assert_eq!(read("order_id=a&order_id=b"), [v("a"), v("b"), v("b")]);
        assert_eq!(read("x=1;order_id=a"), [v("a"), v("a"), Read::Absent]);
        assert_eq!(
            read("order.id[]=a+b"),
            [Read::Absent, Read::Absent, v("a b")]
        );
        assert_eq!(
            read("order_id[k]=a"),
            [Read::Absent, Read::Absent, Read::Map]
        );
    }

    #[test]
    fn the_router_agrees_or_refuses_on_the_issues_cases() {
        for target in [
            "/v1/p%61yments",
            "/rl//ip/",
            "/rl/%2e/ip",
            "/a%2Fb",
            "/..",
            "/v1/rides?x=1;order_id=u&order_id=a",
            "/v1/rides?order_id=u&order_id[]=a",
            "/v1/rides?order_id[x]=a",
            "/v1/rides?order.id=a+b",
        ] {
            check(target.as_bytes());
        }
    }
}
