//! The `guid_shard` scheme (docs/schemes.md): HotGuid, a time-ordered GUID whose last 4 bytes are a
//! shard key.
//!
//! | bytes (text order) | field |
//! |---|---|
//! | 0–3 | creation time: unix seconds, u32 **big-endian** (the first 8 hex digits) |
//! | 4–8 | machine and process |
//! | 9–11 | counter |
//! | 12–15 | `shard_key`: u32 **little-endian** (`BitConverter.ToUInt32(bytes, 12)`) |
//!
//! Text: 36 hyphenated, 32 simple or 38 braced characters, hex in either case.

use std::fmt;

use super::error::SchemeError;

/// The routing fields of the scheme, in [`Guid::field`] order.
pub const FIELDS: [&str; 1] = ["shard_key"];

/// A HotGuid: the 16 bytes in text order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Guid(pub [u8; 16]);

impl Guid {
    /// The shard key: bytes 12–15 as a little-endian u32.
    pub fn shard_key(&self) -> u32 {
        u32::from_le_bytes([self.0[12], self.0[13], self.0[14], self.0[15]])
    }

    /// Creation time in ms since the Unix epoch (bytes 0–3, big-endian seconds).
    pub fn created_ms(&self) -> u64 {
        u64::from(u32::from_be_bytes([
            self.0[0], self.0[1], self.0[2], self.0[3],
        ])) * 1000
    }

    /// The value of field `i` of [`FIELDS`].
    pub fn field(&self, _i: usize) -> u64 {
        u64::from(self.shard_key())
    }

    /// A HotGuid of `unix_seconds`, machine/process bytes, `counter` (low 24 bits) and
    /// `shard_key`.
    pub fn new(unix_seconds: u32, machine: [u8; 5], counter: u32, shard_key: u32) -> Guid {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&unix_seconds.to_be_bytes());
        b[4..9].copy_from_slice(&machine);
        b[9..12].copy_from_slice(&counter.to_be_bytes()[1..]);
        b[12..].copy_from_slice(&shard_key.to_le_bytes());
        Guid(b)
    }
}

/// Parses GUID text (hyphenated, simple or braced; no URN or Relay form). No allocation.
pub fn parse(text: &[u8]) -> Result<Guid, SchemeError> {
    if !matches!(text.len(), 32 | 36 | 38) {
        return Err(SchemeError::InvalidLength {
            len: text.len(),
            expected: "32 (simple), 36 (hyphenated) or 38 (braced) characters",
        });
    }
    iuid::Uuid::parse(text)
        .map(|u| Guid(u.0))
        .map_err(SchemeError::Iuid)
}

impl fmt::Display for Guid {
    /// Lowercase hyphenated text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        iuid::Uuid(self.0).fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/schemes.md's vector: seconds 0x61FFB840, machine/pid `AB CD EF 12 34` as .NET writes
    /// them, counter 0x0A0B0C, shard key 208.
    #[test]
    fn the_spec_vector() {
        let text = "61ffb840-cdab-12ef-340a-0b0cd0000000";
        let g = parse(text.as_bytes()).expect("vector");
        assert_eq!(g.shard_key(), 208);
        assert_eq!(g.created_ms(), 0x61FF_B840 * 1000);
        assert_eq!(g.to_string(), text);
        let braced_upper = format!("{{{}}}", text.to_uppercase());
        assert_eq!(parse(braced_upper.as_bytes()), Ok(g));
        assert_eq!(parse(text.replace('-', "").as_bytes()), Ok(g));
        // Shard key 0x01020304 is stored little-endian: the text ends 04030201.
        let mut b = g.0;
        b[12..].copy_from_slice(&0x0102_0304u32.to_le_bytes());
        assert!(Guid(b).to_string().ends_with("-0b0c04030201"));
        assert_eq!(Guid(b).shard_key(), 0x0102_0304);
    }

    #[test]
    fn rejects_other_forms() {
        assert!(matches!(
            parse(b"urn:uuid:61ffb840-cdab-12ef-340a-0b0cd0000000"),
            Err(SchemeError::InvalidLength { len: 45, .. })
        ));
        assert!(parse(b"61ffb840-cdab-12ef-340a-0b0cd000000g").is_err());
    }

    proptest::proptest! {
        #[test]
        fn mint_then_parse(secs: u32, machine: [u8; 5], counter in 0u32..(1 << 24), shard: u32) {
            let g = Guid::new(secs, machine, counter, shard);
            let back = parse(g.to_string().as_bytes()).expect("parses");
            proptest::prop_assert_eq!(back, g);
            proptest::prop_assert_eq!(back.shard_key(), shard);
            proptest::prop_assert_eq!(back.created_ms(), u64::from(secs) * 1000);
        }
    }
}
