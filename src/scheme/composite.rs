//! The `composite` scheme (docs/schemes.md): a `<key, t*>` id such as Nauto's trip id
//! `<device id, t*>`, written `<key><separator><t*>`.
//!
//! The key is 1–128 characters of `[A-Za-z0-9._-]`; `t*` is the creation time in decimal ms
//! since the epoch. The id is split at the last separator (the time holds only digits, so a
//! separator that may also appear in keys, such as `-`, still splits right). The key is
//! placed in a region by weighted rendezvous hashing ([`super::hrw`]), not by a map.

use std::fmt;

use super::error::{decimal_u64, SchemeError};

/// Longest key, in bytes.
pub const MAX_KEY: usize = 128;

/// Which bytes a key may hold: `[A-Za-z0-9._-]` (a table: one load a byte).
static KEY_BYTE: [bool; 256] = {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || c == b'-';
        b += 1;
    }
    t
};

/// A composite id, borrowing its key from the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Composite<'t> {
    /// The key (a device id, say).
    pub key: &'t [u8],
    /// `t*`: ms since the epoch.
    pub t_ms: u64,
    /// The separator it was written with.
    pub separator: u8,
}

/// Parses `<key><separator><t*>`. No allocation.
#[inline]
pub fn parse(text: &[u8], separator: u8) -> Result<Composite<'_>, SchemeError> {
    let at = memchr::memrchr(separator, text).ok_or(SchemeError::NoSeparator)?;
    let (key, time) = (&text[..at], &text[at + 1..]);
    if key.is_empty() || key.len() > MAX_KEY {
        return Err(SchemeError::InvalidLength {
            len: key.len(),
            expected: "a key of 1-128 characters before the separator",
        });
    }
    if let Some(i) = key.iter().position(|&b| !KEY_BYTE[usize::from(b)]) {
        return Err(SchemeError::InvalidChar {
            pos: i + 1,
            found: key[i],
            expected: "a key character: letter, digit, '.', '_' or '-'",
        });
    }
    let t_ms = decimal_u64(time, at + 1, "t* is below 2^64 ms")?;
    Ok(Composite {
        key,
        t_ms,
        separator,
    })
}

impl Composite<'_> {
    /// Creation time in ms since the Unix epoch (`t*`).
    pub fn created_ms(&self) -> u64 {
        self.t_ms
    }
}

impl fmt::Display for Composite<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}{}",
            String::from_utf8_lossy(self.key),
            self.separator as char,
            self.t_ms
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_the_last_separator() {
        let c = parse(b"dev-7f3a.cam_2:1764000000123", b':').expect("valid");
        assert_eq!(c.key, b"dev-7f3a.cam_2");
        assert_eq!(c.created_ms(), 1_764_000_000_123);
        let dashed = parse(b"dev-7f3a-1764000000123", b'-').expect("valid");
        assert_eq!(dashed.key, b"dev-7f3a");
        assert_eq!(parse(b"nokey", b':'), Err(SchemeError::NoSeparator));
        assert!(matches!(
            parse(b":1", b':'),
            Err(SchemeError::InvalidLength { len: 0, .. })
        ));
        assert!(matches!(
            parse(b"a/b:1", b':'),
            Err(SchemeError::InvalidChar { pos: 2, .. })
        ));
        assert!(matches!(
            parse(b"abc:12x", b':'),
            Err(SchemeError::InvalidChar { pos: 7, .. })
        ));
        let long = format!("{}:1", "k".repeat(129));
        assert!(parse(long.as_bytes(), b':').is_err());
    }

    proptest::proptest! {
        #[test]
        fn mint_then_parse(key in "[A-Za-z0-9._-]{1,128}", t: u64) {
            let text = format!("{key}:{t}");
            let c = parse(text.as_bytes(), b':').expect("parses");
            proptest::prop_assert_eq!(c.key, key.as_bytes());
            proptest::prop_assert_eq!(c.t_ms, t);
            proptest::prop_assert_eq!(c.to_string(), text);
        }
    }
}
