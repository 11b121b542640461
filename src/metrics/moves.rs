//! The metrics of moves between regions (docs/moves.md, docs/metrics.md): each move's
//! handles, looked up once when its state is made (`crate::moves`), by outcome.

use std::sync::atomic::{AtomicU64, Ordering};

use ::metrics::{Counter, Gauge};

use super::handle;

/// Mirror copies of a move's idempotent requests, by `move` and `outcome` (`same`,
/// `differs`, `failed`, `dropped`).
pub const MOVE_MIRRORED: &str = "iuid_router_move_mirrored_total";
/// Writes a move holds now (fenced, or after the flip waiting for `from`), by `move`.
pub const MOVE_HELD: &str = "iuid_router_move_held";
/// Writes a move held, by `move` and how it ended (`released`, `timed_out`, `refused`).
pub const MOVE_HELD_TOTAL: &str = "iuid_router_move_held_total";

/// How a copy compared with the original (`outcome` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MirrorOutcome {
    /// Both answered in the same status class (2xx and 2xx, 4xx and 4xx, …).
    Same,
    /// They answered in different classes.
    Differs,
    /// The copy got no answer from `to` (refused, reset, timed out), or the original none.
    Failed,
    /// Not sent: the move's copies in flight were at their bound.
    Dropped,
}

impl MirrorOutcome {
    /// Every outcome, in label order.
    pub const ALL: [MirrorOutcome; 4] = [
        MirrorOutcome::Same,
        MirrorOutcome::Differs,
        MirrorOutcome::Failed,
        MirrorOutcome::Dropped,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            MirrorOutcome::Same => "same",
            MirrorOutcome::Differs => "differs",
            MirrorOutcome::Failed => "failed",
            MirrorOutcome::Dropped => "dropped",
        }
    }

    /// The outcome of a copy answered `copy` when the original was answered `original`
    /// (HTTP statuses; `None`: no answer).
    pub fn of(original: Option<u16>, copy: Option<u16>) -> MirrorOutcome {
        match (original, copy) {
            (Some(a), Some(b)) if a / 100 == b / 100 => MirrorOutcome::Same,
            (Some(_), Some(_)) => MirrorOutcome::Differs,
            _ => MirrorOutcome::Failed,
        }
    }
}

/// How a held write ended (`outcome` label of [`MOVE_HELD_TOTAL`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldOutcome {
    /// It went on: to `to` after the flip, or to `from`.
    Released,
    /// `hold_ms` passed first (503 `moving`).
    TimedOut,
    /// `limits.held_requests` were held already (503 `moving` at once).
    Refused,
}

impl HeldOutcome {
    fn as_str(self) -> &'static str {
        match self {
            HeldOutcome::Released => "released",
            HeldOutcome::TimedOut => "timed_out",
            HeldOutcome::Refused => "refused",
        }
    }
}

/// One move's handles.
#[derive(Debug)]
pub struct MoveMetrics {
    mirrored: [Counter; 4],
    held: [Counter; 3],
    held_now: Gauge,
    /// The same counts, for the admin API (a `metrics` counter is not read back).
    mirrored_n: [AtomicU64; 4],
    held_n: [AtomicU64; 3],
}

impl MoveMetrics {
    /// The handles of the move called `name`.
    pub fn new(name: &str) -> MoveMetrics {
        handle();
        let name = name.to_owned();
        let mirrored = MirrorOutcome::ALL.map(
            |o| ::metrics::counter!(MOVE_MIRRORED, "move" => name.clone(), "outcome" => o.as_str()),
        );
        let held = [
            HeldOutcome::Released,
            HeldOutcome::TimedOut,
            HeldOutcome::Refused,
        ]
        .map(|o| {
            ::metrics::counter!(MOVE_HELD_TOTAL, "move" => name.clone(), "outcome" => o.as_str())
        });
        let held_now = ::metrics::gauge!(MOVE_HELD, "move" => name);
        held_now.set(0.0);
        MoveMetrics {
            mirrored,
            held,
            held_now,
            mirrored_n: Default::default(),
            held_n: Default::default(),
        }
    }

    /// Counts one copy compared (or dropped).
    pub fn mirrored(&self, outcome: MirrorOutcome) {
        self.mirrored[outcome as usize].increment(1);
        self.mirrored_n[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Copies by outcome so far: same, differs, failed, dropped.
    pub fn mirrored_counts(&self) -> [u64; 4] {
        self.mirrored_n
            .each_ref()
            .map(|n| n.load(Ordering::Relaxed))
    }

    /// Held writes by how they ended so far: released, timed out, refused.
    pub fn held_counts(&self) -> [u64; 3] {
        self.held_n.each_ref().map(|n| n.load(Ordering::Relaxed))
    }

    /// Counts one held write ended.
    pub fn held(&self, outcome: HeldOutcome) {
        self.held[outcome as usize].increment(1);
        self.held_n[outcome as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Sets the writes held now.
    pub fn held_now(&self, held: usize) {
        self.held_now.set(held as f64);
    }
}

/// The help lines.
pub(super) fn describe() {
    ::metrics::describe_counter!(
        MOVE_MIRRORED,
        "Mirror copies of a move's idempotent requests, by move and outcome (same, differs, failed, dropped)."
    );
    ::metrics::describe_gauge!(MOVE_HELD, "Writes a move holds now, by move.");
    ::metrics::describe_counter!(
        MOVE_HELD_TOTAL,
        "Writes a move held, by move and outcome (released, timed_out, refused)."
    );
}
