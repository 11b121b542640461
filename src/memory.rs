//! The allocator's policy for the serving process (glibc malloc; other allocators return
//! memory themselves): large blocks get their own pages, and free memory is handed back to
//! the OS after a burst (of fan-out answers, or of connections that have closed), since glibc
//! keeps what was freed in its arenas.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Hands the allocator's free memory back to the OS, off the event loop. glibc's malloc
/// keeps what large answers freed in its arenas (measured: 136 MB held after a burst of
/// fan-outs of 3.9 MB answers, from an idle 11 MB); `malloc_trim(0)` returns it.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn_blocking(|| {
            // SAFETY: malloc_trim only releases free memory of glibc's own arenas; it takes
            // no pointer and is thread-safe.
            unsafe { libc::malloc_trim(0) };
        });
    }
}

/// Other allocators return memory themselves.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() {}

/// Free memory glibc's arenas hold (`mallinfo2`'s `fordblks`), in bytes; 0 with other
/// allocators.
pub fn free_held() -> usize {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallinfo2 returns a struct by value; it takes no pointer.
        unsafe { libc::mallinfo2() }.fordblks
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        0
    }
}

/// [`release_free_memory`] on the calling thread (one that may block: the memory guard's).
pub fn trim_now() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: as in `release_free_memory`.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Allocations from this size up get their own pages from the OS and give them back when
/// freed (glibc's `M_MMAP_THRESHOLD`), in bytes.
pub const MMAP_THRESHOLD: usize = 1 << 20;

/// Sets glibc's malloc so that the large buffers of fan-out answers do not stay in its heap:
/// by default glibc raises its mmap threshold to the size of each large block freed (up to
/// 32 MiB), after which 4 MB answers are carved from the heap and fragment it (measured:
/// under a 32 MiB `fanout_buffer_bytes`, a peak of the idle size + 69 MB, against + 38 MB with
/// the threshold fixed at [`MMAP_THRESHOLD`]). Nothing on the REST path allocates that much.
/// For the serving process, once at start; a no-op with other allocators.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let threshold = i32::try_from(MMAP_THRESHOLD).unwrap_or(i32::MAX);
        // SAFETY: mallopt only changes glibc's malloc parameters; it takes no pointer. The
        // trim threshold is set as glibc's own dynamic rule would (twice the mmap threshold),
        // so that the heap top is not handed back and taken again on every small burst.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, threshold);
            libc::mallopt(libc::M_TRIM_THRESHOLD, threshold.saturating_mul(2));
        }
    }
}

/// Client connections open, and the most open since memory was last handed back.
static OPEN: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// Connections that must have closed since the peak before their memory is handed back.
const TRIM_AFTER_CLOSED: usize = 512;

/// Counts a client connection open while it lives. When the open connections fall to a
/// quarter of their peak, at least 512 fewer, free memory goes back to the
/// OS (measured: 3,000 idle connections closed left glibc holding 16 MB it no longer used).
#[derive(Debug)]
pub struct OpenConnection(());

impl OpenConnection {
    /// Counts one more.
    pub fn start() -> OpenConnection {
        let open = OPEN.fetch_add(1, Ordering::Relaxed) + 1;
        PEAK.fetch_max(open, Ordering::Relaxed);
        OpenConnection(())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        let open = OPEN.fetch_sub(1, Ordering::Relaxed) - 1;
        let peak = PEAK.load(Ordering::Relaxed);
        if peak >= open + TRIM_AFTER_CLOSED
            && open * 4 <= peak
            && PEAK
                .compare_exchange(peak, open, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            release_free_memory();
        }
    }
}
