//! The routing table file as written (docs/routing-table.md), before validation.
//!
//! Types here are deliberately loose (ids as integers, URLs and timestamps as text) so that one
//! pass of `super::load` can report every semantic error with its position, instead of
//! stopping at the first like serde does. Only unknown keys and wrong YAML shapes stop parsing.

use std::fmt;

use serde::de::{self, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// The whole `routing-table.yaml`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableFile {
    /// Free text naming this revision of the table (reported by the admin API and metrics).
    pub version: String,
    /// Region name → its upstreams, in file order.
    pub regions: Entries<String, RegionSpec>,
    /// iUID country id → owning region, in file order.
    #[serde(default)]
    pub countries: Entries<i64, CountrySpec>,
    /// iUID service_entity id → name, in file order.
    #[serde(default)]
    pub services: Entries<i64, String>,
    /// Id schemes besides `iuid` (docs/schemes.md), by name, in file order.
    #[serde(default)]
    pub schemes: Entries<String, SchemeSpec>,
    /// Groups of ids moving between regions (docs/routing-table.md `moves`): checked before
    /// the overrides, first match wins.
    #[serde(default)]
    pub moves: Vec<MoveSpec>,
    /// Rules checked before the country map (or a scheme's map), first match wins.
    #[serde(default)]
    pub overrides: Vec<OverrideSpec>,
    /// Region for ids without routing bits (UUIDv4/v7) and for unrouted requests.
    pub default_region: String,
}

/// One region: the base URLs of its upstreams (`http://host:port`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionSpec {
    /// Base URLs, e.g. `http://eu-gw-1:8080` or `https://eu-gw-1:8443`.
    pub upstreams: Vec<String>,
    /// TLS to the region's `https://` upstreams (docs/tls-h2-grpc.md).
    #[serde(default)]
    pub tls: Option<RegionTlsSpec>,
    /// `http1` (default) or `h2` (over TLS by ALPN, h2c over `http://`).
    #[serde(default)]
    pub protocol: super::UpstreamProtocol,
    /// Where its reads (or all its requests) go while its upstreams fail (docs/failover.md).
    #[serde(default)]
    pub failover: Option<FailoverSpec>,
}

/// A region's `failover:` as written (docs/failover.md).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailoverSpec {
    /// The region that serves in its place.
    pub region: String,
    /// `reads` (default) or `all`.
    #[serde(default)]
    pub serves: super::Serves,
    /// Envoy's overprovisioning factor (default 1.4), 1 to 10.
    #[serde(default)]
    pub overprovisioning: Option<f64>,
}

/// A region's `tls:`: paths relative to the table file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionTlsSpec {
    /// CA certificates (PEM) to trust instead of the system's roots.
    #[serde(default)]
    pub ca: Option<String>,
    /// Client certificate chain (PEM), for mTLS.
    #[serde(default)]
    pub client_cert: Option<String>,
    /// Its key (PEM).
    #[serde(default)]
    pub client_key: Option<String>,
    /// The name to send as SNI and verify (default: each upstream's host).
    #[serde(default)]
    pub server_name: Option<String>,
}

/// A country entry: `{ code: KZ, region: ap }` or the short form `eu`.
#[derive(Debug)]
pub struct CountrySpec {
    /// ISO-style code, for humans and `decode`.
    pub code: Option<String>,
    /// The owning region.
    pub region: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CountryLong {
    #[serde(default)]
    code: Option<String>,
    region: String,
}

impl<'de> Deserialize<'de> for CountrySpec {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = CountrySpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a region name or { code, region }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<CountrySpec, E> {
                Ok(CountrySpec {
                    code: None,
                    region: v.to_owned(),
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<CountrySpec, A::Error> {
                let long = CountryLong::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(CountrySpec {
                    code: long.code,
                    region: long.region,
                })
            }
        }
        d.deserialize_any(V)
    }
}

/// One declared scheme (docs/schemes.md). Which keys apply depends on `kind`; validation says which
/// are missing or out of place.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchemeSpec {
    /// `guid_shard`, `uniqid_shard`, `composite` or `snowflake`.
    pub kind: String,
    /// The field (and optionally the bit slice of it) that `map` is keyed by.
    #[serde(default)]
    pub route_by: Option<RouteBySpec>,
    /// Field value or inclusive range `"a-b"` → region, in file order.
    #[serde(default)]
    pub map: Option<Entries<MapKey, String>>,
    /// The region of values no `map` entry covers (else 404).
    #[serde(default)]
    pub default: Option<String>,
    /// Rendezvous hashing of a composite key over weighted regions.
    #[serde(default)]
    pub hash: Option<HashSpec>,
    /// `uniqid_shard`: shards the digit is taken modulo (1–10).
    #[serde(default)]
    pub total_shards: Option<i64>,
    /// `composite`: the character between the key and `t*`.
    #[serde(default)]
    pub separator: Option<String>,
    /// `snowflake`: a preset (`twitter`, `instagram`, `sonyflake`, `discord`).
    #[serde(default)]
    pub layout: Option<String>,
    /// `snowflake`: a custom layout, fields from the most significant bit.
    #[serde(default)]
    pub fields: Option<Vec<FieldSpec>>,
}

/// `route_by: { field, shift, bits }`: the value routed by is
/// `(field >> shift) & ((1 << bits) - 1)`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteBySpec {
    /// A field of the scheme's ids.
    pub field: String,
    /// Low bits dropped first.
    #[serde(default)]
    pub shift: Option<u32>,
    /// Bits kept after the shift.
    #[serde(default)]
    pub bits: Option<u32>,
}

/// `hash: { weights: { region: weight } }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HashSpec {
    /// Region → weight (> 0), in file order.
    pub weights: Entries<String, f64>,
}

/// One field of a custom snowflake layout.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    /// Its name; `time` is the creation time.
    pub name: String,
    /// Its width in bits.
    pub bits: u32,
    /// `time` only: ms per unit (default 1).
    #[serde(default)]
    pub unit_ms: Option<u64>,
    /// `time` only: ms since the Unix epoch at 0 (default 0).
    #[serde(default)]
    pub epoch_ms: Option<u64>,
}

/// A `map:` key as written: a number, or text (`"150"`, `"0-3"`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapKey(pub String);

impl<'de> Deserialize<'de> for MapKey {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = MapKey;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a value or a range \"a-b\"")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<MapKey, E> {
                Ok(MapKey(v.to_owned()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<MapKey, E> {
                Ok(MapKey(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<MapKey, E> {
                Ok(MapKey(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

/// One override rule; every predicate given must hold (docs/routing-table.md, §10). Keys other than the
/// ones below are predicates over the fields of `scheme`'s ids (`shard: 17`); validation
/// refuses them for a scheme without such a field, which is how a typo is still an error.
#[derive(Debug, Deserialize)]
pub struct OverrideSpec {
    /// Which ids it applies to: the matchers a move's `match:` has too.
    #[serde(flatten)]
    pub matcher: MatchSpec,
    /// Where matching ids go.
    pub region: String,
}

/// A move's `match:` (docs/routing-table.md `moves`): the matchers of an override, without
/// `region`. Keys other than the ones below are field predicates of `scheme`, refused by
/// validation for a scheme without such a field (and for the iUID).
#[derive(Debug, Deserialize)]
pub struct MatchSpec {
    /// The scheme of the ids it applies to (default `iuid`).
    #[serde(default)]
    pub scheme: Option<String>,
    /// Service entity, by name from `services` or by id.
    #[serde(default)]
    pub service: Option<NameOrId>,
    /// Country id.
    #[serde(default)]
    pub country: Option<i64>,
    /// RFC 3339 instant: matches ids minted strictly before it.
    #[serde(default)]
    pub created_before: Option<String>,
    /// RFC 3339 instant: matches ids minted strictly after it.
    #[serde(default)]
    pub created_after: Option<String>,
    /// Field predicates: field name → value or inclusive range `"lo-hi"`.
    #[serde(flatten)]
    pub fields: Entries<String, MapKey>,
}

/// One entry of `moves:` (docs/routing-table.md `moves`, docs/moves.md): a group of ids
/// served by `from` until the move flips to `to`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoveSpec {
    /// `[a-z0-9-]+`, unique among the moves (metric labels, `X-Iuid-Move`).
    pub name: String,
    /// The group it moves.
    #[serde(rename = "match")]
    pub matcher: MatchSpec,
    /// The region that serves the group until the flip.
    pub from: String,
    /// The region that serves it from the flip on.
    pub to: String,
    /// `mirror`, `fence` or `flip`.
    pub phase: super::MovePhase,
    /// `mirror`: share of idempotent requests also copied to `to`, 0–1 (default 0.1).
    #[serde(default)]
    pub mirror_ratio: Option<f64>,
    /// `fence`: the longest a write is held waiting for the flip, ms, 1–600000 (default 5000).
    #[serde(default)]
    pub hold_ms: Option<i64>,
}

/// A service given by name (`WalletAccount`) or by numeric id (`2`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum NameOrId {
    /// A numeric id.
    Id(i64),
    /// A name from the `services` map.
    Name(String),
}

/// A YAML mapping kept as ordered entries, duplicates included, so validation can report them.
#[derive(Debug)]
pub struct Entries<K, V>(pub Vec<(K, V)>);

impl<K, V> Default for Entries<K, V> {
    fn default() -> Self {
        Entries(Vec::new())
    }
}

impl<'de, K: Deserialize<'de>, V: Deserialize<'de>> Deserialize<'de> for Entries<K, V> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct EntriesVisitor<K, V>(std::marker::PhantomData<(K, V)>);
        impl<'de, K: Deserialize<'de>, V: Deserialize<'de>> Visitor<'de> for EntriesVisitor<K, V> {
            type Value = Entries<K, V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a mapping")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry()? {
                    out.push(entry);
                }
                Ok(Entries(out))
            }
            // `countries:` with nothing under it.
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Entries(Vec::new()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
                Err(de::Error::invalid_type(de::Unexpected::Seq, &self))
            }
        }
        d.deserialize_any(EntriesVisitor(std::marker::PhantomData))
    }
}
