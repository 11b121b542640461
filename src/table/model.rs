//! The routing table file as written (SPEC §5), before validation.
//!
//! Types here are deliberately loose (ids as integers, URLs and timestamps as text) so that one
//! pass of [`super::load`] can report every semantic error with its position, instead of
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
    /// Rules checked before the country map, first match wins.
    #[serde(default)]
    pub overrides: Vec<OverrideSpec>,
    /// Region for ids without routing bits (UUIDv4/v7) and for unrouted requests.
    pub default_region: String,
}

/// One region: the base URLs of its upstreams (`http://host:port`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionSpec {
    /// Base URLs, e.g. `http://eu-gw-1:8080`.
    pub upstreams: Vec<String>,
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

/// One override rule; every predicate given must hold (SPEC §5).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideSpec {
    /// Service entity, by name from `services` or by id.
    #[serde(default)]
    pub service: Option<NameOrId>,
    /// Country id.
    #[serde(default)]
    pub country: Option<i64>,
    /// RFC 3339 instant: matches ids minted strictly before it.
    #[serde(default)]
    pub created_before: Option<String>,
    /// RFC 3339 instant: matches ids minted at or after it.
    #[serde(default)]
    pub created_after: Option<String>,
    /// Where matching ids go.
    pub region: String,
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
