//! Per-region runtime: each region's upstreams with their pools and health, its balancing
//! cursor, its retry budget and its metric handles.
//!
//! The routing table says which region owns an id and which upstreams a region has; it is
//! policy, immutable once built. What changes as requests flow lives here, keyed by region
//! name (and upstreams by authority, in the [`Registry`]), as sozu's and
//! pingora-load-balancing's backends live apart from routing. On every table install the
//! runtime is reconciled by name: a region that stays keeps its cursor, budget and metrics,
//! an upstream that stays keeps its connections and health (an ejected one stays ejected),
//! and what the new table no longer names is dropped.
//!
//! The data path reads one [`Routing`] snapshot through `arc-swap`: the table and the runtime
//! of each of its regions, indexed alike, swapped as one so they always agree.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use http::uri::Authority;

use super::adaptive::AdaptiveLimit;
use super::budget::RetryBudget;
use super::{Registry, UpstreamState};
use crate::config::Limits;
use crate::metrics::{DecisionCounters, RegionMetrics};
use crate::moves::{MoveState, Moves};
use crate::table::{Failover, LiveTable, RegionId, RoutingTable, SchemeSlot};

/// One upstream of a region at run time.
#[derive(Debug, Clone)]
pub struct Upstream {
    /// `host:port` to connect to and to send as `Host`.
    pub authority: Authority,
    /// Pool and health, shared by every table that lists this authority.
    pub state: Arc<UpstreamState>,
}

/// What a region keeps across reloads.
#[derive(Debug)]
pub struct RegionState {
    /// Its metric handles; the name again, shared, as a label and log field.
    pub metrics: Arc<RegionMetrics>,
    /// Round-robin position for balancing (`health::pick`).
    pub cursor: AtomicUsize,
    /// Retries this region may still spend.
    pub budget: RetryBudget,
    /// Requests in flight to the region from this edge (every protocol, fan-out legs and
    /// legacy probes included), held by [`RegionPermit`]s.
    pub in_flight: AtomicUsize,
    /// Connections being made to the region's upstreams (TCP and TLS), held by
    /// [`ConnectSlot`]s.
    pub connecting: AtomicUsize,
    /// The region's concurrency limit that follows its latency (`limits.adaptive`), made on
    /// first use with the limits' bounds.
    pub adaptive: OnceLock<AdaptiveLimit>,
}

impl RegionState {
    /// The most requests in flight to the region now: `limits.region_max_in_flight`, or with
    /// `limits.adaptive` the adaptive limit within `[adaptive_min_in_flight,
    /// region_max_in_flight]` (docs/overload.md).
    pub fn limit(&self, limits: &Limits) -> usize {
        match limits.adaptive {
            false => limits.region_max_in_flight,
            true => self.adaptive(limits).limit(),
        }
    }

    /// Feeds one exchange's latency (request sent to response head, or to its timeout or
    /// reset) to the adaptive limit; nothing without `limits.adaptive`.
    pub fn sample(&self, limits: &Limits, rtt: Duration) {
        if limits.adaptive {
            let in_flight = self.in_flight.load(Ordering::Relaxed);
            let adaptive = self.adaptive(limits);
            let before = adaptive.limit();
            adaptive.sample(rtt, in_flight, Instant::now());
            let after = adaptive.limit();
            if after != before {
                crate::metrics::region_limit(&self.metrics.label, after);
            }
        }
    }

    fn adaptive(&self, limits: &Limits) -> &AdaptiveLimit {
        self.adaptive.get_or_init(|| {
            let limit = AdaptiveLimit::new(
                limits.adaptive_min_in_flight,
                limits.region_max_in_flight,
                Instant::now(),
            );
            crate::metrics::region_limit(&self.metrics.label, limit.limit());
            limit
        })
    }

    /// A permit for one more request in flight to the region, unless its limit is reached
    /// ([`RegionState::limit`], docs/overload.md): `None`, the request is shed.
    pub fn admit(self: &Arc<Self>, limits: &Limits) -> Option<RegionPermit> {
        take_place(&self.in_flight, self.limit(limits)).then(|| RegionPermit(self.clone()))
    }
}

/// One more in `count` unless it is at `max` already (then unchanged): `false`.
fn take_place(count: &AtomicUsize, max: usize) -> bool {
    if count.fetch_add(1, Ordering::AcqRel) >= max {
        count.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    true
}

/// One request counted in flight to its region while it lives: until its answer's body
/// has been relayed, or it failed.
#[derive(Debug)]
pub struct RegionPermit(Arc<RegionState>);

impl Drop for RegionPermit {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Where a request about to make a new connection to one of its region's upstreams asks
/// for room: the region's count of connections being made and its bound
/// (`limits.region_max_pending_connects`, docs/overload.md). Health checks make theirs
/// without one.
#[derive(Debug, Clone, Copy)]
pub struct Connects<'a> {
    /// The region.
    pub region: &'a Arc<RegionState>,
    /// Most connections being made to it at once.
    pub max: usize,
}

impl Connects<'_> {
    /// A slot for one more connection being made, unless `max` are already: `None`, the
    /// request is shed (`ShedReason::PendingConnects`).
    pub fn start(self) -> Option<ConnectSlot> {
        let state = self.region;
        take_place(&state.connecting, self.max).then(|| ConnectSlot(state.clone()))
    }
}

/// One connection being made to a region's upstream, counted while it lives (an `Arc`:
/// a TLS connect finishes on a task of its own).
#[derive(Debug)]
pub struct ConnectSlot(Arc<RegionState>);

impl Drop for ConnectSlot {
    fn drop(&mut self) {
        self.0.connecting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A region of the serving table with its runtime.
#[derive(Debug)]
pub struct RegionRuntime {
    /// The region's name in the table.
    pub name: String,
    /// The table's upstreams of the region, in table order, with their state.
    pub upstreams: Vec<Upstream>,
    /// Cursor, budget and metrics, kept across reloads.
    pub state: Arc<RegionState>,
    /// Where its requests may go while its upstreams fail (docs/failover.md).
    pub failover: Option<Failover>,
}

impl RegionRuntime {
    /// The share of its upstreams neither ejected nor failing their active check at `now`
    /// (ms, `clock::now_ms`), 0 to 1 (docs/failover.md "How much fails over").
    pub fn health_share(&self, now: u64) -> f64 {
        let n = self.upstreams.len();
        if n == 0 {
            return 0.0;
        }
        let up = self
            .upstreams
            .iter()
            .filter(|u| u.state.health.in_rotation(now))
            .count();
        up as f64 / n as f64
    }
}

/// The serving table and its regions' runtime, indexed alike by [`RegionId`], with the
/// decision counters of its schemes.
#[derive(Debug)]
pub struct Routing {
    /// The routing table these regions belong to.
    pub table: Arc<RoutingTable>,
    regions: Box<[RegionRuntime]>,
    /// Decision counters of `table.schemes`, index for index.
    schemes: Box<[DecisionCounters]>,
    /// The runtime of `table.moves`, index for index (docs/moves.md).
    moves: Box<[Arc<MoveState>]>,
}

impl Routing {
    /// The runtime of a region the table resolved to.
    #[inline]
    pub fn region(&self, id: RegionId) -> &RegionRuntime {
        &self.regions[usize::from(id.0)]
    }

    /// Whether the own engine's head path can carry a request to `region` itself: every
    /// upstream of it, and of its failover region (a read may move, docs/failover.md),
    /// speaks HTTP/1.1 on the own engine's sockets.
    #[inline]
    pub fn raw_capable(&self, region: RegionId) -> bool {
        let own = |r: &RegionRuntime| r.upstreams.iter().all(|u| u.state.raw_capable());
        let region = self.region(region);
        own(region) && region.failover.is_none_or(|f| own(self.region(f.region)))
    }

    /// How many regions the table has.
    pub fn len(&self) -> usize {
        self.regions.len()
    }

    /// Whether the table has no region (never: a table has at least one).
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// Every region with its id, in table order.
    pub fn all(&self) -> impl Iterator<Item = (RegionId, &RegionRuntime)> {
        self.regions
            .iter()
            .enumerate()
            .map(|(i, r)| (RegionId(i as u16), r))
    }

    /// The region called `name`, if the table has it.
    pub fn by_name(&self, name: &str) -> Option<RegionId> {
        self.regions
            .iter()
            .position(|r| r.name == name)
            .map(|i| RegionId(i as u16))
    }

    /// The runtime of `table.moves[index]` (docs/moves.md).
    pub fn move_state(&self, index: usize) -> Option<&Arc<MoveState>> {
        self.moves.get(index)
    }

    /// The decision counters of the scheme a decision was made for.
    #[inline]
    pub fn decisions(&self, scheme: SchemeSlot) -> &DecisionCounters {
        match scheme {
            SchemeSlot::Iuid => DecisionCounters::iuid(),
            SchemeSlot::None => DecisionCounters::none(),
            SchemeSlot::Table(i) => &self.schemes[usize::from(i)],
        }
    }
}

/// The live [`Routing`], reconciled with every table the [`LiveTable`] installs.
#[derive(Debug)]
pub struct Regions {
    current: ArcSwap<Routing>,
    registry: Arc<Registry>,
    states: Mutex<HashMap<String, Arc<RegionState>>>,
    moves: Moves,
}

impl Regions {
    /// The runtime for `table`'s serving table, kept in step with its reloads. Upstream
    /// states come from `registry`.
    pub fn new(table: &LiveTable, registry: Arc<Registry>) -> Arc<Regions> {
        let states = Mutex::new(HashMap::new());
        let moves = Moves::default();
        let first = reconcile(&table.current(), &registry, &states, &moves).0;
        let regions = Arc::new(Regions {
            current: ArcSwap::from_pointee(first),
            registry,
            states,
            moves,
        });
        let weak = Arc::downgrade(&regions);
        table.on_install(move |installed| {
            if let Some(regions) = weak.upgrade() {
                regions.install(installed);
            }
        });
        regions
    }

    /// The serving snapshot; hold the `Arc` for as long as the request needs it.
    #[inline]
    pub fn current(&self) -> Arc<Routing> {
        self.current.load_full()
    }

    fn install(&self, table: &Arc<RoutingTable>) {
        if Arc::ptr_eq(&self.current.load().table, table) {
            return;
        }
        let (routing, woken) = reconcile(table, &self.registry, &self.states, &self.moves);
        self.current.store(Arc::new(routing));
        // After the store: a write a move held reads the table that released it.
        Moves::wake(&woken);
    }
}

/// The runtime of `table`'s regions: each region's state by name, each upstream's by
/// authority, each move's by name; states of regions the table no longer names are
/// dropped. Also the moves whose held writes are to be woken once it serves.
fn reconcile(
    table: &Arc<RoutingTable>,
    registry: &Registry,
    states: &Mutex<HashMap<String, Arc<RegionState>>>,
    moves: &Moves,
) -> (Routing, Vec<Arc<MoveState>>) {
    let mut states = states.lock().unwrap_or_else(|p| p.into_inner());
    let regions = table
        .regions
        .iter()
        .map(|region| {
            let state = states
                .entry(region.name.clone())
                .or_insert_with(|| {
                    Arc::new(RegionState {
                        metrics: Arc::new(RegionMetrics::new(&region.name)),
                        cursor: AtomicUsize::new(0),
                        budget: RetryBudget::default(),
                        in_flight: AtomicUsize::new(0),
                        connecting: AtomicUsize::new(0),
                        adaptive: OnceLock::new(),
                    })
                })
                .clone();
            let upstreams = region
                .upstreams
                .iter()
                .map(|u| Upstream {
                    authority: u.authority.clone(),
                    state: registry.get(u),
                })
                .collect();
            RegionRuntime {
                name: region.name.clone(),
                upstreams,
                state,
                failover: region.failover,
            }
        })
        .collect();
    states.retain(|name, _| table.regions.iter().any(|r| &r.name == name));
    let (move_states, woken) = moves.reconcile(table);
    let routing = Routing {
        table: table.clone(),
        regions,
        schemes: table
            .schemes
            .iter()
            .map(|s| DecisionCounters::new(&s.name))
            .collect(),
        moves: move_states,
    };
    (routing, woken)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{HealthPolicy, RetryPolicy};
    use crate::upstream::health;

    fn table_text(version: &str, extra_region: bool) -> String {
        let mut text = format!(
            "version: \"{version}\"\nregions:\n  eu: {{ upstreams: [\"http://127.0.0.1:9\", \"http://127.0.0.1:10\"] }}\n"
        );
        if extra_region {
            text += "  us: { upstreams: [\"http://127.0.0.1:11\"] }\n";
        }
        text + "countries:\n  1: eu\ndefault_region: eu\n"
    }

    #[tokio::test]
    async fn a_reload_keeps_an_ejected_upstream_ejected_and_a_spent_retry_budget_spent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("routing-table.yaml");
        std::fs::write(&path, table_text("v1", false)).expect("write");
        let live = LiveTable::load(&path).expect("table");
        let regions = Regions::new(&live, Arc::new(Registry::default()));

        let before = regions.current();
        let eu = before.region(RegionId(0));
        // Eject the first upstream: one failure with eject_after 1.
        let policy = HealthPolicy {
            eject_after: 1,
            ejection_ms: 60_000,
            ..HealthPolicy::default()
        };
        assert!(health::record_failure(&eu.upstreams, 0, &policy).is_some());
        // Three requests save three retries (100 %, no per-second floor); spend one.
        let retry = RetryPolicy {
            budget_percent: 100,
            min_per_second: 0,
            ..RetryPolicy::default()
        };
        for _ in 0..3 {
            eu.state.budget.deposit(&retry);
        }
        assert!(eu.state.budget.withdraw(&retry));

        // A new table: another version, one more region.
        std::fs::write(&path, table_text("v2", true)).expect("write");
        assert_eq!(
            live.reload().await.expect("reload"),
            crate::table::ReloadOutcome::Installed
        );
        let after = regions.current();
        assert_eq!(after.table.version, "v2");
        let eu_after = after.region(RegionId(0));
        assert_eq!(eu_after.name, "eu");
        let now = crate::clock::now_ms();
        assert!(
            !eu_after.upstreams[0].state.health.available(now),
            "still ejected after the reload"
        );
        assert!(eu_after.upstreams[1].state.health.available(now));
        // Two retries left, as before the reload (a fresh budget would have none).
        assert!(eu_after.state.budget.withdraw(&retry));
        assert!(eu_after.state.budget.withdraw(&retry));
        assert!(
            !eu_after.state.budget.withdraw(&retry),
            "the spent part of the budget stays spent after the reload"
        );
        assert!(Arc::ptr_eq(&eu.state, &eu_after.state));
        assert_eq!(after.region(RegionId(1)).name, "us");
    }
}
