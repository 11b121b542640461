//! A move's mirror (docs/moves.md, `mirror`): which idempotent requests of the group are
//! copied to `to` (an even share, `mirror_ratio`), the bound on copies in flight, and the
//! comparison of each copy's status class with the original's, counted in
//! `iuid_router_move_mirrored_total{move,outcome}`. The copy itself is sent by the proxy
//! (`proxy/moving.rs`), on a task of its own, through the one attempt loop.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::MoveState;
pub use crate::metrics::moves::MirrorOutcome;

impl MoveState {
    /// Whether this idempotent request of the group is copied: `ratio` (0–1) of them,
    /// spread evenly (the n-th is copied when `⌊n·ratio⌋` grows), so that a test or an
    /// operator sees the share asked for without randomness.
    pub fn sample(&self, ratio: f64) -> bool {
        if ratio <= 0.0 {
            return false;
        }
        let n = self.seen.fetch_add(1, Ordering::Relaxed) as f64;
        ((n + 1.0) * ratio).floor() > (n * ratio).floor()
    }

    /// A place for one more copy in flight, unless `max` are (then counted `dropped`).
    pub fn copy(self: &Arc<Self>, max: usize) -> Option<Copy> {
        if self.copies.fetch_add(1, Ordering::AcqRel) >= max {
            self.copies.fetch_sub(1, Ordering::AcqRel);
            self.metrics.mirrored(MirrorOutcome::Dropped);
            return None;
        }
        Some(Copy(self.clone()))
    }
}

/// One copy in flight to a move's `to`, counted until [`Copy::compared`] (or dropped).
#[derive(Debug)]
pub struct Copy(Arc<MoveState>);

impl Copy {
    /// The copy is done: its outcome counted.
    pub fn compared(self, original: Option<u16>, copy: Option<u16>) -> MirrorOutcome {
        let outcome = MirrorOutcome::of(original, copy);
        self.0.metrics.mirrored(outcome);
        outcome
    }

    /// The move's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        self.0.copies.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_classes_are_compared() {
        assert_eq!(MirrorOutcome::of(Some(200), Some(204)), MirrorOutcome::Same);
        assert_eq!(MirrorOutcome::of(Some(404), Some(410)), MirrorOutcome::Same);
        assert_eq!(
            MirrorOutcome::of(Some(200), Some(500)),
            MirrorOutcome::Differs
        );
        assert_eq!(MirrorOutcome::of(Some(200), None), MirrorOutcome::Failed);
    }
}
