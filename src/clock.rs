//! Time as the router reads it: a process-wide monotonic clock for deadlines, ejections and
//! rates (it never jumps back with NTP), and the wall clock for what people read.
//!
//! A module of its own because every layer needs it: with it in `upstream::health`, the retry
//! budget imported health, which imported the regions, which imported the budget.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// Milliseconds on a process-wide monotonic clock (0 at its first reading).
pub fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// Milliseconds since the Unix epoch on the wall clock (0 if the clock is before it).
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
