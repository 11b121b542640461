//! The routing table (docs/routing-table.md): which region owns an id.
//!
//! The file ([`model`]) is validated and compiled once per load (`load`) into a
//! [`RoutingTable`] whose [`RoutingTable::resolve`] is a couple of array reads: every
//! (country, service_entity) pair — 65 536 of them — is mapped at load to a *plan*: the
//! moves and overrides with a time predicate that could still match it, in order, then the
//! decision that holds otherwise. Moves and overrides without time predicates and the country
//! map fold into that final decision, so the usual lookup touches no list at all. Plans are
//! deduplicated, so the whole table costs 128 KiB of indexes plus a few plans.
//!
//! The live table is swapped whole (`arc-swap`) by the reloader; a table is immutable once
//! built, which is what lets requests in flight finish on the table they started with.

mod failover_load;
mod live;
mod load;
pub mod model;
mod moves_load;
#[cfg(test)]
mod moves_tests;
mod schemes;
mod schemes_load;
mod summary;
mod upstream_url;
pub mod watch;

use http::uri::Authority;
use iuid::Iuid;
use serde::{Deserialize, Serialize};

use crate::metrics::RuleLabel;
use crate::scheme::iuid::IuidKey;
use crate::scheme::{Key, Kind, SchemeError, IUID};

pub use schemes::TableScheme;
pub use summary::Summary;

pub use live::{
    rfc3339_ms, LiveTable, ReloadError, ReloadOutcome, ReloadRecord, TableStatus, RECENT_RELOADS,
};
pub use load::{load_file, load_source};

/// Index of a region in [`RoutingTable::regions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegionId(pub u16);

/// Which rule of the table decided a route; serialized for `resolve` (docs/cli.md) as
/// `{"kind": "override", "index": 0}`, `{"kind": "move", "index": 0}`,
/// `{"kind": "country", "country": 3}` or `{"kind": "default_region"}`.
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
    /// A scheme's `map` entry covering this value of its `route_by` field.
    Map {
        /// The value routed by (after `shift`/`bits`).
        value: u64,
    },
    /// A scheme's `default`: no `map` entry covers the value.
    SchemeDefault {
        /// The value routed by.
        value: u64,
    },
    /// A composite key placed by rendezvous hashing.
    Hash,
    /// `moves[index]` matched (0-based, file order).
    Move {
        /// Position in the `moves` list ([`RoutingTable::moves`]).
        index: usize,
    },
}

impl Rule {
    /// The rule's kind, as `iuid_router_routing_decisions_total` labels it.
    pub fn label(&self) -> RuleLabel {
        match self {
            Rule::Override { .. } => RuleLabel::Override,
            Rule::Country { .. } => RuleLabel::Country,
            Rule::DefaultRegion => RuleLabel::DefaultRegion,
            Rule::Unrouted => RuleLabel::Unrouted,
            Rule::Map { .. } => RuleLabel::Map,
            Rule::SchemeDefault { .. } => RuleLabel::SchemeDefault,
            Rule::Hash => RuleLabel::Hash,
            Rule::Move { .. } => RuleLabel::Move,
        }
    }
}

/// Which scheme a decision was made for: the metric label of the decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchemeSlot {
    /// No id (an unrouted request).
    None,
    /// The built-in `iuid` scheme.
    Iuid,
    /// `schemes[i]` of the table.
    Table(u16),
}

/// The outcome of [`RoutingTable::resolve`]: where to send the request, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Decision {
    /// The owning region.
    pub region: RegionId,
    /// The rule that matched.
    pub rule: Rule,
    /// The scheme of the id it was made for.
    pub scheme: SchemeSlot,
    /// The id's [`crate::scheme::Key::fingerprint`], for the owners learned from the
    /// regions (docs/failover.md); 0 for a decision made without an id.
    pub id: u64,
}

/// Why an id has no region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResolveError {
    /// The text is not an id of the route's scheme (docs/data-path.md: 400).
    Malformed(SchemeError),
    /// A value of a scheme's `route_by` field that no `map` entry covers, and the scheme has
    /// no `default` (404).
    Unmapped {
        /// The scheme's name.
        scheme: String,
        /// The field routed by.
        field: String,
        /// Its value (after `shift`/`bits`).
        value: u64,
    },
    /// A route names a scheme the table does not define (404; `check` and reloads refuse
    /// such tables, so only a table loaded without the config's routes meets it).
    UnknownScheme(String),
    /// A well-formed iUID whose country no region owns and no override covers (docs/data-path.md: 404).
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
            ResolveError::Unmapped {
                scheme,
                field,
                value,
            } => write!(
                f,
                "no region owns {field} {value} of scheme `{scheme}`: no map entry covers it \
                 and the scheme has no default"
            ),
            ResolveError::UnknownScheme(name) => {
                write!(f, "the routing table defines no scheme `{name}`")
            }
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
    /// TLS, for an `https://` upstream.
    pub tls: Option<crate::tls::client::UpstreamTls>,
    /// The protocol spoken to it.
    pub protocol: UpstreamProtocol,
}

impl UpstreamSpec {
    /// What identifies the upstream's runtime state across reloads: its scheme, protocol,
    /// TLS identity and authority. A change of any of them makes a new state (and new
    /// connections).
    pub fn key(&self) -> String {
        let tls = self.tls.as_ref().map_or("", |t| t.identity.as_str());
        format!("{:?}|{tls}|{}", self.protocol, self.authority)
    }
}

/// The protocol a region's upstreams speak (docs/tls-h2-grpc.md `protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UpstreamProtocol {
    /// HTTP/1.1, one exchange per connection at a time.
    #[default]
    Http1,
    /// HTTP/2, many exchanges multiplexed over one connection per worker (ALPN `h2` over
    /// TLS, prior knowledge over `http://`).
    H2,
}

/// A region as the table names it. Its runtime (balancing cursor, retry budget, metrics)
/// is `crate::upstream`'s, keyed by the name, so it outlives a reload.
#[derive(Debug, Clone)]
pub struct Region {
    /// The name used in the table, `Via` and metrics.
    pub name: String,
    /// At least one.
    pub upstreams: Vec<UpstreamSpec>,
    /// Where its requests go while its upstreams fail (docs/failover.md): one hop, never
    /// to a region that fails over itself.
    pub failover: Option<Failover>,
}

/// A region's failover (`regions.<name>.failover`, docs/failover.md): the region that
/// serves its reads (or all its requests) while its own upstreams fail, and how much of
/// its traffic it keeps at a given health share (Envoy's priority load).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Failover {
    /// The region that serves in its place.
    pub region: RegionId,
    /// What may move there.
    pub serves: Serves,
    /// The region keeps `min(1, health share × overprovisioning)` of what may move: 1 to 10
    /// (Envoy's overprovisioning factor, default 1.4).
    pub overprovisioning: f64,
}

/// What a failover region serves (`failover.serves`, docs/failover.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Serves {
    /// Reads only (docs/data-path.md "Reads and writes"): a replica; writes stay with the
    /// owner and are refused at once while it is dark.
    #[default]
    Reads,
    /// Reads and writes: a standby that takes writes (an active-active pair).
    All,
}

impl Failover {
    /// The default overprovisioning factor (Envoy's).
    pub const OVERPROVISIONING: f64 = 1.4;

    /// Whether a request that reads (`reads`) may move to the failover region.
    #[inline]
    pub fn moves(&self, reads: bool) -> bool {
        reads || self.serves == Serves::All
    }

    /// The share of what may move that the region keeps at health share `share` (0 to 1).
    #[inline]
    pub fn kept(&self, share: f64) -> f64 {
        (share * self.overprovisioning).min(1.0)
    }
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
    /// Matches ids whose creation time is at or above this: the first ms strictly after
    /// `created_after` (ms since the epoch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_after_ms: Option<u64>,
    /// The scheme it applies to (`None`: `iuid`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheme: Option<String>,
    /// Field predicates of a table scheme: `(field, value or range)`, serialized as
    /// `[["shard", 17], ["node", "2-5"]]`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<(String, FieldMatch)>,
    /// Target region name (for a move's matcher: the region serving the group now).
    pub region: String,
}

/// A field predicate's accepted values: the inclusive range `lo..=hi` of the field's value
/// (one value when `lo == hi`). Serialized as the number for one value, else as `"lo-hi"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FieldMatch {
    /// Lowest value that matches.
    pub lo: u64,
    /// Highest value that matches.
    pub hi: u64,
}

impl Serialize for FieldMatch {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.lo == self.hi {
            s.serialize_u64(self.lo)
        } else {
            s.collect_str(&format_args!("{}-{}", self.lo, self.hi))
        }
    }
}

/// A move's phase (docs/routing-table.md `moves`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MovePhase {
    /// Every request of the group goes to `from`; idempotent ones are also copied to `to` at
    /// `mirror_ratio`.
    Mirror,
    /// Reads go to `from`; writes are held (up to `hold_ms`) waiting for the flip.
    Fence,
    /// Every request of the group goes to `to`.
    Flip,
}

impl MovePhase {
    /// The phase as written in the table: `mirror`, `fence` or `flip`.
    pub fn as_str(self) -> &'static str {
        match self {
            MovePhase::Mirror => "mirror",
            MovePhase::Fence => "fence",
            MovePhase::Flip => "flip",
        }
    }
}

/// A move as loaded (docs/routing-table.md `moves`).
#[derive(Debug, Clone, Serialize)]
pub struct Move {
    /// Its name: `[a-z0-9-]+`, unique in the table.
    pub name: String,
    /// The group it moves: its matchers as loaded (`region` is the region it is served by now).
    #[serde(rename = "match")]
    pub matcher: Override,
    /// The region serving the group until the flip.
    #[serde(skip)]
    pub from: RegionId,
    /// The region serving the group from the flip on.
    #[serde(skip)]
    pub to: RegionId,
    /// `from`'s name, for reporting.
    #[serde(rename = "from")]
    pub from_name: String,
    /// `to`'s name, for reporting.
    #[serde(rename = "to")]
    pub to_name: String,
    /// Where the move stands.
    pub phase: MovePhase,
    /// `mirror`: share of idempotent requests copied to `to`, 0–1.
    pub mirror_ratio: f64,
    /// `fence`: the longest a write is held waiting for the flip, in ms (1–600000).
    pub hold_ms: u64,
}

impl Move {
    /// The region the group's ids resolve to in this phase: `from` (mirror, fence) or `to`
    /// (flip).
    pub fn serving(&self) -> RegionId {
        match self.phase {
            MovePhase::Mirror | MovePhase::Fence => self.from,
            MovePhase::Flip => self.to,
        }
    }
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

/// A validated, compiled routing table (docs/routing-table.md). Immutable; share it behind an `Arc`.
#[derive(Debug)]
pub struct RoutingTable {
    /// The file's `version` text.
    pub version: String,
    /// Regions in file order; [`RegionId`] indexes this.
    pub regions: Vec<Region>,
    /// Moves in file order; [`Rule::Move`] indexes this.
    pub moves: Vec<Move>,
    /// Overrides in file order.
    pub overrides: Vec<Override>,
    /// Region for ids without routing bits and for unrouted requests.
    pub default_region: RegionId,
    /// Declared schemes (docs/schemes.md) in file order; [`SchemeSlot::Table`] indexes this.
    pub schemes: Vec<TableScheme>,
    country_codes: Box<[Option<String>; 256]>,
    country_region: [Option<RegionId>; 256],
    service_names: Box<[Option<String>; 256]>,
    /// `(country << 8) | service_entity` → index into `plans`.
    plan_index: Box<[u16]>,
    plans: Vec<Plan>,
}

impl RoutingTable {
    /// The scheme called `name`: the built-in `iuid`, or one the table declares.
    pub fn scheme(&self, name: &str) -> Option<(SchemeSlot, &Kind)> {
        static IUID_KIND: Kind = Kind::Iuid;
        if name == IUID {
            return Some((SchemeSlot::Iuid, &IUID_KIND));
        }
        self.schemes
            .iter()
            .position(|s| s.name == name)
            .map(|i| (SchemeSlot::Table(i as u16), &self.schemes[i].kind))
    }

    /// The name of the scheme a decision was made for: `iuid`, a declared one, or `none` (an
    /// unrouted request).
    pub fn scheme_name(&self, slot: SchemeSlot) -> &str {
        match slot {
            SchemeSlot::None => "none",
            SchemeSlot::Iuid => IUID,
            SchemeSlot::Table(i) => self
                .schemes
                .get(usize::from(i))
                .map_or("none", |s| s.name.as_str()),
        }
    }

    /// Every scheme name a route may use: `iuid`, then the declared ones.
    pub fn scheme_names(&self) -> Vec<&str> {
        std::iter::once(IUID)
            .chain(self.schemes.iter().map(|s| s.name.as_str()))
            .collect()
    }

    /// The declared schemes whose ids carry no creation time (`fanout:` routes cannot use
    /// them).
    pub fn timeless_schemes(&self) -> Vec<&str> {
        self.schemes
            .iter()
            .filter(|s| !s.kind.has_time())
            .map(|s| s.name.as_str())
            .collect()
    }

    /// Parses an id's text with the scheme called `scheme` and resolves it: the id's key and
    /// the decision. O(1), or O(log n) over a scheme's map ranges.
    ///
    /// Errors: [`ResolveError::Malformed`] when the text is not an id of the scheme,
    /// [`ResolveError::UnknownScheme`], [`ResolveError::Unmapped`], else as
    /// [`RoutingTable::resolve`].
    #[inline]
    pub fn resolve_text<'t>(
        &self,
        scheme: &str,
        text: &'t [u8],
    ) -> Result<(Key<'t>, Decision), ResolveError> {
        if scheme == IUID {
            let key = crate::scheme::iuid::parse(text)
                .map_err(|e| ResolveError::Malformed(SchemeError::Iuid(e)))?;
            let key = Key::Iuid(key);
            return self.resolve(&key).map(|decision| (key, decision));
        }
        self.resolve_table_text(scheme, text)
    }

    /// [`RoutingTable::resolve_text`] for a scheme the table declares. Not inlined: the
    /// iUID path above stays small where it is inlined (measured: inlining this into it took
    /// the REST path's criterion time from 59 to 65 ns).
    #[inline(never)]
    fn resolve_table_text<'t>(
        &self,
        scheme: &str,
        text: &'t [u8],
    ) -> Result<(Key<'t>, Decision), ResolveError> {
        let Some(i) = self.schemes.iter().position(|s| s.name == scheme) else {
            return Err(ResolveError::UnknownScheme(scheme.to_owned()));
        };
        let s = &self.schemes[i];
        let key = s.kind.parse(text).map_err(ResolveError::Malformed)?;
        s.resolve(i as u16, &key).map(|decision| (key, decision))
    }

    /// The region that owns the iUID of `key` and the rule that said so. O(1): two array
    /// reads, plus one comparison per time-conditional override that names this
    /// country/service. A key of another scheme is resolved by [`RoutingTable::resolve_text`].
    #[inline]
    pub fn resolve(&self, key: &Key) -> Result<Decision, ResolveError> {
        match key {
            Key::Iuid(IuidKey::Iuid(iuid)) => self.resolve_iuid(iuid),
            Key::Iuid(IuidKey::NoRoutingBits(_)) => Ok(Decision {
                region: self.default_region,
                rule: Rule::DefaultRegion,
                scheme: SchemeSlot::Iuid,
                id: 0,
            }),
            _ => Err(ResolveError::UnknownScheme(
                "a table scheme's id resolved as an iUID".to_owned(),
            )),
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

    /// The region the `countries:` map gives a country, before overrides.
    pub fn country_region(&self, country: u8) -> Option<RegionId> {
        self.country_region[usize::from(country)]
    }

    /// How many countries the map covers.
    pub fn country_count(&self) -> usize {
        self.country_region.iter().filter(|r| r.is_some()).count()
    }

    /// How many service entities are named.
    pub fn service_count(&self) -> usize {
        self.service_names.iter().filter(|n| n.is_some()).count()
    }
}
