//! The allocator's policy for the serving process (docs/overload.md, "Memory").
//!
//! The binary allocates with jemalloc (`src/main.rs`, as Pingora and TiKV do), not glibc's
//! malloc, for what an edge holds while it waits:
//! - glibc writes a chunk's size at the start of the next chunk, so every buffer made and
//!   only partly written (an HTTP/2 connection's 16 KiB write buffer and 8 KiB read buffer)
//!   is resident at both ends; jemalloc keeps its metadata apart, and a large block's
//!   untouched pages stay untouched (`bench/idle.py`: 33.8 → 28.4 KiB per idle TLS HTTP/2
//!   connection, 21.5 → 18.2 h2c);
//! - glibc keeps what a burst freed in partly used pages of its arenas (124 MiB still held
//!   20 s after 6,000 HTTP/2 streams had ended, until a thread trimmed it once a second);
//!   jemalloc's background thread hands freed pages back to the OS after a second by
//!   itself (`dirty_decay_ms`, the binary's `MALLOC_CONF`).
//!
//! [`release_free_memory`] hands them back at once, after the bursts the router knows of
//! (fan-out answers, the buffer caches' overflow) and while the memory guard sheds.

/// Hands the allocator's free pages back to the OS now, off the event loop (a purge of
/// every arena: `madvise` calls, which take longer the more there is).
pub fn release_free_memory() {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn_blocking(trim_now);
    }
}

/// [`release_free_memory`] on the calling thread (one that may block: the memory guard's).
/// Without jemalloc as the global allocator (the `system-allocator` feature, or a test
/// binary) it purges an allocator that holds nothing.
pub fn trim_now() {
    #[cfg(not(target_env = "msvc"))]
    {
        // `arena.<MALLCTL_ARENAS_ALL>.purge`: jemalloc's name for every arena at once.
        const PURGE_ALL: &[u8] = b"arena.4096.purge\0";
        // SAFETY: a void control (no old or new value) named by a NUL-terminated string;
        // mallctl is thread-safe and reads nothing else.
        unsafe {
            tikv_jemalloc_sys::mallctl(
                PURGE_ALL.as_ptr().cast(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            );
        }
    }
}
