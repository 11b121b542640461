//! Moves between regions at run time (docs/moves.md): what each `moves:` entry of the
//! routing table keeps while requests flow — its phase as this edge last installed it, the
//! writes of its group in flight to `from`, the writes held for its flip, its mirror's
//! sampling and outcomes.
//!
//! The table says which ids a move covers and its phase; it is immutable once built. What
//! changes lives here, keyed by the move's name and reconciled on every install
//! ([`Moves::reconcile`], called by `upstream::regions`), as regions' runtime is: a move
//! that stays keeps its counts and the writes it holds, a phase that changes wakes them,
//! and a move the new table no longer names releases them to `from`.
//!
//! The phase read by a request is this state's, not its table snapshot's: a reload stores
//! the new phase here before the new table serves, so a write that counted itself in
//! flight to `from` and then still reads `mirror` is one a write after the flip waits for
//! ([`MoveState::write_to_from`], [`MoveState::hold`]). Nothing here is touched by a
//! request whose id no move covers.

mod mirror;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;

use crate::metrics::moves::{HeldOutcome, MoveMetrics};
use crate::table::{MovePhase, RoutingTable};

pub use mirror::{Copy, MirrorOutcome};

/// The phase value of a move the serving table no longer names.
const GONE: u8 = 3;

fn phase_code(phase: MovePhase) -> u8 {
    match phase {
        MovePhase::Mirror => 0,
        MovePhase::Fence => 1,
        MovePhase::Flip => 2,
    }
}

/// The runtime of every move, by name, across reloads.
#[derive(Debug, Default)]
pub struct Moves {
    states: Mutex<HashMap<String, Arc<MoveState>>>,
    /// Writes held by every move of this edge together (`limits.held_requests`).
    held: Arc<AtomicUsize>,
}

/// What one move keeps across reloads.
#[derive(Debug)]
pub struct MoveState {
    /// The move's name (`moves[].name`).
    pub name: String,
    phase: AtomicU8,
    /// When this edge installed its phase (ms since the Unix epoch).
    since_ms: AtomicU64,
    /// Woken when the phase changes and when the last write in flight to `from` ends.
    changed: Notify,
    /// Writes of the group in flight to `from` from this edge ([`FromWrite`]).
    writes_from: AtomicUsize,
    /// Writes held now (fenced, or waiting for `from`'s writes after the flip).
    held: AtomicUsize,
    held_all: Arc<AtomicUsize>,
    /// Idempotent requests seen in `mirror`, for the share copied.
    pub(crate) seen: AtomicU64,
    /// Copies to `to` in flight.
    pub(crate) copies: AtomicUsize,
    /// Its counters and gauge.
    pub metrics: MoveMetrics,
}

/// Where a held write goes, or why it does not.
#[derive(Debug, PartialEq, Eq)]
pub enum Release {
    /// The move flipped and `from` has no write of the group in flight: to `to`.
    To,
    /// The move went back to `mirror`, or was removed: to `from` (with its [`FromWrite`]).
    From(FromWrite),
    /// `hold_ms` passed first: 503 `moving`.
    TimedOut,
    /// `limits.held_requests` writes are held already: 503 `moving` at once.
    Refused,
}

impl Moves {
    /// The states of `table.moves`, index for index: each found by name or made, its phase
    /// stored (and its `since` when it changed); the states the table no longer names are
    /// marked gone and dropped. Returns them with the states whose waiters must be woken
    /// once the table serves ([`Moves::wake`]).
    pub fn reconcile(&self, table: &RoutingTable) -> (Box<[Arc<MoveState>]>, Vec<Arc<MoveState>>) {
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        let mut woken = Vec::new();
        let now = crate::clock::unix_ms();
        let current = table
            .moves
            .iter()
            .map(|m| {
                let code = phase_code(m.phase);
                let state = states
                    .entry(m.name.clone())
                    .or_insert_with(|| {
                        Arc::new(MoveState {
                            name: m.name.clone(),
                            phase: AtomicU8::new(code),
                            since_ms: AtomicU64::new(now),
                            changed: Notify::new(),
                            writes_from: AtomicUsize::new(0),
                            held: AtomicUsize::new(0),
                            held_all: self.held.clone(),
                            seen: AtomicU64::new(0),
                            copies: AtomicUsize::new(0),
                            metrics: MoveMetrics::new(&m.name),
                        })
                    })
                    .clone();
                if state.phase.swap(code, Ordering::SeqCst) != code {
                    state.since_ms.store(now, Ordering::Relaxed);
                    woken.push(state.clone());
                }
                state
            })
            .collect();
        states.retain(|name, state| {
            let kept = table.moves.iter().any(|m| &m.name == name);
            if !kept {
                state.phase.store(GONE, Ordering::SeqCst);
                woken.push(state.clone());
            }
            kept
        });
        (current, woken)
    }

    /// Wakes the writes `woken` holds, once the table that changed them serves: a released
    /// write reads the serving table for its region.
    pub fn wake(woken: &[Arc<MoveState>]) {
        for state in woken {
            state.changed.notify_waiters();
        }
    }
}

impl MoveState {
    /// Its phase as this edge installed it last (`None`: no serving table names it).
    pub fn phase(&self) -> Option<MovePhase> {
        match self.phase.load(Ordering::SeqCst) {
            0 => Some(MovePhase::Mirror),
            1 => Some(MovePhase::Fence),
            2 => Some(MovePhase::Flip),
            _ => None,
        }
    }

    /// When its phase was installed, ms since the Unix epoch.
    pub fn since_ms(&self) -> u64 {
        self.since_ms.load(Ordering::Relaxed)
    }

    /// Writes held now.
    pub fn held_now(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Writes of the group in flight to `from` from this edge.
    pub fn writes_to_from(&self) -> usize {
        self.writes_from.load(Ordering::SeqCst)
    }

    /// A write of the group about to go to `from`, counted until the guard drops (its
    /// answer relayed, or it failed) — if the phase still sends writes there (`mirror`, or
    /// a move no longer served). `None`: the phase changed first; hold the write instead.
    pub fn write_to_from(self: &Arc<Self>) -> Option<FromWrite> {
        self.writes_from.fetch_add(1, Ordering::SeqCst);
        let guard = FromWrite(self.clone());
        match self.phase() {
            Some(MovePhase::Mirror) | None => Some(guard),
            Some(MovePhase::Fence | MovePhase::Flip) => None,
        }
    }

    /// Where a write goes now without waiting: `Some(To)` after the flip once `from` has
    /// no write of the group in flight, `Some(From)` in `mirror` or once gone, `None` while
    /// it must wait (fenced, or `from` still busy).
    fn ready(self: &Arc<Self>) -> Option<Release> {
        match self.phase() {
            Some(MovePhase::Fence) => None,
            Some(MovePhase::Flip) => (self.writes_to_from() == 0).then_some(Release::To),
            Some(MovePhase::Mirror) | None => self.write_to_from().map(Release::From),
        }
    }

    /// Holds a write of the group (docs/moves.md, `fence` and `flip`) until it may go: to
    /// `to` once the move flipped and this edge's writes to `from` have ended, to `from`
    /// if the move goes back to `mirror` or is removed, or nowhere after `hold` (503).
    /// At most `max_held` writes are held by the whole edge; beyond, refused at once.
    /// Counted in `iuid_router_move_held{move}` and `iuid_router_move_held_total`.
    pub async fn hold(self: &Arc<Self>, hold: Duration, max_held: usize) -> Release {
        if let Some(release) = self.ready() {
            return release;
        }
        if self.held_all.fetch_add(1, Ordering::AcqRel) >= max_held {
            self.held_all.fetch_sub(1, Ordering::AcqRel);
            self.metrics.held(HeldOutcome::Refused);
            return Release::Refused;
        }
        let _held = Held::new(self);
        let deadline = tokio::time::Instant::now() + hold;
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the check: a wake-up between the two is not lost.
            changed.as_mut().enable();
            if let Some(release) = self.ready() {
                self.metrics.held(HeldOutcome::Released);
                return release;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                self.metrics.held(HeldOutcome::TimedOut);
                return Release::TimedOut;
            }
        }
    }
}

/// One write counted in flight to a move's `from` while it lives.
#[derive(Debug)]
pub struct FromWrite(Arc<MoveState>);

impl PartialEq for FromWrite {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for FromWrite {}

impl Drop for FromWrite {
    fn drop(&mut self) {
        if self.0.writes_from.fetch_sub(1, Ordering::SeqCst) == 1 {
            // The last one: a write waiting after the flip may go.
            self.0.changed.notify_waiters();
        }
    }
}

/// One write held, in the move's and the edge's counts while it lives.
struct Held<'a>(&'a MoveState);

impl<'a> Held<'a> {
    fn new(state: &'a MoveState) -> Held<'a> {
        let now = state.held.fetch_add(1, Ordering::AcqRel) + 1;
        state.metrics.held_now(now);
        Held(state)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let now = self.0.held.fetch_sub(1, Ordering::AcqRel) - 1;
        self.0.held_all.fetch_sub(1, Ordering::AcqRel);
        self.0.metrics.held_now(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A move's state in `phase`, as `Moves::reconcile` makes it.
    fn state(phase: MovePhase) -> Arc<MoveState> {
        Arc::new(MoveState {
            name: "m".to_owned(),
            phase: AtomicU8::new(phase_code(phase)),
            since_ms: AtomicU64::new(0),
            changed: Notify::new(),
            writes_from: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            held_all: Arc::default(),
            seen: AtomicU64::new(0),
            copies: AtomicUsize::new(0),
            metrics: MoveMetrics::new("m"),
        })
    }

    #[test]
    fn a_share_of_reads_is_copied_evenly() {
        let s = state(MovePhase::Mirror);
        let copied: Vec<bool> = (0..1000).map(|_| s.sample(0.1)).collect();
        assert_eq!(copied.iter().filter(|&&c| c).count(), 100);
        assert!(
            copied[..10].iter().filter(|&&c| c).count() == 1,
            "one in each ten"
        );
        assert!((0..10).all(|_| !s.sample(0.0)));
        assert!((0..10).all(|_| s.sample(1.0)));
        let one = s.copy(1).expect("a place");
        assert!(s.copy(1).is_none(), "bounded");
        drop(one);
        assert!(s.copy(1).is_some());
    }

    #[tokio::test]
    async fn a_fenced_write_times_out_and_one_beyond_the_bound_is_refused() {
        let s = state(MovePhase::Fence);
        let hold = Duration::from_millis(50);
        assert_eq!(s.hold(hold, 0).await, Release::Refused);
        assert_eq!(s.hold(hold, 1).await, Release::TimedOut);
        assert_eq!(s.held_now(), 0);
        assert_eq!(s.metrics.held_counts(), [0, 1, 1]);
    }

    #[tokio::test]
    async fn a_write_after_the_flip_waits_for_the_last_write_to_from() {
        let s = state(MovePhase::Mirror);
        let first = s.write_to_from().expect("mirror sends writes to `from`");
        s.phase.store(phase_code(MovePhase::Flip), Ordering::SeqCst);
        assert!(
            s.write_to_from().is_none(),
            "after the flip, none goes to `from`"
        );
        let waiting = tokio::spawn({
            let s = s.clone();
            async move { s.hold(Duration::from_secs(5), 10).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "held while `from` runs the first");
        drop(first);
        assert_eq!(waiting.await.expect("join"), Release::To);
    }
}
