//! The process's memory guard (docs/overload.md, `overload.max_memory_mb`): above the bound,
//! every new exchange with a region is shed with 503 `overloaded` until memory is back
//! under it, so that a burst the other limits let through ends in refusals rather than in
//! the kernel's OOM killer (Envoy's overload manager, `shrink_heap` and `stop_accepting`
//! actions on a heap threshold, does the same job).
//!
//! The resident size is read from `/proc/self/statm` by a thread of its own every
//! [`PERIOD`] (a read of procfs, off the event loops), and kept in one flag that the data
//! path reads with a relaxed load (`proxy::phases` `admit_region`). Shedding starts above
//! the bound and stops below 95 % of it, so that the flag does not flip on every sample;
//! while shedding, free memory is handed back to the OS at once, not after the allocator's
//! decay (`memory`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// How often the resident size is read.
pub const PERIOD: Duration = Duration::from_millis(100);

static OVER: AtomicBool = AtomicBool::new(false);
static RSS_BYTES: AtomicU64 = AtomicU64::new(0);

/// Whether the process is above `overload.max_memory_mb` (new exchanges are shed).
#[inline]
pub fn over_memory() -> bool {
    OVER.load(Ordering::Relaxed)
}

/// The resident size at the last reading, in bytes (0 before the first, or without a guard).
pub fn rss_bytes() -> u64 {
    RSS_BYTES.load(Ordering::Relaxed)
}

/// Starts the guard thread for a bound of `max_mb` MiB; nothing for `0` (no bound) or
/// where the resident size cannot be read (not Linux). Once per process.
pub fn start(max_mb: usize) {
    if max_mb == 0 || resident_bytes().is_none() {
        return;
    }
    let max = (max_mb as u64) << 20;
    crate::metrics::overloaded("memory", false);
    let spawned = std::thread::Builder::new()
        .name("memory-guard".into())
        .spawn(move || loop {
            guard(max, max_mb);
            std::thread::sleep(PERIOD);
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "no memory guard: its thread did not start");
    }
}

/// One reading against the bound `max` (bytes; `max_mb` as configured, for the log).
fn guard(max: u64, max_mb: usize) {
    let Some(rss) = resident_bytes() else {
        return;
    };
    RSS_BYTES.store(rss, Ordering::Relaxed);
    let over = OVER.load(Ordering::Relaxed);
    let now = if over { rss > max / 20 * 19 } else { rss > max };
    if now != over {
        OVER.store(now, Ordering::Relaxed);
        crate::metrics::overloaded("memory", now);
        let rss_mib = rss >> 20;
        match now {
            true => tracing::warn!(
                rss_mib,
                max_mb,
                "memory above overload.max_memory_mb: shedding new requests"
            ),
            false => tracing::info!(rss_mib, max_mb, "memory back under overload.max_memory_mb"),
        }
    }
    if now {
        crate::memory::trim_now();
    }
}

/// The process's resident size in bytes (`/proc/self/statm`'s second field, in pages).
fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system; it takes no pointer.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * u64::try_from(page).ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_resident_size_is_read() {
        let rss = resident_bytes().expect("Linux has /proc/self/statm");
        assert!(rss > 1 << 20, "{rss}");
    }
}
