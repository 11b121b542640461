//! The routing table (SPEC §5): which region owns an id.
//!
//! The file ([`model`]) is validated and compiled once per load ([`load`]) into a
//! [`RoutingTable`] whose [`RoutingTable::resolve`] is a couple of array reads: every
//! (country, service_entity) pair — 65 536 of them — is mapped at load to a *plan*: the
//! overrides with a time predicate that could still match it, in order, then the decision that
//! holds otherwise. Overrides without time predicates and the country map fold into that final
//! decision, so the usual lookup touches no list at all. Plans are deduplicated, so the whole
//! table costs 128 KiB of indexes plus a few plans.
//!
//! The live table is swapped whole (`arc-swap`) by the reloader; a table is immutable once
//! built, which is what lets requests in flight finish on the table they started with.

mod live;
mod load;
pub mod model;
pub mod watch;

use http::uri::Authority;
use iuid::{Iuid, ParseError};
use serde::Serialize;

use crate::metrics::RuleLabel;
use crate::scheme::iuid::IuidKey;
use crate::scheme::{Key, Scheme};

pub use live::{rfc3339_ms, LiveTable, ReloadError, ReloadOutcome, TableStatus};
pub use load::{load_file, load_source};

/// Index of a region in [`RoutingTable::regions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub u16);

/// Which rule of the table decided a route; serialized for `resolve` (SPEC §3) as
/// `{"kind": "override", "index": 0}`, `{"kind": "country", "country": 3}` or
/// `{"kind": "default_region"}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Rule {
    /// `overrides[index]` matched (0-based, file order).
    Override {
        /// Position in the `overrides` list.
        index: usize,
    },
    /// The country map's entry for this country.
    Country {
        /// The iUID country id.
        country: u8,
    },
    /// The id has no routing bits (not an iUID), so `default_region` applies.
    DefaultRegion,
    /// The request carried no id and `unrouted: default_region` sent it to the default.
    Unrouted,
}

impl Rule {
    /// The rule's kind, as `iuid_router_routing_decisions_total` labels it.
    pub fn label(&self) -> RuleLabel {
        match self {
            Rule::Override { .. } => RuleLabel::Override,
            Rule::Country { .. } => RuleLabel::Country,
            Rule::DefaultRegion => RuleLabel::DefaultRegion,
            Rule::Unrouted => RuleLabel::Unrouted,
        }
    }
}

/// The outcome of [`RoutingTable::resolve`]: where to send the request, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    /// The owning region.
    pub region: RegionId,
    /// The rule that matched.
    pub rule: Rule,
}

/// Why an id has no region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResolveError {
    /// The text is not an id of the route's scheme (SPEC §6: 400).
    Malformed(ParseError),
    /// A well-formed iUID whose country no region owns and no override covers (SPEC §6: 404).
    UnownedCountry {
        /// The iUID country id.
        country: u8,
        /// The iUID service_entity id.
        service_entity: u8,
    },
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolveError::Malformed(e) => write!(f, "not a valid id: {e}"),
            ResolveError::UnownedCountry {
                country,
                service_entity,
            } => write!(
                f,
                "no region owns country {country} (service_entity {service_entity}): \
                 it is not in the routing table's countries and no override matches"
            ),
        }
    }
}

/// One upstream of a region as the table names it: where to connect (`http://host:port`).
/// Its runtime (pool, health) is `crate::upstream`'s, keyed by the authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamSpec {
    /// The URL as written in the table, for humans.
    pub url: String,
    /// `host:port` to connect to and to send as `Host`.
    pub authority: Authority,
}

/// A region as the table names it. Its runtime (balancing cursor, retry budget, metrics)
/// is `crate::upstream`'s, keyed by the name, so it outlives a reload.
#[derive(Debug, Clone)]
pub struct Region {
    /// The name used in the table, `Via` and metrics.
    pub name: String,
    /// At least one.
    pub upstreams: Vec<UpstreamSpec>,
}

/// An override rule as loaded, for reporting.
#[derive(Debug, Clone, Serialize)]
pub struct Override {
    /// Service entity id predicate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service: Option<u8>,
    /// Country id predicate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub country: Option<u8>,
    /// Matches ids whose `unix_ts_ms` is below this (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_before_ms: Option<u64>,
    /// Matches ids whose `unix_ts_ms` is at or above this (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_after_ms: Option<u64>,
    /// Target region name.
    pub region: String,
}

/// A time-conditional step of a plan: applies when `after_ms <= ts < before_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TimedStep {
    after_ms: u64,
    before_ms: u64,
    decision: Decision,
}

/// What to do for one (country, service_entity) pair.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Plan {
    timed: Box<[TimedStep]>,
    otherwise: Option<Decision>,
}

/// A validated, compiled routing table (SPEC §5). Immutable; share it behind an `Arc`.
#[derive(Debug)]
pub struct RoutingTable {
    /// The file's `version` text.
    pub version: String,
    /// Regions in file order; [`RegionId`] indexes this.
    pub regions: Vec<Region>,
    /// Overrides in file order.
    pub overrides: Vec<Override>,
    /// Region for ids without routing bits and for unrouted requests.
    pub default_region: RegionId,
    country_codes: Box<[Option<String>; 256]>,
    country_owned: [bool; 256],
    service_names: Box<[Option<String>; 256]>,
    /// `(country << 8) | service_entity` → index into `plans`.
    plan_index: Box<[u16]>,
    plans: Vec<Plan>,
}

impl RoutingTable {
    /// Parses an id's text with `scheme` and resolves it: the id's key and the decision.
    ///
    /// Errors: [`ResolveError::Malformed`] when the text is not an id of the scheme, else as
    /// [`RoutingTable::resolve`].
    #[inline]
    pub fn resolve_text(
        &self,
        scheme: Scheme,
        text: &[u8],
    ) -> Result<(Key, Decision), ResolveError> {
        let key = scheme.parse(text).map_err(ResolveError::Malformed)?;
        self.resolve(&key).map(|decision| (key, decision))
    }

    /// The region that owns the id of `key` and the rule that said so. O(1): two array reads,
    /// plus one comparison per time-conditional override that names this country/service.
    #[inline]
    pub fn resolve(&self, key: &Key) -> Result<Decision, ResolveError> {
        match key {
            Key::Iuid(IuidKey::Iuid(iuid)) => self.resolve_iuid(iuid),
            Key::Iuid(IuidKey::NoRoutingBits(_)) => Ok(Decision {
                region: self.default_region,
                rule: Rule::DefaultRegion,
            }),
        }
    }

    /// [`RoutingTable::resolve`] for an iUID.
    #[inline]
    pub fn resolve_iuid(&self, id: &Iuid) -> Result<Decision, ResolveError> {
        let key = (usize::from(id.country()) << 8) | usize::from(id.service_entity());
        let plan = &self.plans[usize::from(self.plan_index[key])];
        if !plan.timed.is_empty() {
            let ts = id.unix_ts_ms();
            for step in plan.timed.iter() {
                if step.after_ms <= ts && ts < step.before_ms {
                    return Ok(step.decision);
                }
            }
        }
        plan.otherwise.ok_or(ResolveError::UnownedCountry {
            country: id.country(),
            service_entity: id.service_entity(),
        })
    }

    /// The region behind an id from [`RoutingTable::resolve`].
    #[inline]
    pub fn region(&self, id: RegionId) -> &Region {
        &self.regions[usize::from(id.0)]
    }

    /// The `code` given for a country, if any.
    pub fn country_code(&self, country: u8) -> Option<&str> {
        self.country_codes[usize::from(country)].as_deref()
    }

    /// The name of a service entity id, if the table names it.
    pub fn service_name(&self, service_entity: u8) -> Option<&str> {
        self.service_names[usize::from(service_entity)].as_deref()
    }

    /// How many countries the map covers.
    pub fn country_count(&self) -> usize {
        self.country_owned.iter().filter(|&&b| b).count()
    }

    /// How many service entities are named.
    pub fn service_count(&self) -> usize {
        self.service_names.iter().filter(|n| n.is_some()).count()
    }
}
