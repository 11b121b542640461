//! Minting ids of every kind (docs/schemes.md: `mint` makes valid ids for tests and demos). Services
//! mint their own ids; these exist so that a table can be tried end to end.

use super::guid_shard::Guid;
use super::uniqid_shard::Uniqid;
use super::Kind;

/// What to put in minted ids; each kind reads the settings it has.
#[derive(Debug, Clone, Default)]
pub struct MintSpec {
    /// `iuid`: country id.
    pub country: u8,
    /// `iuid`: service entity id.
    pub service: u8,
    /// `guid_shard`: the shard key.
    pub shard_key: u32,
    /// `uniqid_shard`: the shard digit wanted.
    pub shard: u8,
    /// `composite`: the key.
    pub key: String,
    /// `snowflake`: field values by name; `time` defaults to now.
    pub fields: Vec<(String, u64)>,
    /// Creation time in ms since the epoch (default: now).
    pub at_ms: Option<u64>,
}

/// Why ids of that kind cannot be minted as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MintError(pub String);

impl std::fmt::Display for MintError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for MintError {}

/// `count` ids of `kind` made from `spec`, as text, each distinct.
///
/// Errors: a `uniqid_shard` digit at or over `total_shards`, a composite key that is not
/// 1–128 characters of `[A-Za-z0-9._-]`, a snowflake field the layout does not have.
pub fn mint(kind: &Kind, spec: &MintSpec, count: u64) -> Result<Vec<String>, MintError> {
    let at = spec.at_ms.unwrap_or_else(crate::clock::unix_ms);
    let mut out = Vec::with_capacity(count.min(1 << 16) as usize);
    match kind {
        Kind::Iuid => {
            let g = ::iuid::Generator::new(spec.country, spec.service);
            for _ in 0..count {
                out.push(g.mint().to_string());
            }
        }
        Kind::GuidShard => {
            let machine = [0xab, 0xcd, 0xef, 0x12, 0x34];
            for n in 0..count {
                let g = Guid::new((at / 1000) as u32, machine, n as u32, spec.shard_key);
                out.push(g.to_string());
            }
        }
        Kind::UniqidShard { total_shards } => {
            let total = u32::from(*total_shards);
            if u32::from(spec.shard) >= total {
                return Err(MintError(format!(
                    "shard {} is not below total_shards {total}",
                    spec.shard
                )));
            }
            for n in 0..count {
                // Microseconds whose remainder is the shard asked for.
                let base = (((at % 1000) * 1000 + n * u64::from(total)) % 1_000_000) as u32;
                let micros = base - base % total + u32::from(spec.shard);
                let u = Uniqid::new((at / 1000) as u32, micros, n as u16, *total_shards);
                out.push(u.to_string());
            }
        }
        Kind::Composite { separator } => {
            let ok = (1..=super::composite::MAX_KEY).contains(&spec.key.len())
                && spec
                    .key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
            if !ok {
                return Err(MintError(format!(
                    "key `{}`: 1-128 characters of letters, digits, '.', '_', '-'",
                    spec.key
                )));
            }
            for n in 0..count {
                out.push(format!("{}{}{}", spec.key, *separator as char, at + n));
            }
        }
        Kind::Snowflake(layout) => {
            for (name, _) in &spec.fields {
                if layout.field_index(name).is_none() {
                    return Err(MintError(format!("the layout has no field `{name}`")));
                }
            }
            let units = at.saturating_sub(layout.epoch_ms) / layout.unit_ms;
            let last = layout.fields.last().map(|f| f.name.clone());
            for n in 0..count {
                let mut values: Vec<(&str, u64)> = Vec::new();
                if layout.time.is_some() && !spec.fields.iter().any(|(f, _)| f == "time") {
                    values.push(("time", units));
                }
                for (name, v) in &spec.fields {
                    values.push((name, *v));
                }
                // Distinct ids: count in the last field unless it was given.
                if let Some(last) = &last {
                    if !spec.fields.iter().any(|(f, _)| f == last) {
                        values.push((last, n));
                    }
                }
                let id = layout
                    .compose(&values)
                    .ok_or_else(|| MintError("a field is not in the layout".into()))?;
                out.push(id.to_string());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheme::snowflake::Layout;

    #[test]
    fn minted_ids_parse_as_their_kind_with_the_fields_asked_for() {
        let kinds = [
            Kind::Iuid,
            Kind::GuidShard,
            Kind::UniqidShard { total_shards: 8 },
            Kind::Composite { separator: b':' },
            Kind::Snowflake(Layout::preset("instagram").expect("preset")),
        ];
        let spec = MintSpec {
            country: 3,
            service: 1,
            shard_key: 150 << 22,
            shard: 5,
            key: "dev-1".into(),
            fields: vec![("shard".into(), 4100)],
            at_ms: Some(1_764_000_000_123),
        };
        for kind in &kinds {
            let ids = mint(kind, &spec, 3).expect("mint");
            assert_eq!(ids.len(), 3);
            let mut seen = std::collections::HashSet::new();
            for id in &ids {
                assert!(seen.insert(id.clone()), "{id} minted twice");
                let key = kind.parse(id.as_bytes()).expect("parses");
                if let Some(i) = kind.fields().iter().position(|f| *f == "shard") {
                    let want = if matches!(kind, Kind::Snowflake(_)) {
                        4100
                    } else {
                        5
                    };
                    assert_eq!(kind.field(&key, i), want, "{id}");
                }
                if matches!(kind, Kind::GuidShard) {
                    assert_eq!(kind.field(&key, 0) >> 22, 150);
                }
                assert!(kind.created_ms(&key).is_some(), "{id}");
            }
        }
        let bad = MintSpec { shard: 9, ..spec };
        assert!(mint(&Kind::UniqidShard { total_shards: 8 }, &bad, 1).is_err());
    }
}
