//! Id schemes (SPEC §10): how the text of an id becomes the key the routing table routes by.
//!
//! A route names the scheme of its ids (`scheme:`, default `iuid`); a scheme is never guessed
//! from the text, since a HotGuid is valid UUID text too. Extraction (`crate::extract`) only
//! finds the raw token; the live routing table parses it with the route's scheme and resolves
//! the key, so a scheme's settings can live in the table and reload with it.
//!
//! To add a scheme: a module here with its parser and its key, one arm in [`Scheme`] and
//! [`Key`], and the table's mapping from that key to a region (`crate::table`).

pub mod iuid;

use std::fmt;

use ::iuid::ParseError;

/// The schemes a route may name. An enum at the edge picks the parser (as ripgrep's
/// `PatternMatcher` picks the matcher): a match, not a virtual call, on the hot path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Scheme {
    /// The iUID (SPEC §2): a UUIDv8 with country and service entity in its bits; other UUID
    /// versions are accepted and carry no routing bits.
    #[default]
    Iuid,
}

impl Scheme {
    /// Every scheme, for error messages.
    pub const ALL: [Scheme; 1] = [Scheme::Iuid];

    /// The scheme of a `scheme:` name, if there is one.
    pub fn from_name(name: &str) -> Option<Scheme> {
        Scheme::ALL.into_iter().find(|s| s.name() == name)
    }

    /// The name routes and the table use.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Iuid => "iuid",
        }
    }

    /// Parses an id's text (already percent-decoded) into its key.
    ///
    /// Errors: the text is not an id of this scheme ([`ParseError`] says where and why).
    #[inline]
    pub fn parse(self, text: &[u8]) -> Result<Key, ParseError> {
        match self {
            Scheme::Iuid => iuid::parse(text).map(Key::Iuid),
        }
    }
}

impl fmt::Display for Scheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A parsed id: what the routing table resolves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    /// An id of the `iuid` scheme.
    Iuid(iuid::IuidKey),
}

impl fmt::Display for Key {
    /// The id's canonical text, whatever form it was read from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Iuid(k) => k.fmt(f),
        }
    }
}
