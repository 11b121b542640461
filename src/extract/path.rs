//! Ids in path segments.
//!
//! A path segment arrives percent-encoded: a braced id is `%7B…%7D`, and a Relay id in the
//! standard base64 alphabet carries `/`, `+` and `=` as `%2F`, `%2B`, `%3D` (`%2F` only
//! with `limits.escaped_slashes: keep`: by default the path is refused, docs/data-path.md
//! "Paths"). A segment
//! without `%` (the common case) is passed on as it is, with no allocation.

use std::borrow::Cow;

/// Longest segment decoded; a longer one is passed on as it is (no id form is that long, so
/// its scheme refuses it by its length).
pub const MAX_SEGMENT: usize = 256;

/// Percent-decodes a path segment (RFC 3986 §2.1): borrowed as it is when it holds no `%`
/// (most ids), decoded into a new buffer otherwise. A `%` not followed by two hex digits is
/// kept, for the scheme's parser to reject with its position.
pub fn decode_segment(raw: &str) -> Cow<'_, [u8]> {
    let raw = raw.as_bytes();
    if memchr::memchr(b'%', raw).is_none() || raw.len() > MAX_SEGMENT {
        return Cow::Borrowed(raw);
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let b = raw[i];
        if b == b'%' {
            if let (Some(hi), Some(lo)) =
                (raw.get(i + 1).and_then(hex), raw.get(i + 2).and_then(hex))
            {
                out.push((hi << 4) | lo);
                i += 3;
                continue;
            }
        }
        out.push(b);
        i += 1;
    }
    Cow::Owned(out)
}

/// The value of a hex digit (either case), `None` for another byte.
pub(super) fn hex(b: &u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_only_what_is_encoded() {
        let plain = "017f22e2-79b0-802a-8144-dc0c0c07398f";
        assert!(matches!(decode_segment(plain), Cow::Borrowed(b) if b == plain.as_bytes()));
        let braced = decode_segment("%7B017f22e2-79b0-802a-8144-dc0c0c07398f%7D");
        assert_eq!(&*braced, format!("{{{plain}}}").as_bytes());
        assert_eq!(&*decode_segment("%zz"), b"%zz");
        assert_eq!(decode_segment(&"%41".repeat(300)).len(), 900);
        // As ids: the braced form is the same id, the others are refused.
        let parse = |raw: &str| crate::scheme::iuid::parse(&decode_segment(raw));
        assert_eq!(parse(plain), parse(&format!("%7B{plain}%7D")));
        assert!(parse(plain).is_ok());
        assert!(parse("%zz").is_err());
        assert!(parse(&"%41".repeat(300)).is_err());
    }
}
