//! The one reading of a request's path that routes, rate-limit scopes and `routes:` scopes
//! match (docs/data-path.md, "Paths").
//!
//! Upstream frameworks match the *decoded, cleaned* path: Go's `net/http` (`path.Clean`),
//! Flask, Django and Spring read `/v1/p%61yments` as `/v1/payments`, and Go's mux, nginx
//! (`merge_slashes`) and Envoy (`normalize_path`, `merge_slashes`) fold `//` and dot
//! segments. A router that matched the raw bytes would let a client pick another route, or
//! dodge a rate limit, by spelling the same path another way. So every path is read once,
//! normalised as RFC 3986 §6.2.2 says, before anything matches it:
//!
//! 1. percent-encoded *unreserved* characters decoded (`%61` → `a`, `%2E` → `.`; RFC 3986
//!    §2.3, §6.2.2.2); every other escape kept as sent, its hex case too;
//! 2. repeated slashes merged (`//` → `/`), as nginx and Go do, before
//! 3. dot segments removed (RFC 3986 §5.2.4: `/a/./b` → `/a/b`, `/a/b/../c` → `/a/c`).
//!
//! Refused, because upstreams read them differently from one another: an encoded slash or
//! backslash (`%2F`, `%5C`: one framework decodes it into a separator, another keeps it in a
//! segment; Envoy's `path_with_escaped_slashes_action: REJECT_REQUEST`), a `%` not followed
//! by two hex digits (no decoder agrees on it), and a `..` that climbs above the root.
//!
//! A trailing slash is matched as if absent ([`trim_trailing`]): Express and Spring 5 match
//! `/a/` for `/a`, Go's mux and Flask 404 it, so routing both alike never routes by a path
//! an upstream reads as another.
//!
//! The hot path: a path with no `%`, no `//` and no `.` right after a `/` is returned as it
//! is, borrowed, after one scan of its bytes, 16 at a time (`plain`: 73 instructions for
//! a 47-byte REST path, where a byte loop took 470, callgrind).

use std::borrow::Cow;

use super::path::hex;

/// `limits.escaped_slashes`: what an encoded slash or backslash in a path is (Envoy's
/// `path_with_escaped_slashes_action`, docs/data-path.md "Paths").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EscapedSlashes {
    /// 400 `ambiguous-path`: one upstream reads it as a separator, another as a byte.
    #[default]
    Reject,
    /// Kept as sent inside its segment, as any other reserved escape: for ids that carry
    /// `/` (a Relay id in the standard base64 alphabet) where every upstream keeps it.
    Keep,
}

/// Why a path cannot be read one way (400 `ambiguous-path`, docs/errors.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathError {
    /// `%2F` or `%5C` (either case): a separator to some upstreams, a byte to others.
    EncodedSlash,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// A `..` segment above the root (`/../a`).
    AboveRoot,
}

impl PathError {
    /// For the 400's detail.
    pub fn describe(self) -> &'static str {
        match self {
            PathError::EncodedSlash => {
                "the path holds an encoded slash or backslash (%2F, %5C), which upstreams read \
                 either as a separator or as a byte: send the segments unencoded, or encode the \
                 id's slashes in the id itself"
            }
            PathError::BadEscape => "the path holds a % not followed by two hex digits",
            PathError::AboveRoot => "the path's dot segments climb above the root (/../)",
        }
    }
}

/// The path that routes match: `path` normalised (see the module doc), borrowed when it
/// already is. Input: a request's path as sent (before `?`), ASCII. A path that does not
/// start with `/` (`*`, an authority) is returned as it is.
///
/// Errors: [`PathError`].
pub fn normalize(path: &str) -> Result<Cow<'_, str>, PathError> {
    normalize_with(path, EscapedSlashes::Reject)
}

/// [`normalize`], with encoded slashes as `slashes` says.
///
/// Errors: [`PathError`].
pub fn normalize_with(path: &str, slashes: EscapedSlashes) -> Result<Cow<'_, str>, PathError> {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') || plain(bytes) || is_normal(bytes, slashes)? {
        return Ok(Cow::Borrowed(path));
    }
    let decoded = decode_unreserved(bytes)?;
    let mut out: Vec<&[u8]> = Vec::new();
    let mut segments = decoded.split(|&b| b == b'/').skip(1).peekable();
    let mut trailing = false;
    while let Some(segment) = segments.next() {
        let last = segments.peek().is_none();
        match segment {
            // Merged: `//` is one separator (an empty segment is never kept), but an empty
            // last segment is the trailing slash.
            b"" => trailing = last,
            b"." => trailing = last,
            b".." => {
                if out.pop().is_none() {
                    return Err(PathError::AboveRoot);
                }
                trailing = last;
            }
            _ => {
                out.push(segment);
                trailing = false;
            }
        }
    }
    let mut normal = String::with_capacity(path.len());
    for segment in &out {
        normal.push('/');
        // ASCII in, and only escapes of ASCII unreserved bytes decoded.
        normal.push_str(std::str::from_utf8(segment).unwrap_or(""));
    }
    if out.is_empty() || trailing {
        normal.push('/');
    }
    Ok(Cow::Owned(normal))
}

/// Whether a route's or a rule's path (or `matchit` template) can match: it must be in
/// the normal form requests are matched in, without a trailing `/` (the root aside).
///
/// Errors: the message, naming the form it would have to be written in.
pub fn check_template(path: &str) -> Result<(), String> {
    let normal = match normalize(path) {
        Ok(normal) => normal,
        Err(e) => return Err(format!("`{path}` never matches: {}", e.describe())),
    };
    let matched = trim_trailing(&normal);
    match matched == path {
        true => Ok(()),
        false => Err(format!(
            "`{path}` never matches: requests are matched by their normalised path \
             (docs/data-path.md, Paths); write `{matched}`"
        )),
    }
}

/// `path` without one trailing `/` (the root stays `/`): how routes match a normalised path.
pub fn trim_trailing(path: &str) -> &str {
    match path.len() > 1 && path.ends_with('/') {
        true => &path[..path.len() - 1],
        false => path,
    }
}

/// Whether `path` holds no `%` and no `/` followed by `/` or `.`: then it is normal as it
/// is. Most paths are; the others are looked at closely by [`is_normal`].
fn plain(path: &[u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if path.len() >= 16 {
            return plain_sse2(path);
        }
        // A short path in one zero-padded block: a zero byte is none of `%`, `/`, `.`.
        let mut block = [0u8; 16];
        block[..path.len()].copy_from_slice(path);
        plain_sse2(&block)
    }
    #[cfg(not(target_arch = "x86_64"))]
    plain_bytes(path)
}

/// [`plain`] a byte at a time.
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
fn plain_bytes(path: &[u8]) -> bool {
    let mut after_slash = false;
    for &b in path {
        if b == b'%' || after_slash && matches!(b, b'/' | b'.') {
            return false;
        }
        after_slash = b == b'/';
    }
    true
}

/// [`plain`] 16 bytes at a time (`path` at least 16 long): per block, the masks of `%`, `/`
/// and `.`; a `/` whose next byte is `/` or `.` is `slash & (next >> 1)`, and across blocks
/// the last block's final `/` carries. The tail is the last 16 bytes, overlapping.
#[cfg(target_arch = "x86_64")]
fn plain_sse2(path: &[u8]) -> bool {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8, _mm_set1_epi8};
    let block = |at: usize| -> (u32, u32, u32) {
        debug_assert!(at + 16 <= path.len());
        // SAFETY: SSE2 is part of every x86_64 CPU; the 16 bytes at `at` lie inside `path`
        // (every caller below keeps `at + 16 <= path.len()`), read unaligned.
        unsafe {
            let v = _mm_loadu_si128(path.as_ptr().add(at).cast());
            let mask = |c: u8| _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(c as i8))) as u32;
            (mask(b'%'), mask(b'/'), mask(b'.'))
        }
    };
    let (mut at, mut carry) = (0, 0);
    while at + 16 <= path.len() {
        let (percent, slash, dot) = block(at);
        let next = slash | dot;
        if percent != 0 || slash & (next >> 1) != 0 || carry & next != 0 {
            return false;
        }
        carry = slash >> 15;
        at += 16;
    }
    if at < path.len() {
        // The pair across the last full block and the tail lies inside this window.
        let (percent, slash, dot) = block(path.len() - 16);
        if percent != 0 || slash & ((slash | dot) >> 1) != 0 {
            return false;
        }
    }
    true
}

/// Whether `path` (starting with `/`) is normal already: one scan. `Err` for an escape
/// that no reading can take.
fn is_normal(path: &[u8], slashes: EscapedSlashes) -> Result<bool, PathError> {
    let mut normal = true;
    let mut i = 0;
    while i < path.len() {
        match path[i] {
            b'%' => {
                let (Some(hi), Some(lo)) = (path.get(i + 1), path.get(i + 2)) else {
                    return Err(PathError::BadEscape);
                };
                let byte = match (hex(hi), hex(lo)) {
                    (Some(hi), Some(lo)) => (hi << 4) | lo,
                    _ => return Err(PathError::BadEscape),
                };
                if matches!(byte, b'/' | b'\\') && slashes == EscapedSlashes::Reject {
                    return Err(PathError::EncodedSlash);
                }
                normal &= !is_unreserved(byte);
                i += 3;
                continue;
            }
            b'/' => match path.get(i + 1) {
                Some(b'/') => normal = false,
                Some(b'.') => {
                    let rest = &path[i + 2..];
                    let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
                    normal &= !matches!(&rest[..end], b"" | b".");
                }
                _ => {}
            },
            _ => {}
        }
        i += 1;
    }
    Ok(normal)
}

/// `path` with its escapes of unreserved characters decoded (the others kept as sent).
fn decode_unreserved(path: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(path.len());
    let mut i = 0;
    while i < path.len() {
        if path[i] == b'%' {
            let byte = match (path.get(i + 1).and_then(hex), path.get(i + 2).and_then(hex)) {
                (Some(hi), Some(lo)) => (hi << 4) | lo,
                _ => return Err(PathError::BadEscape),
            };
            match is_unreserved(byte) {
                true => out.push(byte),
                false => out.extend_from_slice(&path[i..i + 3]),
            }
            i += 3;
        } else {
            out.push(path[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// RFC 3986 §2.3: `ALPHA / DIGIT / "-" / "." / "_" / "~"`.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(path: &str) -> Result<String, PathError> {
        normalize(path).map(Cow::into_owned)
    }

    #[test]
    fn a_normal_path_is_borrowed() {
        for path in [
            "/",
            "/v1/orders/017f22e2-79b0-802a-8144-dc0c0c07398f",
            "/v1/orders/",
            "/.well-known/x",
            "/a/.b/..c/...",
            "/a/%7Bx%7D",
            "/a/%20b",
            "*",
        ] {
            assert!(
                matches!(normalize(path), Ok(Cow::Borrowed(p)) if p == path),
                "{path}"
            );
        }
    }

    #[test]
    fn unreserved_escapes_are_decoded_and_others_kept() {
        assert_eq!(n("/v1/p%61yments"), Ok("/v1/payments".into()));
        assert_eq!(n("/rl/%69p"), Ok("/rl/ip".into()));
        assert_eq!(n("/a/%7e%2D%5f%2E%30"), Ok("/a/~-_.0".into()));
        assert_eq!(n("/a/%7b%61%7D"), Ok("/a/%7ba%7D".into()));
        assert_eq!(n("/a/%25%61"), Ok("/a/%25a".into()));
    }

    #[test]
    fn slashes_are_merged_then_dot_segments_removed() {
        assert_eq!(n("/rl//ip"), Ok("/rl/ip".into()));
        assert_eq!(n("//rl/ip"), Ok("/rl/ip".into()));
        assert_eq!(n("/rl/./ip"), Ok("/rl/ip".into()));
        assert_eq!(n("/rl/x/../ip"), Ok("/rl/ip".into()));
        assert_eq!(n("/rl/x/%2E%2E/ip"), Ok("/rl/ip".into()));
        assert_eq!(n("/a//../b"), Ok("/b".into()));
        assert_eq!(n("/a/b/."), Ok("/a/b/".into()));
        assert_eq!(n("/a/b/.."), Ok("/a/".into()));
        assert_eq!(n("/a/.."), Ok("/".into()));
        assert_eq!(n("//"), Ok("/".into()));
        assert_eq!(n("/a//"), Ok("/a/".into()));
        assert_eq!(n("/."), Ok("/".into()));
    }

    #[test]
    fn what_upstreams_read_apart_is_refused() {
        assert_eq!(n("/a%2Fb"), Err(PathError::EncodedSlash));
        assert_eq!(n("/a%2fb"), Err(PathError::EncodedSlash));
        assert_eq!(n("/a%5cb"), Err(PathError::EncodedSlash));
        let keep = |p| normalize_with(p, EscapedSlashes::Keep).map(Cow::into_owned);
        assert_eq!(keep("/a%2Fb/./c"), Ok("/a%2Fb/c".into()));
        assert!(matches!(
            normalize_with("/a%2fb", EscapedSlashes::Keep),
            Ok(Cow::Borrowed(_))
        ));
        assert_eq!(n("/a%zz"), Err(PathError::BadEscape));
        assert_eq!(n("/a%4"), Err(PathError::BadEscape));
        assert_eq!(n("/a%"), Err(PathError::BadEscape));
        assert_eq!(n("/.."), Err(PathError::AboveRoot));
        assert_eq!(n("/a/../../b"), Err(PathError::AboveRoot));
        assert_eq!(n("/%2e%2e/b"), Err(PathError::AboveRoot));
    }

    proptest::proptest! {
        /// The 16-byte scan says what the byte loop says, on paths dense in `/`, `.`, `%`.
        #[test]
        fn the_block_scan_reads_as_the_byte_loop(path in "[/.%a]{0,70}") {
            proptest::prop_assert_eq!(plain(path.as_bytes()), plain_bytes(path.as_bytes()));
        }
    }

    #[test]
    fn a_template_must_be_in_normal_form() {
        assert_eq!(check_template("/v1/orders/{id}"), Ok(()));
        assert_eq!(check_template("/v1/files/{*rest}"), Ok(()));
        assert_eq!(check_template("/"), Ok(()));
        for bad in [
            "/v1/orders/",
            "/v1//x",
            "/v1/./x",
            "/v1/%6Frders",
            "/a%2Fb",
            "/..",
        ] {
            assert!(check_template(bad).is_err(), "{bad}");
        }
        assert!(check_template("/v1/orders/").is_err_and(|e| e.contains("write `/v1/orders`")));
    }

    #[test]
    fn a_trailing_slash_is_trimmed_for_matching() {
        assert_eq!(trim_trailing("/rl/ip/"), "/rl/ip");
        assert_eq!(trim_trailing("/rl/ip"), "/rl/ip");
        assert_eq!(trim_trailing("/"), "/");
    }

    #[test]
    fn normalising_twice_changes_nothing() {
        for path in ["/a//./b/../c/", "/%61/%2e/b", "/x/y/./../z//"] {
            let once = n(path).expect("normal");
            assert_eq!(n(&once), Ok(once.clone()), "{path}");
            assert!(matches!(normalize(&once), Ok(Cow::Borrowed(_))), "{path}");
        }
    }
}
