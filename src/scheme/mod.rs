//! Id schemes (docs/schemes.md): how the text of an id becomes the key the routing table routes by.
//!
//! A route names the scheme of its ids (`scheme:`, default `iuid`); a scheme is never guessed
//! from the text, since a HotGuid is valid UUID text too. Extraction (`crate::extract`) only
//! finds the raw token; the live routing table parses it with the scheme of that name and
//! resolves the key, so schemes are declared in the table and reload with it.
//!
//! Each kind is a module with a parser that does not allocate, its fields, its creation time
//! and a precise [`SchemeError`]:
//!
//! | kind | module | routed by |
//! |---|---|---|
//! | `iuid` | [`iuid`] | country, service entity (the table's country map and overrides) |
//! | `guid_shard` | [`guid_shard`] | `shard_key` |
//! | `uniqid_shard` | [`uniqid_shard`] | `shard` |
//! | `composite` | [`composite`] | its key, by rendezvous hashing ([`hrw`]) |
//! | `snowflake` | [`snowflake`] | a field of its layout |
//!
//! To add a kind: a module here with its parser, an arm in [`Kind`] and in [`Key`], and its
//! `kind:` name in the table's scheme validation (`crate::table`).

pub mod composite;
pub mod error;
pub mod guid_shard;
pub mod hrw;
pub mod iuid;
pub mod mint;
pub mod snowflake;
pub mod uniqid_shard;

use std::fmt;

pub use error::SchemeError;

/// The name of the built-in iUID scheme, always available.
pub const IUID: &str = "iuid";

/// A scheme's kind with its settings: the enum at the edge that picks the parser (as
/// ripgrep's `PatternMatcher` picks the matcher), a match rather than a virtual call on the
/// hot path.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// The iUID (docs/iuid.md); UUIDs of other versions carry no routing bits.
    Iuid,
    /// HotGuid: a GUID with a little-endian shard key in its last 4 bytes.
    GuidShard,
    /// PHP `uniqid()` with a shard digit in front.
    UniqidShard {
        /// Shards the digit is taken modulo (1–10).
        total_shards: u8,
    },
    /// `<key><separator><t*>`.
    Composite {
        /// The byte between the key and the time.
        separator: u8,
    },
    /// A 63-bit integer of bit fields.
    Snowflake(snowflake::Layout),
}

impl Kind {
    /// The `kind:` name.
    pub fn name(&self) -> &'static str {
        match self {
            Kind::Iuid => "iuid",
            Kind::GuidShard => "guid_shard",
            Kind::UniqidShard { .. } => "uniqid_shard",
            Kind::Composite { .. } => "composite",
            Kind::Snowflake(_) => "snowflake",
        }
    }

    /// Parses an id's text (already percent-decoded) into its key.
    ///
    /// Errors: the text is not an id of this kind ([`SchemeError`] says where and why).
    #[inline]
    pub fn parse<'t>(&self, text: &'t [u8]) -> Result<Key<'t>, SchemeError> {
        match self {
            Kind::Iuid => iuid::parse(text).map(Key::Iuid).map_err(SchemeError::Iuid),
            Kind::GuidShard => guid_shard::parse(text).map(Key::GuidShard),
            Kind::UniqidShard { total_shards } => {
                uniqid_shard::parse(text, *total_shards).map(Key::Uniqid)
            }
            Kind::Composite { separator } => composite::parse(text, *separator).map(Key::Composite),
            Kind::Snowflake(_) => snowflake::parse(text).map(Key::Snowflake),
        }
    }

    /// The names of the integer fields of this kind's ids (what `route_by` and override
    /// predicates may name), in [`Kind::field`] order.
    pub fn fields(&self) -> Vec<&str> {
        match self {
            Kind::Iuid => vec!["country", "service_entity", "ver1"],
            Kind::GuidShard => guid_shard::FIELDS.to_vec(),
            Kind::UniqidShard { .. } => uniqid_shard::FIELDS.to_vec(),
            Kind::Composite { .. } => Vec::new(),
            Kind::Snowflake(l) => l.fields.iter().map(|f| f.name.as_str()).collect(),
        }
    }

    /// Field `i` of [`Kind::fields`] of `key` (0 for a key of another kind, or an id without
    /// routing bits).
    #[inline]
    pub fn field(&self, key: &Key, i: usize) -> u64 {
        match (self, key) {
            (Kind::Iuid, Key::Iuid(iuid::IuidKey::Iuid(id))) => match i {
                0 => u64::from(id.country()),
                1 => u64::from(id.service_entity()),
                _ => u64::from(id.ver1()),
            },
            (_, Key::GuidShard(g)) => g.field(i),
            (_, Key::Uniqid(u)) => u.field(i),
            (Kind::Snowflake(l), Key::Snowflake(s)) => l.field(*s, i),
            _ => 0,
        }
    }

    /// Whether ids of this kind carry a creation time (what a `fanout:` route orders by):
    /// every kind does but a snowflake layout without a `time` field.
    pub fn has_time(&self) -> bool {
        match self {
            Kind::Snowflake(l) => l.time.is_some(),
            _ => true,
        }
    }

    /// When the id was created, in ms since the Unix epoch, if its kind carries a time.
    pub fn created_ms(&self, key: &Key) -> Option<u64> {
        match (self, key) {
            (_, Key::Iuid(iuid::IuidKey::Iuid(id))) => Some(id.unix_ts_ms()),
            (_, Key::Iuid(iuid::IuidKey::NoRoutingBits(_))) => None,
            (_, Key::GuidShard(g)) => Some(g.created_ms()),
            (_, Key::Uniqid(u)) => Some(u.created_ms()),
            (_, Key::Composite(c)) => Some(c.created_ms()),
            (Kind::Snowflake(l), Key::Snowflake(s)) => l.created_ms(*s),
            (_, Key::Snowflake(_)) => None,
        }
    }
}

/// A parsed id: what the routing table resolves. Borrows the text only for a composite key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key<'t> {
    /// An id of the `iuid` scheme.
    Iuid(iuid::IuidKey),
    /// A HotGuid.
    GuidShard(guid_shard::Guid),
    /// A shard-prefixed uniqid.
    Uniqid(uniqid_shard::Uniqid),
    /// A `<key, t*>` id.
    Composite(composite::Composite<'t>),
    /// A snowflake.
    Snowflake(snowflake::Snowflake),
}

impl Key<'_> {
    /// A 64-bit fingerprint of the id, the same for every text form of it (computed from
    /// its parsed value, never from its spelling): what the owners learned from the
    /// regions are kept by (docs/failover.md). Never 0. A few multiplications, no
    /// allocation.
    pub fn fingerprint(&self) -> u64 {
        // FxHash's step: spread, not secrecy; a collision costs one request sent to a
        // region that answers `421` again (then 502), not a wrong answer.
        fn mix(h: u64, word: u64) -> u64 {
            (h.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95)
        }
        // 16 bytes (a UUID, a GUID): their two words, one rotated, so that no two ids of
        // one kind that differ in one word collide; on every iUID request, so kept short.
        fn sixteen(h: u64, b: &[u8; 16]) -> u64 {
            let (lo, hi) = b.split_at(8);
            let word = |w: &[u8]| u64::from_le_bytes(w.try_into().unwrap_or_default());
            word(lo) ^ word(hi).rotate_left(29) ^ h
        }
        fn bytes(mut h: u64, b: &[u8]) -> u64 {
            for chunk in b.chunks(8) {
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                h = mix(h, u64::from_le_bytes(word));
            }
            mix(h, b.len() as u64)
        }
        let h = match self {
            Key::Iuid(iuid::IuidKey::Iuid(k)) => sixteen(1, k.as_uuid().as_bytes()),
            Key::Iuid(iuid::IuidKey::NoRoutingBits(u)) => sixteen(1, u.as_bytes()),
            Key::GuidShard(g) => sixteen(2, &g.0),
            Key::Uniqid(u) => mix(
                mix(3, u64::from(u.shard) << 16 | u64::from(u.random)),
                u64::from(u.seconds) << 32 | u64::from(u.micros),
            ),
            Key::Composite(c) => mix(bytes(4, c.key), c.t_ms),
            Key::Snowflake(s) => mix(5, s.0),
        };
        h | 1
    }
}

impl fmt::Display for Key<'_> {
    /// The id's canonical text, whatever form it was read from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Iuid(k) => k.fmt(f),
            Key::GuidShard(g) => g.fmt(f),
            Key::Uniqid(u) => u.fmt(f),
            Key::Composite(c) => c.fmt(f),
            Key::Snowflake(s) => s.fmt(f),
        }
    }
}
