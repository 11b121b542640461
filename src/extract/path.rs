//! Ids in path segments.
//!
//! A path segment arrives percent-encoded: a braced id is `%7B…%7D`, and a Relay id in the
//! standard base64 alphabet carries `/`, `+` and `=` as `%2F`, `%2B`, `%3D`. The segment is
//! decoded into a stack buffer before parsing, so the common case allocates nothing.

use iuid::{Id, ParseError};

/// Longest decoded segment accepted; far above any id form (a Relay id of a long type name
/// is about 100 bytes).
const MAX_SEGMENT: usize = 256;

/// Percent-decodes `raw` (RFC 3986 §2.1) and parses it as an id.
pub fn parse_segment(raw: &str) -> Result<Id, ParseError> {
    let raw = raw.as_bytes();
    // Most ids are not encoded at all: try them as they are before looking for a `%`.
    let plain = Id::parse(raw);
    if plain.is_ok() || !raw.contains(&b'%') {
        return plain;
    }
    let mut buf = [0u8; MAX_SEGMENT];
    let mut n = 0;
    let mut i = 0;
    while i < raw.len() {
        if n == MAX_SEGMENT {
            return Err(ParseError::InvalidLength { len: raw.len() });
        }
        let b = raw[i];
        if b == b'%' {
            match (raw.get(i + 1).and_then(hex), raw.get(i + 2).and_then(hex)) {
                (Some(hi), Some(lo)) => {
                    buf[n] = (hi << 4) | lo;
                    i += 3;
                }
                // A lone '%' is kept and then rejected by the id parser with its position.
                _ => {
                    buf[n] = b;
                    i += 1;
                }
            }
        } else {
            buf[n] = b;
            i += 1;
        }
        n += 1;
    }
    Id::parse(&buf[..n])
}

fn hex(b: &u8) -> Option<u8> {
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
    fn decodes_and_rejects() {
        let plain = parse_segment("017f22e2-79b0-802a-8144-dc0c0c07398f").expect("plain");
        let braced = parse_segment("%7B017f22e2-79b0-802a-8144-dc0c0c07398f%7D").expect("braced");
        assert_eq!(plain, braced);
        assert!(parse_segment("%zz").is_err());
        assert!(parse_segment(&"%41".repeat(300)).is_err());
    }
}
