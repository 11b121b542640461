//! The `uniqid_shard` scheme (docs/schemes.md): PHP's `uniqid()` with a shard-number prefix.
//!
//! 18 characters: `S RRRR SSSSSSSS UUUUU` — 1 decimal shard digit, 4 hex random digits, then
//! PHP's 13-hex `uniqid()` (8 hex unix seconds and 5 hex microseconds). The id is valid only
//! if the shard digit equals `hex(last 5 characters) % total_shards`: a typo in the prefix is
//! caught instead of routed to the wrong shard.

use std::fmt;

use super::error::{hex_u64, SchemeError};

/// The routing fields of the scheme, in [`Uniqid::field`] order.
pub const FIELDS: [&str; 1] = ["shard"];

/// A shard-prefixed uniqid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uniqid {
    /// The shard digit.
    pub shard: u8,
    /// The 4 hex random digits' value.
    pub random: u16,
    /// Unix seconds.
    pub seconds: u32,
    /// Microseconds within the second (PHP writes 5 hex digits; up to 0xfffff is read).
    pub micros: u32,
}

impl Uniqid {
    /// Creation time in ms since the Unix epoch.
    pub fn created_ms(&self) -> u64 {
        u64::from(self.seconds) * 1000 + u64::from(self.micros) / 1000
    }

    /// The value of field `i` of [`FIELDS`].
    pub fn field(&self, _i: usize) -> u64 {
        u64::from(self.shard)
    }

    /// The id of `seconds`, `micros` and `random` for a table of `total_shards` (1–10): its
    /// shard digit is the one the microseconds give.
    pub fn new(seconds: u32, micros: u32, random: u16, total_shards: u8) -> Uniqid {
        let micros = micros & 0xf_ffff;
        Uniqid {
            shard: (micros % u32::from(total_shards.clamp(1, 10))) as u8,
            random,
            seconds,
            micros,
        }
    }
}

/// Parses the 18 characters and checks the shard digit against `total_shards` (1–10). No
/// allocation.
pub fn parse(text: &[u8], total_shards: u8) -> Result<Uniqid, SchemeError> {
    if text.len() != 18 {
        return Err(SchemeError::InvalidLength {
            len: text.len(),
            expected: "18 characters (a shard digit, 4 hex, 13 hex of uniqid())",
        });
    }
    if !text[0].is_ascii_digit() {
        return Err(SchemeError::InvalidChar {
            pos: 1,
            found: text[0],
            expected: "a decimal shard digit",
        });
    }
    let shard = text[0] - b'0';
    let random = hex_u64(&text[1..5], 1)? as u16;
    let seconds = hex_u64(&text[5..13], 5)? as u32;
    let micros = hex_u64(&text[13..18], 13)? as u32;
    let expected = (micros % u32::from(total_shards.max(1))) as u8;
    if shard != expected {
        return Err(SchemeError::ShardMismatch { shard, expected });
    }
    Ok(Uniqid {
        shard,
        random,
        seconds,
        micros,
    })
}

impl fmt::Display for Uniqid {
    /// The 18 characters, hex in lowercase as PHP writes it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{:04x}{:08x}{:05x}",
            self.shard, self.random, self.seconds, self.micros
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_php_style_id_and_a_wrong_shard_digit() {
        // PHP: uniqid() at 2022-02-06T12:00:00.123456Z is "61ffb840" . "1e240"; with 8
        // shards, 0x1e240 = 123456 → 123456 % 8 = 0, so the prefix digit is 0.
        let id = format!("0{:04x}{}", 0xbeef, "61ffb8401e240");
        let u = parse(id.as_bytes(), 8).expect("valid");
        assert_eq!((u.shard, u.seconds, u.micros), (0, 0x61ff_b840, 123_456));
        assert_eq!(u.created_ms(), 0x61ff_b840 * 1000 + 123);
        assert_eq!(u.to_string(), id);
        // The same id with shard digit 3: the microseconds say 0.
        let wrong = format!("3{}", &id[1..]);
        assert_eq!(
            parse(wrong.as_bytes(), 8),
            Err(SchemeError::ShardMismatch {
                shard: 3,
                expected: 0
            })
        );
        assert!(matches!(
            parse(b"x0000000000000000", 8),
            Err(SchemeError::InvalidLength { len: 17, .. })
        ));
        assert!(matches!(
            parse(b"0zzzz61ffb8401e240", 8),
            Err(SchemeError::InvalidChar { pos: 2, .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn mint_then_parse(secs: u32, micros in 0u32..1_000_000, random: u16, shards in 1u8..=10) {
            let u = Uniqid::new(secs, micros, random, shards);
            let back = parse(u.to_string().as_bytes(), shards).expect("parses");
            proptest::prop_assert_eq!(back, u);
        }
    }
}
