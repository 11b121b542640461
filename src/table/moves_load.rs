//! Validation of `moves:` (docs/routing-table.md `moves`) and of the matchers moves and
//! overrides share, every error with file:line:column. A move compiles like an override tried
//! before every override: into the iUID plans (`load.rs`) or first in its scheme's list.

use std::collections::HashMap;

use super::load::{key, Validator};
use super::model::{MapKey, MatchSpec, MoveSpec, NameOrId, OverrideSpec};
use super::schemes::{SchemeOverride, TableScheme};
use super::schemes_load::parse_range;
use super::{FieldMatch, Move, MovePhase, Override, RegionId, Rule};
use crate::scheme::IUID;
use crate::source::{locate, Seg};

/// `mirror_ratio` when a move does not give one.
const DEFAULT_MIRROR_RATIO: f64 = 0.1;
/// `hold_ms` when a move does not give one.
const DEFAULT_HOLD_MS: u64 = 5000;
/// The longest `hold_ms` accepted (10 minutes).
const MAX_HOLD_MS: u64 = 600_000;

/// A table scheme's compiled matcher: the scheme's index in `schemes` and its
/// `(field index, lo, hi)` predicates.
type SchemeMatch = (usize, Vec<(usize, u64, u64)>);

/// A validated matcher.
struct Matched {
    /// As reported; `region` is left empty for the caller.
    reported: Override,
    /// A table scheme's (`None` for the iUID, or a scheme not defined).
    compiled: Option<SchemeMatch>,
}

impl Matched {
    /// Places the rule: a table scheme's goes to the end of that scheme's list (`None`
    /// returned), an iUID one is for the plans (`region` returned).
    fn place(
        self,
        schemes: &mut [TableScheme],
        rule: Rule,
        region: Option<RegionId>,
    ) -> (Override, Option<RegionId>) {
        if self.reported.scheme.is_none() {
            return (self.reported, region);
        }
        if let (Some((slot, fields)), Some(region)) = (self.compiled, region) {
            schemes[slot].overrides.push(SchemeOverride {
                rule,
                fields,
                after_ms: self.reported.created_after_ms.unwrap_or(0),
                before_ms: self.reported.created_before_ms.unwrap_or(u64::MAX),
                region,
            });
        }
        (self.reported, None)
    }
}

impl Validator<'_> {
    /// Validates the matchers at `base` (`overrides[i]` or `moves[i].match`) of a rule that
    /// `what` names in messages (`override`, `move`).
    fn matcher(
        &mut self,
        base: &[Seg],
        what: &str,
        m: &MatchSpec,
        services: &HashMap<String, u8>,
        schemes: &[TableScheme],
    ) -> Matched {
        let at = |k: &str| {
            let mut p = base.to_vec();
            p.push(key(k));
            p
        };
        let before = self.instant(m.created_before.as_deref(), &at("created_before"));
        let after = self.instant_after(m.created_after.as_deref(), &at("created_after"));
        if let (Some(b), Some(a)) = (before, after) {
            if a >= b {
                self.error(
                    &at("created_after"),
                    format!(
                        "created_after is not earlier than created_before: the {what} can never \
                         match"
                    ),
                );
            }
        }
        let mut reported = Override {
            service: None,
            country: None,
            created_before_ms: before,
            created_after_ms: after,
            scheme: None,
            fields: Vec::new(),
            region: String::new(),
        };
        let timed = m.created_before.is_some() || m.created_after.is_some();
        let Some(name) = m.scheme.as_deref().filter(|s| *s != IUID) else {
            self.iuid_matcher(base, what, m, services, &mut reported);
            return Matched {
                reported,
                compiled: None,
            };
        };
        reported.scheme = Some(name.to_owned());
        let Some(slot) = schemes.iter().position(|s| s.name == name) else {
            self.error(
                &at("scheme"),
                format!("scheme `{name}` is not defined under `schemes`"),
            );
            return Matched {
                reported,
                compiled: None,
            };
        };
        for (k, given) in [
            ("service", m.service.is_some()),
            ("country", m.country.is_some()),
        ] {
            if given {
                self.error(
                    &at(k),
                    format!("`{k}` is an iUID field; scheme `{name}` has none"),
                );
            }
        }
        let names = schemes[slot].kind.fields();
        let mut fields = Vec::new();
        for (field, MapKey(text)) in &m.fields.0 {
            let Some(i) = names.iter().position(|n| n == field) else {
                self.error(
                    &at(field),
                    format!(
                        "unknown key `{field}`: not a field of scheme `{name}` (fields: {})",
                        names.join(", ")
                    ),
                );
                continue;
            };
            if text.trim_start().starts_with('-') {
                self.error(&at(field), format!("{field} {text} is negative"));
                continue;
            }
            match parse_range(text) {
                Some((lo, hi)) => {
                    fields.push((i, lo, hi));
                    reported.fields.push((field.clone(), FieldMatch { lo, hi }));
                }
                None => self.error(
                    &at(field),
                    format!(
                        "{field} `{text}` is not a value or an inclusive range `lo-hi` (lo <= hi)"
                    ),
                ),
            }
        }
        if m.fields.0.is_empty() && !timed {
            self.error(
                base,
                format!("{what} has no condition (a field, created_before, created_after)"),
            );
        }
        if timed && !schemes[slot].kind.has_time() {
            self.error(
                &at("scheme"),
                format!("scheme `{name}` has no `time` field for created_before/created_after"),
            );
        }
        Matched {
            reported,
            compiled: Some((slot, fields)),
        }
    }

    /// [`Validator::matcher`] for the iUID: service, country and times.
    fn iuid_matcher(
        &mut self,
        base: &[Seg],
        what: &str,
        m: &MatchSpec,
        services: &HashMap<String, u8>,
        reported: &mut Override,
    ) {
        let at = |k: &str| {
            let mut p = base.to_vec();
            p.push(key(k));
            p
        };
        for (field, _) in &m.fields.0 {
            self.error(
                &at(field),
                format!(
                    "unknown key `{field}` (an iUID {what} has service, country, \
                     created_before, created_after; field predicates need `scheme:`)"
                ),
            );
        }
        reported.service = match &m.service {
            None => None,
            Some(NameOrId::Id(raw)) => self.byte_id("service", *raw, &at("service")),
            Some(NameOrId::Name(name)) => {
                let found = services.get(name).copied();
                if found.is_none() {
                    self.error(
                        &at("service"),
                        format!("service `{name}` is not named under `services`"),
                    );
                }
                found
            }
        };
        reported.country = m
            .country
            .and_then(|raw| self.byte_id("country", raw, &at("country")));
        if m.service.is_none()
            && m.country.is_none()
            && m.created_before.is_none()
            && m.created_after.is_none()
        {
            let hint = match what {
                "override" => ": use default_region or the country map instead",
                _ => "",
            };
            self.error(
                base,
                format!(
                    "{what} has no condition (service, country, created_before, \
                     created_after){hint}"
                ),
            );
        }
    }

    /// Validates `overrides:` and places each: a table scheme's in that scheme's list (after
    /// the moves), an iUID one for the plans (its region returned, index for index).
    pub(super) fn overrides(
        &mut self,
        specs: &[OverrideSpec],
        services: &HashMap<String, u8>,
        schemes: &mut [TableScheme],
        region_of: &mut impl FnMut(&mut Self, &str, &[Seg]) -> Option<RegionId>,
    ) -> (Vec<Override>, Vec<Option<RegionId>>) {
        let mut overrides = Vec::with_capacity(specs.len());
        let mut regions = Vec::with_capacity(specs.len());
        for (i, spec) in specs.iter().enumerate() {
            let base = [key("overrides"), Seg::Index(i)];
            let matched = self.matcher(&base, "override", &spec.matcher, services, schemes);
            let region_path = [key("overrides"), Seg::Index(i), key("region")];
            let region = region_of(self, &spec.region, &region_path);
            let (mut o, region) = matched.place(schemes, Rule::Override { index: i }, region);
            o.region = spec.region.clone();
            overrides.push(o);
            regions.push(region);
        }
        (overrides, regions)
    }

    /// Validates `moves:` and places each move's matcher: a table scheme's first in that
    /// scheme's list (before any override, which is placed after), an iUID one for the plans.
    pub(super) fn moves(
        &mut self,
        specs: &[MoveSpec],
        services: &HashMap<String, u8>,
        schemes: &mut [TableScheme],
        region_of: &mut impl FnMut(&mut Self, &str, &[Seg]) -> Option<RegionId>,
    ) -> Vec<Move> {
        let mut out = Vec::with_capacity(specs.len());
        let mut names: HashMap<&str, usize> = HashMap::new();
        for (i, spec) in specs.iter().enumerate() {
            let at = |k: &str| vec![key("moves"), Seg::Index(i), key(k)];
            let name = spec.name.as_str();
            if name.is_empty()
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            {
                self.error(
                    &at("name"),
                    format!("move name `{name}`: only a-z, 0-9 and `-` ([a-z0-9-]+)"),
                );
            } else if let Some(&first) = names.get(name) {
                let line = locate(
                    &self.source.text,
                    &[key("moves"), Seg::Index(first), key("name")],
                )
                .map_or(String::new(), |(line, _)| format!(" (line {line})"));
                self.error(
                    &at("name"),
                    format!("move name `{name}` is already used by moves[{first}]{line}"),
                );
            } else {
                names.insert(name, i);
            }
            let matched = self.matcher(&at("match"), "move", &spec.matcher, services, schemes);
            let from = region_of(self, &spec.from, &at("from"));
            let to = region_of(self, &spec.to, &at("to"));
            if spec.from == spec.to {
                self.error(
                    &at("to"),
                    format!(
                        "`to` is `from` (`{}`): a move goes to another region",
                        spec.to
                    ),
                );
            }
            let mirror_ratio = spec.mirror_ratio.unwrap_or(DEFAULT_MIRROR_RATIO);
            if !(0.0..=1.0).contains(&mirror_ratio) {
                self.error(
                    &at("mirror_ratio"),
                    format!("mirror_ratio {mirror_ratio}: a share of requests, 0 to 1"),
                );
            }
            let hold_ms = match spec.hold_ms {
                None => DEFAULT_HOLD_MS,
                Some(ms) => match u64::try_from(ms) {
                    Ok(ms @ 1..=MAX_HOLD_MS) => ms,
                    _ => {
                        self.error(
                            &at("hold_ms"),
                            format!("hold_ms {ms}: 1 to {MAX_HOLD_MS} ms"),
                        );
                        DEFAULT_HOLD_MS
                    }
                },
            };
            // With an error recorded no table is built, so a placeholder region is harmless.
            let (from, to) = (from.unwrap_or(RegionId(0)), to.unwrap_or(RegionId(0)));
            let serving = match spec.phase {
                MovePhase::Mirror | MovePhase::Fence => from,
                MovePhase::Flip => to,
            };
            let (mut matcher, _) = matched.place(schemes, Rule::Move { index: i }, Some(serving));
            matcher.region = match spec.phase {
                MovePhase::Mirror | MovePhase::Fence => spec.from.clone(),
                MovePhase::Flip => spec.to.clone(),
            };
            out.push(Move {
                name: spec.name.clone(),
                matcher,
                from,
                to,
                from_name: spec.from.clone(),
                to_name: spec.to.clone(),
                phase: spec.phase,
                mirror_ratio,
                hold_ms,
            });
        }
        out
    }
}
