//! Why an id's text is not an id of its scheme: a precise reason, with a 1-based position
//! where one applies (as the iUID codec gives).

use std::fmt;

/// A rejected id text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SchemeError {
    /// The `iuid` scheme's codec refused it.
    Iuid(iuid::ParseError),
    /// The text has a length this scheme never has.
    InvalidLength {
        /// Its length, in bytes.
        len: usize,
        /// The lengths (or forms) the scheme accepts.
        expected: &'static str,
    },
    /// A byte that cannot be where it is.
    InvalidChar {
        /// 1-based position of the byte.
        pos: usize,
        /// The byte.
        found: u8,
        /// What the scheme wants there.
        expected: &'static str,
    },
    /// A shard-prefixed uniqid whose shard digit is not `hex(last 5) % total_shards`.
    ShardMismatch {
        /// The prefix digit.
        shard: u8,
        /// What the id's microseconds say it must be.
        expected: u8,
    },
    /// A composite id with no separator before its time part.
    NoSeparator,
    /// A number outside what the scheme stores.
    OutOfRange {
        /// What overflowed, e.g. "a snowflake is below 2^63".
        what: &'static str,
    },
}

impl fmt::Display for SchemeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SchemeError::Iuid(e) => e.fmt(f),
            SchemeError::InvalidLength { len, expected } => {
                write!(f, "invalid length {len}: expected {expected}")
            }
            SchemeError::InvalidChar {
                pos,
                found,
                expected,
            } => {
                if found.is_ascii_graphic() {
                    write!(
                        f,
                        "invalid character '{}' at {pos}: expected {expected}",
                        *found as char
                    )
                } else {
                    write!(
                        f,
                        "invalid byte 0x{found:02x} at {pos}: expected {expected}"
                    )
                }
            }
            SchemeError::ShardMismatch { shard, expected } => write!(
                f,
                "shard digit {shard} does not match the id's microseconds (hex of the last 5 \
                 characters % total_shards = {expected})"
            ),
            SchemeError::NoSeparator => f.write_str("no separator between the key and its time"),
            SchemeError::OutOfRange { what } => write!(f, "out of range: {what}"),
        }
    }
}

impl std::error::Error for SchemeError {}

impl From<iuid::ParseError> for SchemeError {
    fn from(e: iuid::ParseError) -> Self {
        SchemeError::Iuid(e)
    }
}

/// The value of a hex digit.
#[inline]
pub(crate) fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `text` read as hex (at most 16 digits); the error names the first non-hex byte, counting
/// positions from `offset`.
#[inline]
pub(crate) fn hex_u64(text: &[u8], offset: usize) -> Result<u64, SchemeError> {
    let mut v = 0u64;
    for (i, &b) in text.iter().enumerate() {
        let d = hex(b).ok_or(SchemeError::InvalidChar {
            pos: offset + i + 1,
            found: b,
            expected: "a hex digit",
        })?;
        v = (v << 4) | u64::from(d);
    }
    Ok(v)
}

/// `text` read as a decimal number below 2^64; the error names the first non-digit.
#[inline]
pub(crate) fn decimal_u64(
    text: &[u8],
    offset: usize,
    what: &'static str,
) -> Result<u64, SchemeError> {
    if text.is_empty() {
        return Err(SchemeError::InvalidLength {
            len: 0,
            expected: "at least one digit",
        });
    }
    let mut v = 0u64;
    for (i, &b) in text.iter().enumerate() {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return Err(SchemeError::InvalidChar {
                pos: offset + i + 1,
                found: b,
                expected: "a decimal digit",
            });
        }
        // Up to 19 digits cannot overflow a u64; only longer text needs checked arithmetic.
        v = if i < 19 {
            v * 10 + u64::from(digit)
        } else {
            v.checked_mul(10)
                .and_then(|v| v.checked_add(u64::from(digit)))
                .ok_or(SchemeError::OutOfRange { what })?
        };
    }
    Ok(v)
}
