//! Validation of `schemes:` (docs/schemes.md): every error with file:line:column, then compiled
//! into a [`TableScheme`] (`schemes.rs`); `moves_load.rs` checks the moves and overrides that
//! name a scheme.

use std::collections::HashMap;

use super::load::{key, Validator};
use super::model::{FieldSpec, MapKey, SchemeSpec};
use super::schemes::{KeyRouting, TableScheme};
use super::RegionId;
use crate::scheme::snowflake::Layout;
use crate::scheme::{hrw, Kind, IUID};
use crate::source::{locate, Seg};

/// A map key: a value `"150"` or an inclusive range `"0-3"`.
pub(super) fn parse_range(text: &str) -> Option<(u64, u64)> {
    let text = text.trim();
    match text.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
            (a <= b).then_some((a, b))
        }
        None => text.parse().ok().map(|v| (v, v)),
    }
}

impl Validator<'_> {
    /// Validates and compiles `schemes:`; `region_of` names the region of a region name
    /// (recording an error if there is none).
    pub(super) fn schemes(
        &mut self,
        specs: &[(String, SchemeSpec)],
        region_of: &mut impl FnMut(&mut Self, &str, &[Seg]) -> Option<RegionId>,
    ) -> Vec<TableScheme> {
        let mut out = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (name, spec) in specs {
            let nth = seen.entry(name).and_modify(|n| *n += 1).or_insert(0);
            let name_path = [key("schemes"), Seg::KeyName(name.clone(), *nth)];
            if *nth > 0 {
                self.error(&name_path, format!("scheme `{name}` is defined twice"));
                continue;
            }
            if name == IUID {
                self.error(
                    &name_path,
                    "`iuid` is built in and cannot be redefined; name the scheme otherwise",
                );
                continue;
            }
            if let Some(s) = self.scheme(name, spec, region_of) {
                out.push(s);
            }
        }
        out
    }

    fn scheme(
        &mut self,
        name: &str,
        spec: &SchemeSpec,
        region_of: &mut impl FnMut(&mut Self, &str, &[Seg]) -> Option<RegionId>,
    ) -> Option<TableScheme> {
        let at = |k: &str| vec![key("schemes"), key(name), key(k)];
        let kind = self.kind(name, spec)?;
        // Keys that belong to other kinds: a typo or a misunderstanding, never ignored.
        let misplaced: [(&str, bool, bool); 4] = [
            (
                "total_shards",
                spec.total_shards.is_some(),
                matches!(kind, Kind::UniqidShard { .. }),
            ),
            (
                "separator",
                spec.separator.is_some(),
                matches!(kind, Kind::Composite { .. }),
            ),
            (
                "layout",
                spec.layout.is_some(),
                matches!(kind, Kind::Snowflake(_)),
            ),
            (
                "fields",
                spec.fields.is_some(),
                matches!(kind, Kind::Snowflake(_)),
            ),
        ];
        for (k, given, belongs) in misplaced {
            if given && !belongs {
                self.error(
                    &at(k),
                    format!("`{k}` does not apply to kind `{}`", kind.name()),
                );
            }
        }
        let routing = if matches!(kind, Kind::Composite { .. }) {
            for (k, given) in [
                ("map", spec.map.is_some()),
                ("route_by", spec.route_by.is_some()),
                ("default", spec.default.is_some()),
            ] {
                if given {
                    self.error(
                        &at(k),
                        format!("a composite key is placed by `hash`, not `{k}`"),
                    );
                }
            }
            self.hash(name, spec, region_of)?
        } else {
            if spec.hash.is_some() {
                self.error(
                    &at("hash"),
                    "`hash` places composite keys; this kind routes by `map`",
                );
            }
            self.map(name, spec, &kind, region_of)?
        };
        Some(TableScheme {
            name: name.to_owned(),
            kind,
            routing,
            overrides: Vec::new(),
        })
    }

    fn kind(&mut self, name: &str, spec: &SchemeSpec) -> Option<Kind> {
        let at = |k: &str| vec![key("schemes"), key(name), key(k)];
        match spec.kind.as_str() {
            "guid_shard" => Some(Kind::GuidShard),
            "uniqid_shard" => match spec.total_shards {
                Some(n @ 1..=10) => Some(Kind::UniqidShard {
                    total_shards: n as u8,
                }),
                Some(n) => {
                    self.error(
                        &at("total_shards"),
                        format!("total_shards {n}: the shard is one decimal digit, so 1-10"),
                    );
                    None
                }
                None => {
                    self.error(&at("kind"), "a uniqid_shard scheme needs `total_shards`");
                    None
                }
            },
            "composite" => {
                let sep = spec.separator.as_deref().unwrap_or(":");
                match sep.as_bytes() {
                    [b] if b.is_ascii_graphic() && !b.is_ascii_digit() => {
                        Some(Kind::Composite { separator: *b })
                    }
                    _ => {
                        self.error(
                            &at("separator"),
                            format!("separator `{sep}`: one visible ASCII character, not a digit"),
                        );
                        None
                    }
                }
            }
            "snowflake" => {
                let layout = match (&spec.layout, &spec.fields) {
                    (Some(preset), None) => Layout::preset(preset).map_err(|e| (at("layout"), e)),
                    (None, Some(fields)) => custom_layout(fields).map_err(|e| (at("fields"), e)),
                    _ => {
                        self.error(
                            &at("kind"),
                            "a snowflake scheme needs exactly one of `layout` and `fields`",
                        );
                        return None;
                    }
                };
                match layout {
                    Ok(l) => Some(Kind::Snowflake(l)),
                    Err((path, e)) => {
                        self.error(&path, e.to_string());
                        None
                    }
                }
            }
            other => {
                self.error(
                    &at("kind"),
                    format!(
                        "unknown kind `{other}` (kinds: guid_shard, uniqid_shard, composite, \
                         snowflake; iuid is built in)"
                    ),
                );
                None
            }
        }
    }

    fn hash(
        &mut self,
        name: &str,
        spec: &SchemeSpec,
        region_of: &mut impl FnMut(&mut Self, &str, &[Seg]) -> Option<RegionId>,
    ) -> Option<KeyRouting> {
        let Some(hash) = &spec.hash else {
            self.error(
                &[key("schemes"), key(name), key("kind")],
                "a composite scheme needs `hash: { weights: { region: weight } }`",
            );
            return None;
        };
        let mut regions = Vec::new();
        for (region, weight) in &hash.weights.0 {
            let path = [
                key("schemes"),
                key(name),
                key("hash"),
                key("weights"),
                key(region.clone()),
            ];
            if !(weight.is_finite() && *weight > 0.0) {
                self.error(
                    &path,
                    format!("weight {weight} of `{region}`: weights are > 0"),
                );
                continue;
            }
            if let Some(id) = region_of(self, region, &path) {
                regions.push((region.clone(), *weight, id));
            }
        }
        if hash.weights.0.is_empty() {
            self.error(
                &[key("schemes"), key(name), key("hash"), key("weights")],
                "no region to place keys in",
            );
        }
        let weights: Vec<(&str, f64)> = regions.iter().map(|(n, w, _)| (n.as_str(), *w)).collect();
        let ids = regions.iter().map(|(_, _, id)| *id).collect();
        (!regions.is_empty()).then(|| KeyRouting::Hash(hrw::Placer::new(&weights), ids))
    }

    fn map(
        &mut self,
        name: &str,
        spec: &SchemeSpec,
        kind: &Kind,
        region_of: &mut impl FnMut(&mut Self, &str, &[Seg]) -> Option<RegionId>,
    ) -> Option<KeyRouting> {
        let at = |k: &str| vec![key("schemes"), key(name), key(k)];
        let fields = kind.fields();
        let (field_name, shift, bits) = match &spec.route_by {
            Some(r) => (r.field.clone(), r.shift.unwrap_or(0), r.bits),
            None if fields.len() == 1 => (fields[0].to_owned(), 0, None),
            None => {
                self.error(
                    &at("kind"),
                    format!(
                        "this scheme has several fields ({}): name one in `route_by: {{ field }}`",
                        fields.join(", ")
                    ),
                );
                return None;
            }
        };
        let Some(field) = fields.iter().position(|f| *f == field_name) else {
            self.error(
                &[key("schemes"), key(name), key("route_by"), key("field")],
                format!(
                    "`{field_name}` is not a field of this scheme (fields: {})",
                    fields.join(", ")
                ),
            );
            return None;
        };
        if shift > 63 || bits.is_some_and(|b| b == 0 || b > 64) {
            self.error(&at("route_by"), "shift is 0-63 and bits 1-64");
            return None;
        }
        let mask = match bits {
            Some(64) | None => u64::MAX,
            Some(b) => (1u64 << b) - 1,
        };
        let default = match &spec.default {
            Some(region) => Some(region_of(self, region, &at("default"))?),
            None => None,
        };
        let Some(map) = &spec.map else {
            self.error(
                &at("kind"),
                "this scheme needs a `map` of values to regions",
            );
            return None;
        };
        let mut ranges: Vec<(u64, u64, RegionId, usize)> = Vec::new();
        let mut seen_keys: HashMap<&str, usize> = HashMap::new();
        for (i, (MapKey(text), region)) in map.0.iter().enumerate() {
            let nth = seen_keys
                .entry(text.as_str())
                .and_modify(|n| *n += 1)
                .or_insert(0);
            let key_path = vec![
                key("schemes"),
                key(name),
                key("map"),
                Seg::KeyName(text.clone(), *nth),
            ];
            let Some((a, b)) = parse_range(text) else {
                self.error(
                    &key_path,
                    format!("`{text}` is not a value or an inclusive range `a-b` (a <= b)"),
                );
                continue;
            };
            let value_path = [key("schemes"), key(name), key("map"), key(text.clone())];
            if let Some(id) = region_of(self, region, &value_path) {
                ranges.push((a, b, id, i));
            }
        }
        ranges.sort_by_key(|r| (r.0, r.1));
        for pair in ranges.windows(2) {
            let (x, y) = (pair[0], pair[1]);
            if y.0 <= x.1 {
                let key_of = |i: usize| map.0[i].0 .0.clone();
                let (kx, ky) = (key_of(x.3), key_of(y.3));
                let other_line = locate(
                    &self.source.text,
                    &[
                        key("schemes"),
                        key(name),
                        key("map"),
                        Seg::KeyName(kx.clone(), 0),
                    ],
                )
                .map_or(String::new(), |(line, _)| format!(" (line {line})"));
                self.error(
                    &[
                        key("schemes"),
                        key(name),
                        key("map"),
                        Seg::KeyName(ky.clone(), 0),
                    ],
                    format!("map entry `{ky}` overlaps `{kx}`{other_line}"),
                );
            }
        }
        Some(KeyRouting::Map {
            field,
            field_name,
            shift,
            mask,
            ranges: ranges.into_iter().map(|(a, b, r, _)| (a, b, r)).collect(),
            default,
        })
    }
}

/// A custom snowflake layout from `fields:`.
fn custom_layout(fields: &[FieldSpec]) -> Result<Layout, crate::scheme::snowflake::LayoutError> {
    let named: Vec<(&str, u32)> = fields.iter().map(|f| (f.name.as_str(), f.bits)).collect();
    let time = fields.iter().find(|f| f.name == "time");
    Layout::new(
        &named,
        time.and_then(|f| f.unit_ms).unwrap_or(1),
        time.and_then(|f| f.epoch_ms).unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::source::Source;
    use crate::table::load_source;

    const HEAD: &str = "version: t\nregions:\n  eu: { upstreams: [\"http://127.0.0.1:1\"] }\n  us: { upstreams: [\"http://127.0.0.1:2\"] }\ndefault_region: eu\n";

    /// Every error of a table with `rest` after the regions, as `line:column: message`.
    fn errors(rest: &str) -> Vec<String> {
        let source = Source {
            path: PathBuf::from("t.yaml"),
            text: format!("{HEAD}{rest}"),
        };
        match load_source(&source) {
            Ok(_) => Vec::new(),
            Err(e) => {
                e.0.iter()
                    .map(|e| e.to_string().trim_start_matches("t.yaml:").to_owned())
                    .collect()
            }
        }
    }

    #[test]
    fn overlapping_ranges_are_named_with_both_lines() {
        let got = errors(
            "schemes:\n  legacy:\n    kind: uniqid_shard\n    total_shards: 8\n    map:\n      \"0-3\": eu\n      \"3-5\": us\n",
        );
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("12:7:"), "{got:?}");
        assert!(got[0].contains("`3-5` overlaps `0-3` (line 11)"), "{got:?}");
    }

    #[test]
    fn each_bad_scheme_is_reported_where_it_is() {
        let cases = [
            ("schemes:\n  s:\n    kind: snowflake\n    fields: [{ name: time, bits: 41 }, { name: node, bits: 10 }]\n    route_by: { field: node }\n    map: { \"0\": eu }\n", "9:13:", "sum to 51"),
            ("schemes:\n  t:\n    kind: composite\n    hash: { weights: { eu: 0 } }\n", "9:28:", "weights are > 0"),
            ("schemes:\n  t:\n    kind: composite\n    hash: { weights: { mars: 1 } }\n", "9:30:", "region `mars` is not defined"),
            ("schemes:\n  o:\n    kind: guid_shard\n    map: { \"1\": eu }\n    total_shards: 3\n", "10:19:", "`total_shards` does not apply"),
            ("schemes:\n  o:\n    kind: hotguid\n", "8:11:", "unknown kind `hotguid`"),
            ("schemes:\n  p:\n    kind: snowflake\n    layout: twitter\n    map: { \"0\": eu }\n", "8:11:", "name one in `route_by"),
            ("schemes:\n  iuid:\n    kind: guid_shard\n", "7:3:", "built in"),
            ("schemes:\n  o:\n    kind: guid_shard\n    map: { \"1\": eu }\noverrides:\n  - { scheme: o, shrad_key: 1, region: us }\n", "11:29:", "unknown key `shrad_key`"),
            ("overrides:\n  - { country: 1, shard: 1, region: us }\n", "7:26:", "unknown key `shard`"),
            ("schemes:\n  o:\n    kind: guid_shard\n    map: { \"1\": eu }\n    colour: red\n", "10:5:", "unknown field `colour`"),
        ];
        for (rest, at, words) in cases {
            let got = errors(rest);
            assert!(
                got.iter().any(|e| e.starts_with(at) && e.contains(words)),
                "{words:?} at {at} not in {got:?}\n{rest}"
            );
        }
    }

    #[test]
    fn maps_ranges_defaults_and_overrides_resolve() {
        let source = Source {
            path: PathBuf::from("t.yaml"),
            text: format!(
                "{HEAD}schemes:\n  posts:\n    kind: snowflake\n    layout: instagram\n    route_by: {{ field: shard, shift: 4, bits: 8 }}\n    map: {{ \"0-9\": eu, 20: us }}\n    default: us\noverrides:\n  - {{ scheme: posts, shard: 17, region: us }}\n  - {{ scheme: posts, created_before: \"2015-01-01T00:00:00Z\", region: us }}\n"
            ),
        };
        let table = load_source(&source).expect("valid");
        let layout = crate::scheme::snowflake::Layout::preset("instagram").expect("preset");
        let resolve = |shard: u64| {
            let id = layout
                // 200e9 ms after Instagram's epoch: 2017, after the time override's 2015.
                .compose(&[("time", 200_000_000_000), ("shard", shard)])
                .expect("id");
            let (_, d) = table
                .resolve_text("posts", id.to_string().as_bytes())
                .expect("resolves");
            (table.region(d.region).name.clone(), d.rule)
        };
        use crate::table::Rule;
        // shard >> 4 & 0xff is the value routed by.
        assert_eq!(resolve(9 << 4), ("eu".into(), Rule::Map { value: 9 }));
        assert_eq!(resolve(20 << 4), ("us".into(), Rule::Map { value: 20 }));
        assert_eq!(
            resolve(15 << 4),
            ("us".into(), Rule::SchemeDefault { value: 15 })
        );
        assert_eq!(resolve(17), ("us".into(), Rule::Override { index: 0 }));
        assert_eq!(resolve(1), ("eu".into(), Rule::Map { value: 0 }));
        // The time override: Instagram's epoch is 2011-08-24, so time 5 ms is before 2015.
        let old = layout
            .compose(&[("time", 5), ("shard", 9 << 4)])
            .expect("id");
        let late = layout
            .compose(&[("time", 200_000_000_000), ("shard", 9 << 4)])
            .expect("id");
        let region_of = |id: crate::scheme::snowflake::Snowflake| {
            let (_, d) = table
                .resolve_text("posts", id.to_string().as_bytes())
                .expect("resolves");
            (table.region(d.region).name.clone(), d.rule)
        };
        assert_eq!(region_of(old), ("us".into(), Rule::Override { index: 1 }));
        assert_eq!(region_of(late), ("eu".into(), Rule::Map { value: 9 }));
    }
}

#[cfg(test)]
mod time_bounds {
    use std::path::PathBuf;

    use crate::source::Source;
    use crate::table::load_source;

    /// docs/schemes.md: `created_before` and `created_after` are both strict, for the iUID and for a
    /// scheme alike. 2026-06-01T00:00:00Z is 1780272000000 ms.
    #[test]
    fn both_time_bounds_are_strict() {
        let source = Source {
            path: PathBuf::from("t.yaml"),
            text: "version: t\nregions:\n  eu: { upstreams: [\"http://127.0.0.1:1\"] }\n  us: { upstreams: [\"http://127.0.0.1:2\"] }\ncountries:\n  1: eu\nschemes:\n  trips: { kind: composite, hash: { weights: { eu: 1 } } }\noverrides:\n  - { country: 1, created_after: \"2026-06-01T00:00:00Z\", region: us }\n  - { scheme: trips, created_after: \"2026-06-01T00:00:00Z\", region: us }\ndefault_region: eu\n".into(),
        };
        let table = load_source(&source).expect("valid");
        let at = 1_780_272_000_000u64;
        let region = |scheme: &str, text: String| {
            let (_, d) = table
                .resolve_text(scheme, text.as_bytes())
                .expect("resolves");
            table.region(d.region).name.clone()
        };
        let iuid = |ms: u64| iuid::Iuid::from_fields(ms, 1, 1, 7).to_string();
        assert_eq!(
            region("iuid", iuid(at)),
            "eu",
            "the instant itself is not after it"
        );
        assert_eq!(region("iuid", iuid(at + 1)), "us");
        assert_eq!(region("trips", format!("dev:{at}")), "eu");
        assert_eq!(region("trips", format!("dev:{}", at + 1)), "us");
    }
}
