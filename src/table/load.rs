//! Validation and compilation of a routing table file (docs/routing-table.md).
//!
//! Every semantic error is collected (not just the first) and located in the file, so that
//! `iuid-router check` lists all a table's problems at once. A table with any error is never
//! returned, hence never installed.

use std::collections::HashMap;
use std::path::Path;

use super::model::{CountrySpec, TableFile};
use super::{
    Decision, Move, Override, Plan, Region, RegionId, RoutingTable, Rule, SchemeSlot, TimedStep,
    UpstreamSpec,
};
use crate::source::{Seg, Source, SourceError, SourceErrors};

/// Reads, validates and compiles the table at `path`.
pub fn load_file(path: &Path) -> Result<RoutingTable, SourceErrors> {
    let source = Source::read(path).map_err(|e| SourceErrors(vec![e]))?;
    load_source(&source)
}

/// Validates and compiles a table already read; errors point into `source`.
pub fn load_source(source: &Source) -> Result<RoutingTable, SourceErrors> {
    let file: TableFile = source.parse().map_err(|e| SourceErrors(vec![e]))?;
    let mut v = Validator {
        source,
        errors: Vec::new(),
    };
    match v.build(file) {
        Some(table) if v.errors.is_empty() => Ok(table),
        _ => Err(SourceErrors(v.errors)),
    }
}

pub(super) struct Validator<'s> {
    pub(super) source: &'s Source,
    errors: Vec<SourceError>,
}

/// The path segment of a mapping key.
pub(super) fn key(s: impl Into<String>) -> Seg {
    Seg::Key(s.into())
}

/// Region names go into `Via` and metric labels, so they must be HTTP tokens.
fn is_region_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl Validator<'_> {
    pub(super) fn error(&mut self, path: &[Seg], message: impl Into<String>) {
        self.errors.push(self.source.error_at(path, message));
    }

    /// The compiled table, or `None` when any error was recorded.
    fn build(&mut self, file: TableFile) -> Option<RoutingTable> {
        let regions = self.regions(&file);
        let names: HashMap<&str, RegionId> = regions
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name.as_str(), RegionId(i as u16)))
            .collect();

        let mut region_of = |v: &mut Self, name: &str, path: &[Seg]| -> Option<RegionId> {
            let found = names.get(name).copied();
            if found.is_none() {
                let known: Vec<&str> = regions.iter().map(|r| r.name.as_str()).collect();
                v.error(
                    path,
                    format!(
                        "region `{name}` is not defined under `regions` (defined: {})",
                        known.join(", ")
                    ),
                );
            }
            found
        };

        // Countries.
        let mut country_codes: Box<[Option<String>; 256]> = Box::new([const { None }; 256]);
        let mut country_region: [Option<RegionId>; 256] = [None; 256];
        let mut seen = HashMap::new();
        for (raw, spec) in &file.countries.0 {
            let CountrySpec { code, region } = spec;
            let nth = seen.entry(*raw).and_modify(|n| *n += 1).or_insert(0usize);
            let key_path = [key("countries"), Seg::KeyName(raw.to_string(), *nth)];
            let Some(id) = self.byte_id("country", *raw, &key_path) else {
                continue;
            };
            if *nth > 0 {
                self.error(&key_path, format!("country {raw} is listed twice"));
                continue;
            }
            let mut value_path = vec![key("countries"), key(raw.to_string())];
            if code.is_some() {
                value_path.push(key("region"));
            }
            country_region[usize::from(id)] = region_of(self, region, &value_path);
            country_codes[usize::from(id)] = code.clone();
        }

        // Services.
        let mut service_names: Box<[Option<String>; 256]> = Box::new([const { None }; 256]);
        let mut service_by_name: HashMap<String, u8> = HashMap::new();
        let mut seen = HashMap::new();
        for (raw, name) in &file.services.0 {
            let nth = seen.entry(*raw).and_modify(|n| *n += 1).or_insert(0usize);
            let key_path = [key("services"), Seg::KeyName(raw.to_string(), *nth)];
            let Some(id) = self.byte_id("service", *raw, &key_path) else {
                continue;
            };
            if *nth > 0 {
                self.error(&key_path, format!("service {raw} is listed twice"));
                continue;
            }
            let value_path = [key("services"), key(raw.to_string())];
            if name.is_empty() {
                self.error(&value_path, "service name is empty");
            } else if let Some(other) = service_by_name.insert(name.clone(), id) {
                self.error(
                    &value_path,
                    format!("service name `{name}` is already used by service {other}"),
                );
            }
            service_names[usize::from(id)] = Some(name.clone());
        }

        // Schemes, then moves and overrides (which may name them), moves first: a scheme tries
        // its rules in the order they are placed.
        let mut schemes = self.schemes(&file.schemes.0, &mut region_of);
        let moves = self.moves(&file.moves, &service_by_name, &mut schemes, &mut region_of);
        let (overrides, override_regions) = self.overrides(
            &file.overrides,
            &service_by_name,
            &mut schemes,
            &mut region_of,
        );

        let default_region = region_of(self, &file.default_region, &[key("default_region")]);
        let failovers = self.failovers(&file, &names);

        if !self.errors.is_empty() {
            return None;
        }
        let mut regions = regions;
        for (region, failover) in regions.iter_mut().zip(failovers) {
            region.failover = failover;
        }
        let table = compile(
            file.version,
            regions,
            schemes,
            moves,
            (overrides, &override_regions),
            country_region,
            default_region?,
        );
        Some(table.with_names(country_codes, service_names))
    }

    /// A region's TLS client config (for its `https://` upstreams), if any: built from its
    /// `tls:` (files relative to the table) or the system's roots.
    fn region_tls(
        &mut self,
        spec: &super::model::RegionSpec,
        region_path: &[Seg],
    ) -> Option<(std::sync::Arc<rustls::ClientConfig>, Option<String>, String)> {
        let https = spec.upstreams.iter().any(|u| u.starts_with("https://"));
        let tls_path = |k: &str| {
            let mut p = region_path.to_vec();
            p.push(key("tls"));
            if !k.is_empty() {
                p.push(key(k));
            }
            p
        };
        if !https {
            if spec.tls.is_some() {
                self.error(
                    &tls_path(""),
                    "tls applies to https:// upstreams; this region has none",
                );
            }
            return None;
        }
        let base = self
            .source
            .path
            .parent()
            .unwrap_or(std::path::Path::new("."))
            .to_path_buf();
        let t = spec.tls.as_ref();
        let file = |f: &Option<String>| f.as_ref().map(|f| base.join(f));
        let (ca, cert, key_file) = (
            t.and_then(|t| file(&t.ca)),
            t.and_then(|t| file(&t.client_cert)),
            t.and_then(|t| file(&t.client_key)),
        );
        let files = crate::tls::client::TlsFiles {
            ca: ca.as_deref(),
            client_cert: cert.as_deref(),
            client_key: key_file.as_deref(),
        };
        let alpn: &[&[u8]] = match spec.protocol {
            super::UpstreamProtocol::H2 => &[b"h2"],
            super::UpstreamProtocol::Http1 => &[b"http/1.1"],
        };
        match crate::tls::client::client_config(&files, alpn) {
            Ok(config) => {
                // The files' contents too: a renewed certificate makes a new identity.
                let mut identity = String::new();
                for path in [&ca, &cert, &key_file].into_iter().flatten() {
                    let bytes = std::fs::read(path).unwrap_or_default();
                    let digest = <sha2::Sha256 as sha2::Digest>::digest(&bytes);
                    identity.push_str(&format!(
                        "{}#{:02x}{:02x}{:02x}{:02x};",
                        path.display(),
                        digest[0],
                        digest[1],
                        digest[2],
                        digest[3]
                    ));
                }
                let server_name = t.and_then(|t| t.server_name.clone());
                Some((config, server_name, identity))
            }
            Err(e) => {
                let at = if e.contains("client_")
                    || cert
                        .as_ref()
                        .is_some_and(|c| e.starts_with(&c.display().to_string()))
                {
                    "client_cert"
                } else if key_file
                    .as_ref()
                    .is_some_and(|k| e.starts_with(&k.display().to_string()))
                {
                    "client_key"
                } else {
                    "ca"
                };
                self.error(&tls_path(at), e);
                None
            }
        }
    }

    fn regions(&mut self, file: &TableFile) -> Vec<Region> {
        let mut regions: Vec<Region> = Vec::new();
        let mut seen: HashMap<&str, usize> = HashMap::new();
        if file.regions.0.is_empty() {
            self.error(&[key("regions")], "at least one region is required");
        }
        for (name, spec) in &file.regions.0 {
            let nth = seen.entry(name).and_modify(|n| *n += 1).or_insert(0);
            let key_path = [key("regions"), Seg::KeyName(name.clone(), *nth)];
            if *nth > 0 {
                self.error(&key_path, format!("region `{name}` is defined twice"));
                continue;
            }
            if !is_region_name(name) {
                self.error(
                    &key_path,
                    format!("region name `{name}` may only hold letters, digits, `-`, `_`, `.`"),
                );
            } else if matches!(name.as_str(), "none" | "all") {
                // Metrics label requests refused before a region was chosen `region="none"`
                // and fan-outs `region="all"`: a region of that name would be counted with them.
                self.error(
                    &key_path,
                    format!("region name `{name}` is reserved: metrics label requests with no region `none` and fan-outs `all`"),
                );
            }
            let up_path = [key("regions"), key(name.clone()), key("upstreams")];
            if spec.upstreams.is_empty() {
                self.error(&up_path, format!("region `{name}` has no upstreams"));
            }
            let region_path = [key("regions"), key(name.clone())];
            let tls = self.region_tls(spec, &region_path);
            let mut upstreams: Vec<UpstreamSpec> = Vec::new();
            for (i, url) in spec.upstreams.iter().enumerate() {
                let path = [
                    key("regions"),
                    key(name.clone()),
                    key("upstreams"),
                    Seg::Index(i),
                ];
                match super::upstream_url::parse_upstream(url, spec, tls.as_ref()) {
                    Ok(u) => {
                        if upstreams.iter().any(|x| x.authority == u.authority) {
                            self.error(&path, format!("upstream `{url}` is listed twice"));
                        }
                        upstreams.push(u);
                    }
                    Err(why) => self.error(&path, format!("upstream `{url}`: {why}")),
                }
            }
            regions.push(Region {
                name: name.clone(),
                upstreams,
                failover: None,
            });
        }
        if regions.len() > usize::from(u16::MAX) {
            self.error(&[key("regions")], "too many regions");
        }
        regions
    }

    /// Checks an 8-bit iUID field value written as a YAML integer.
    pub(super) fn byte_id(&mut self, what: &str, raw: i64, path: &[Seg]) -> Option<u8> {
        match u8::try_from(raw) {
            Ok(id) => Some(id),
            Err(_) => {
                self.error(
                    path,
                    format!("{what} id {raw} is out of range: iUID {what} ids are 0–255"),
                );
                None
            }
        }
    }

    /// `created_before`: the first whole millisecond at or after the instant, the unit ids'
    /// times compare in (an id at ms `t` was minted strictly before `x` iff `t < ceil(x)`).
    pub(super) fn instant(&mut self, text: Option<&str>, path: &[Seg]) -> Option<u64> {
        self.instant_ns(text, path)
            .map(|ns| ns.div_euclid(1_000_000) + i128::from(ns.rem_euclid(1_000_000) != 0))
            .map(|ms| ms.clamp(0, i128::from(u64::MAX)) as u64)
    }

    /// `created_after`: the first whole millisecond strictly after the instant (docs/schemes.md:
    /// both bounds are strict), so that `after <= t` holds iff the id at ms `t` was minted
    /// after `x`: `t > x` iff `t >= floor(x) + 1`.
    pub(super) fn instant_after(&mut self, text: Option<&str>, path: &[Seg]) -> Option<u64> {
        self.instant_ns(text, path)
            .map(|ns| ns.div_euclid(1_000_000) + 1)
            .map(|ms| ms.clamp(0, i128::from(u64::MAX)) as u64)
    }

    /// An RFC 3339 instant in ns since the epoch.
    fn instant_ns(&mut self, text: Option<&str>, path: &[Seg]) -> Option<i128> {
        let text = text?;
        match time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339) {
            Ok(t) => Some(t.unix_timestamp_nanos()),
            Err(e) => {
                self.error(
                    path,
                    format!(
                        "`{text}` is not an RFC 3339 timestamp ({e}); e.g. 2026-06-01T00:00:00Z"
                    ),
                );
                None
            }
        }
    }
}

/// A rule of the iUID plans, in the order they are tried: moves, then overrides.
struct PlanRule<'a> {
    matcher: &'a Override,
    rule: Rule,
    region: RegionId,
}

/// Folds moves, overrides and the country map into one plan per (country, service_entity)
/// pair.
fn compile(
    version: String,
    regions: Vec<Region>,
    schemes: Vec<super::TableScheme>,
    moves: Vec<Move>,
    (overrides, override_regions): (Vec<Override>, &[Option<RegionId>]),
    country_region: [Option<RegionId>; 256],
    default_region: RegionId,
) -> RoutingTable {
    let moved = moves
        .iter()
        .enumerate()
        .filter(|(_, m)| m.matcher.scheme.is_none())
        .map(|(index, m)| PlanRule {
            matcher: &m.matcher,
            rule: Rule::Move { index },
            region: m.serving(),
        });
    let overridden = overrides
        .iter()
        .zip(override_regions)
        .enumerate()
        .filter_map(|(index, (o, region))| {
            Some(PlanRule {
                matcher: o,
                rule: Rule::Override { index },
                region: (*region)?,
            })
        });
    let rules: Vec<PlanRule> = moved.chain(overridden).collect();
    let mut plans: Vec<Plan> = Vec::new();
    let mut plan_ids: HashMap<Plan, u16> = HashMap::new();
    let mut plan_index = vec![0u16; 1 << 16].into_boxed_slice();
    for country in 0..=255u8 {
        for service in 0..=255u8 {
            let plan = plan_for(country, service, &rules, &country_region);
            let next = plans.len() as u16;
            let id = *plan_ids.entry(plan.clone()).or_insert_with(|| {
                plans.push(plan);
                next
            });
            plan_index[(usize::from(country) << 8) | usize::from(service)] = id;
        }
    }
    RoutingTable {
        version,
        regions,
        moves,
        overrides,
        default_region,
        schemes,
        country_codes: Box::new([const { None }; 256]),
        country_region,
        service_names: Box::new([const { None }; 256]),
        plan_index,
        plans,
    }
}

fn plan_for(
    country: u8,
    service: u8,
    rules: &[PlanRule],
    country_region: &[Option<RegionId>; 256],
) -> Plan {
    let mut timed = Vec::new();
    for r in rules {
        let o = r.matcher;
        if o.country.is_some_and(|c| c != country) || o.service.is_some_and(|s| s != service) {
            continue;
        }
        let decision = Decision {
            region: r.region,
            rule: r.rule,
            scheme: SchemeSlot::Iuid,
            id: 0,
        };
        if o.created_before_ms.is_none() && o.created_after_ms.is_none() {
            return Plan {
                timed: timed.into_boxed_slice(),
                otherwise: Some(decision),
            };
        }
        timed.push(TimedStep {
            after_ms: o.created_after_ms.unwrap_or(0),
            before_ms: o.created_before_ms.unwrap_or(u64::MAX),
            decision,
        });
    }
    Plan {
        timed: timed.into_boxed_slice(),
        otherwise: country_region[usize::from(country)].map(|region| Decision {
            region,
            rule: Rule::Country { country },
            scheme: SchemeSlot::Iuid,
            id: 0,
        }),
    }
}

impl RoutingTable {
    fn with_names(
        mut self,
        country_codes: Box<[Option<String>; 256]>,
        service_names: Box<[Option<String>; 256]>,
    ) -> Self {
        self.country_codes = country_codes;
        self.service_names = service_names;
        self
    }
}
