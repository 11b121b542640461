//! The iUID codec: parse, read fields, format and mint iUIDs (docs/iuid.md).
//!
//! An iUID is a UUIDv8 (RFC 9562 §5.8) whose bits name the country and the service entity
//! that created it, so that any router can tell from the id alone which region owns it:
//!
//! | bits | field | meaning |
//! |---|---|---|
//! | 0–47 | `unix_ts_ms` | creation time, ms since the Unix epoch |
//! | 48–51 | `ver` | UUID version, always 8 |
//! | 52–55 | `ver1` | iUID format version, 0 today |
//! | 56–63 | `country` | country id (0–255) |
//! | 64–65 | `var` | RFC 9562 variant, always 0b10 |
//! | 66–73 | `service_entity` | service + entity type id (0–255) |
//! | 74–127 | `rand` | 54 bits: a counter then random bits (see [`Generator`]) |
//!
//! ```
//! use iuid::Iuid;
//! let id: Iuid = "017f22e2-79b0-802a-8144-dc0c0c07398f".parse().unwrap();
//! assert_eq!((id.country(), id.service_entity()), (42, 5));
//! assert_eq!(id.unix_ts_ms(), 0x017F_22E2_79B0);
//! ```
//!
//! This crate has no proxy dependencies (only `getrandom`), so services can mint and read ids
//! with it alone.

#![warn(missing_docs)]

mod mint;
mod parse;

use core::fmt;
use core::str::FromStr;

pub use mint::Generator;
pub use parse::ParseError;

/// Any 128-bit UUID read from text, of any version (RFC 9562), big-endian bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
// Aligned to 16 so that the bytes move as one 16-byte load/store: at alignment 1 they sit at
// an odd offset inside `Result` or an enum holding them, and the compiler copies them in
// overlapping 4-byte pieces that defeat store-to-load forwarding (measured: id parse 8.9 →
// 5.7 ns, REST extract+resolve 60 → 48 ns). It costs 15 bytes of padding per such enum.
#[repr(align(16))]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// Parses every text form of docs/iuid.md: hyphenated (36), simple (32 hex), braced (38),
    /// `urn:uuid:` (45), hex in either case, and Relay global ids. No heap allocation.
    pub fn parse(input: &[u8]) -> Result<Uuid, ParseError> {
        parse::parse_bytes(input).map(Uuid)
    }

    /// The version, bits 48–51 (4 for random, 7 for time-ordered, 8 for iUIDs).
    pub const fn version(&self) -> u8 {
        self.0[6] >> 4
    }

    /// The 16 bytes, big-endian.
    pub const fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

const LOWER_HEX: &[u8; 16] = b"0123456789abcdef";

/// Writes canonical lowercase hyphenated text (36 bytes).
fn encode(bytes: &[u8; 16], buf: &mut [u8; 36]) {
    let mut o = 0;
    for (i, b) in bytes.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            buf[o] = b'-';
            o += 1;
        }
        buf[o] = LOWER_HEX[usize::from(b >> 4)];
        buf[o + 1] = LOWER_HEX[usize::from(b & 0xf)];
        o += 2;
    }
}

fn write_text(bytes: &[u8; 16], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let mut buf = [0u8; 36];
    encode(bytes, &mut buf);
    // Only ASCII hex digits and hyphens were written.
    f.write_str(core::str::from_utf8(&buf).map_err(|_| fmt::Error)?)
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_text(&self.0, f)
    }
}

impl FromStr for Uuid {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse(s.as_bytes())
    }
}

/// A valid iUID: version 8, variant 0b10, `ver1` 0 (docs/iuid.md). Orders like its bytes, which is
/// creation order for ids of one [`Generator`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug)]
// 16-aligned for the same reason as `Uuid`.
#[repr(align(16))]
pub struct Iuid([u8; 16]);

impl Iuid {
    /// Parses text (any form [`Uuid::parse`] takes) and checks it is an iUID.
    pub fn parse(input: &[u8]) -> Result<Iuid, ParseError> {
        Iuid::try_from_uuid(Uuid::parse(input)?)
    }

    /// Checks a UUID is an iUID: [`ParseError::NotVersion8`], [`ParseError::InvalidVariant`]
    /// or [`ParseError::UnsupportedFormat`] otherwise.
    pub fn try_from_uuid(u: Uuid) -> Result<Iuid, ParseError> {
        let version = u.version();
        if version != 8 {
            return Err(ParseError::NotVersion8 { version });
        }
        if u.0[8] >> 6 != 0b10 {
            return Err(ParseError::InvalidVariant);
        }
        let ver1 = u.0[6] & 0x0f;
        if ver1 != 0 {
            return Err(ParseError::UnsupportedFormat { ver1 });
        }
        Ok(Iuid(u.0))
    }

    /// Builds an iUID from its fields; `unix_ts_ms` is cut to 48 bits and `rand` to 54.
    pub fn from_fields(unix_ts_ms: u64, country: u8, service_entity: u8, rand: u64) -> Iuid {
        let ts = unix_ts_ms.to_be_bytes();
        let r = rand.to_be_bytes();
        Iuid([
            ts[2],
            ts[3],
            ts[4],
            ts[5],
            ts[6],
            ts[7],
            0x80, // ver 8, ver1 0
            country,
            0x80 | (service_entity >> 2),
            ((service_entity & 0x03) << 6) | (r[1] & 0x3f),
            r[2],
            r[3],
            r[4],
            r[5],
            r[6],
            r[7],
        ])
    }

    /// Creation time, ms since the Unix epoch (bits 0–47).
    pub const fn unix_ts_ms(&self) -> u64 {
        let b = &self.0;
        ((b[0] as u64) << 40)
            | ((b[1] as u64) << 32)
            | ((b[2] as u64) << 24)
            | ((b[3] as u64) << 16)
            | ((b[4] as u64) << 8)
            | (b[5] as u64)
    }

    /// iUID format version (bits 52–55); 0 for every iUID this crate accepts.
    pub const fn ver1(&self) -> u8 {
        self.0[6] & 0x0f
    }

    /// Country id (bits 56–63).
    pub const fn country(&self) -> u8 {
        self.0[7]
    }

    /// Service entity id (bits 66–73, straddling the variant).
    pub const fn service_entity(&self) -> u8 {
        ((self.0[8] & 0x3f) << 2) | (self.0[9] >> 6)
    }

    /// The 54 bits after the service entity (bits 74–127).
    pub const fn rand(&self) -> u64 {
        let b = &self.0;
        (((b[9] & 0x3f) as u64) << 48)
            | ((b[10] as u64) << 40)
            | ((b[11] as u64) << 32)
            | ((b[12] as u64) << 24)
            | ((b[13] as u64) << 16)
            | ((b[14] as u64) << 8)
            | (b[15] as u64)
    }

    /// The id as a plain UUID.
    pub const fn as_uuid(&self) -> Uuid {
        Uuid(self.0)
    }

    /// Canonical lowercase hyphenated text into `buf`, without allocating.
    pub fn encode_lower<'a>(&self, buf: &'a mut [u8; 36]) -> &'a str {
        encode(&self.0, buf);
        // Only ASCII was written; the fallback is unreachable but keeps this panic-free.
        core::str::from_utf8(buf).unwrap_or_default()
    }
}

impl fmt::Display for Iuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_text(&self.0, f)
    }
}

impl FromStr for Iuid {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Iuid::parse(s.as_bytes())
    }
}
