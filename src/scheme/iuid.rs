//! The `iuid` scheme (docs/iuid.md, §5): an iUID routes by its country and service entity; a UUID
//! of another version (v4, v7, …) has no routing bits and goes to the table's
//! `default_region`. The codec itself (text forms, fields, minting) is the `iuid` crate's,
//! which knows nothing of routing.

use std::fmt;

use ::iuid::{Iuid, ParseError, Uuid};

/// What an id of the `iuid` scheme routes by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IuidKey {
    /// A valid iUID: routed by its country and service entity.
    Iuid(Iuid),
    /// A UUID of another version (its variant not checked): no routing bits.
    NoRoutingBits(Uuid),
}

/// Parses any text form of docs/iuid.md. Version 8 must be a valid iUID (else its
/// [`ParseError`]); any other version is [`IuidKey::NoRoutingBits`].
#[inline]
pub fn parse(text: &[u8]) -> Result<IuidKey, ParseError> {
    let u = Uuid::parse(text)?;
    if u.version() == 8 {
        Iuid::try_from_uuid(u).map(IuidKey::Iuid)
    } else {
        Ok(IuidKey::NoRoutingBits(u))
    }
}

impl fmt::Display for IuidKey {
    /// Canonical lowercase hyphenated text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IuidKey::Iuid(i) => i.fmt(f),
            IuidKey::NoRoutingBits(u) => u.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_other_than_8_have_no_routing_bits() {
        let vector = "017f22e2-79b0-802a-8144-dc0c0c07398f";
        let want = Iuid::parse(vector.as_bytes()).expect("vector");
        assert_eq!(parse(vector.as_bytes()), Ok(IuidKey::Iuid(want)));
        for (text, version) in [
            ("9b2c4f7e-1d3a-4c5b-8e6f-0a1b2c3d4e5f", 4),
            ("017f22e2-79b0-7000-8000-000000000000", 7),
        ] {
            match parse(text.as_bytes()) {
                Ok(IuidKey::NoRoutingBits(u)) => assert_eq!(u.version(), version),
                other => panic!("{text}: {other:?}"),
            }
        }
        // Version 8 with another variant is not an iUID, and not waved through either.
        assert!(parse(b"017f22e2-79b0-802a-0144-dc0c0c07398f").is_err());
        assert_eq!(
            parse(b"00000000000000000000000000000000"),
            Ok(IuidKey::NoRoutingBits(Uuid([0; 16])))
        );
    }
}
