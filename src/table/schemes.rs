//! Declared schemes (docs/schemes.md), compiled: what resolves their ids — moves and overrides
//! first, then a map over a field (sorted, disjoint ranges, binary search) or weighted
//! rendezvous hashing of a composite key. `schemes_load.rs` validates `schemes:`
//! (file:line:column) into these.

use super::{Decision, RegionId, ResolveError, Rule, SchemeSlot};
use crate::scheme::{hrw, Key, Kind};

/// A compiled scheme of the table.
#[derive(Debug)]
pub struct TableScheme {
    /// Its name, as routes and overrides give it.
    pub name: String,
    /// Its kind and settings (the parser).
    pub kind: Kind,
    pub(super) routing: KeyRouting,
    pub(super) overrides: Vec<SchemeOverride>,
}

/// How a scheme's ids are placed once no override matched.
#[derive(Debug)]
pub(super) enum KeyRouting {
    /// `(field >> shift) & mask` looked up in disjoint inclusive ranges sorted by start.
    Map {
        field: usize,
        field_name: String,
        shift: u32,
        mask: u64,
        ranges: Vec<(u64, u64, RegionId)>,
        default: Option<RegionId>,
    },
    /// Rendezvous hashing over the regions named, index for index.
    Hash(hrw::Placer, Vec<RegionId>),
}

/// A move or an override of this scheme (moves first): every field predicate and the time
/// window must hold.
#[derive(Debug)]
pub(super) struct SchemeOverride {
    /// The rule it is: [`Rule::Move`] or [`Rule::Override`], with its index in the table.
    pub(super) rule: Rule,
    /// `(field index, lo, hi)`: the field's value must be within `lo..=hi`, for all of them.
    pub(super) fields: Vec<(usize, u64, u64)>,
    /// Created at or after (ms; 0: no bound).
    pub(super) after_ms: u64,
    /// Created before (ms; `u64::MAX`: no bound).
    pub(super) before_ms: u64,
    /// Where matching ids go.
    pub(super) region: RegionId,
}

impl TableScheme {
    /// Resolves `key` (an id of this scheme, `schemes[slot]`).
    pub(super) fn resolve(&self, slot: u16, key: &Key) -> Result<Decision, ResolveError> {
        let scheme = SchemeSlot::Table(slot);
        if !self.overrides.is_empty() {
            let created = self.kind.created_ms(key);
            for o in &self.overrides {
                let fields_hold = o.fields.iter().all(|&(f, lo, hi)| {
                    let v = self.kind.field(key, f);
                    lo <= v && v <= hi
                });
                let time_holds = (o.after_ms == 0 && o.before_ms == u64::MAX)
                    || created.is_some_and(|t| o.after_ms <= t && t < o.before_ms);
                if fields_hold && time_holds {
                    return Ok(Decision {
                        region: o.region,
                        rule: o.rule,
                        scheme,
                        id: 0,
                    });
                }
            }
        }
        match &self.routing {
            KeyRouting::Map {
                field,
                field_name,
                shift,
                mask,
                ranges,
                default,
            } => {
                let value = (self.kind.field(key, *field) >> shift) & mask;
                let i = ranges.partition_point(|r| r.0 <= value);
                if let Some(&(_, end, region)) = i.checked_sub(1).map(|i| &ranges[i]) {
                    if value <= end {
                        return Ok(Decision {
                            region,
                            rule: Rule::Map { value },
                            scheme,
                            id: 0,
                        });
                    }
                }
                match default {
                    Some(region) => Ok(Decision {
                        region: *region,
                        rule: Rule::SchemeDefault { value },
                        scheme,
                        id: 0,
                    }),
                    None => Err(ResolveError::Unmapped {
                        scheme: self.name.clone(),
                        field: field_name.clone(),
                        value,
                    }),
                }
            }
            KeyRouting::Hash(placer, regions) => {
                let bytes = match key {
                    Key::Composite(c) => c.key,
                    _ => &[],
                };
                // Validation leaves at least one region.
                let winner = placer.place(bytes).unwrap_or(0);
                Ok(Decision {
                    region: regions[winner],
                    rule: Rule::Hash,
                    scheme,
                    id: 0,
                })
            }
        }
    }
}
