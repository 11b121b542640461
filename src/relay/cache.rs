//! The per-thread caches of the own engine's buffers and heads' field lists: a request
//! normally allocates none, an idle connection gives its buffer back, and after a burst
//! the caches shrink and free memory goes back to the OS.

use std::cell::RefCell;
use std::thread::LocalKey;
use std::time::Duration;

use crate::http1::head::Field;

/// Size of a cached buffer, and of a read.
pub const BUFFER: usize = 16 << 10;
/// Buffers kept per thread for reuse: 1 MiB of full buffers, enough for the requests a
/// worker has in flight in steady load. A burst takes more, and frees them after
/// ([`give`]); a quarter of a second after, the caches shrink to [`KEPT_AFTER_BURST`] and
/// the allocator is asked to hand the memory back ([`shrink_after_burst`]).
const CACHED: usize = 64;
/// Buffers of each kind a cache keeps once a burst is over.
const KEPT_AFTER_BURST: usize = 8;

/// Size of a cached small buffer: a request head kept for a retry.
pub const SMALL: usize = 2 << 10;
/// Size of a cached large buffer: a body relayed past what came with its head, or held
/// whole (64 KiB, `retries.buffer_bytes`' default, and a head of up to 8 KiB). One read and
/// one write per 72 KiB, where [`BUFFER`]'s 16 KiB took five of each: on loopback and fast
/// links a body's cost is per syscall and per packet more than per byte.
pub const LARGE: usize = 72 << 10;
/// Large buffers kept per thread for reuse (2.25 MiB at most).
const CACHED_LARGE: usize = 32;
/// Field slots of a cached field list (a head with more grows its own).
const FIELDS: usize = 32;

thread_local! {
    static CACHE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static SMALL_CACHE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static LARGE_CACHE: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    static FIELD_CACHE: RefCell<Vec<Vec<Field>>> = const { RefCell::new(Vec::new()) };
}

/// An empty vector of `capacity` from `cache`, or a new one.
fn take<T>(cache: &'static LocalKey<RefCell<Vec<Vec<T>>>>, capacity: usize) -> Vec<T> {
    cache
        .with(|c| c.borrow_mut().pop())
        .unwrap_or_else(|| Vec::with_capacity(capacity))
}

/// Gives `v` back to `cache`, emptied; one whose capacity is no longer `capacity` (it grew)
/// is freed instead.
fn give<T>(cache: &'static LocalKey<RefCell<Vec<Vec<T>>>>, mut v: Vec<T>, capacity: usize) {
    if v.capacity() != capacity {
        return;
    }
    let most = if capacity == LARGE {
        CACHED_LARGE
    } else {
        CACHED
    };
    v.clear();
    let kept = cache.with(|c| {
        let mut cache = c.borrow_mut();
        let room = cache.len() < most;
        if room {
            cache.push(v);
        }
        room
    });
    if !kept {
        // The cache is full: a burst is ending.
        shrink_after_burst();
    }
}

thread_local! {
    /// A shrink of this thread's caches is due (`shrink_after_burst`).
    static SHRINK_DUE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A quarter of a second after a burst overflowed this worker's caches, shrinks them to
/// [`KEPT_AFTER_BURST`] and hands free memory back to the OS: what a burst took stays in
/// the caches and the allocator's arenas otherwise (measured, `bench/idle.py` burst of
/// 3,000: 6.6 KiB per idle connection with 256 buffers cached per thread and no release,
/// against 1.4 for connections made one at a time). At most four a second, and none while
/// the requests in flight fit the caches. On a worker's own (current-thread) runtime, so
/// the task shrinks the caches of the thread whose caches overflowed.
fn shrink_after_burst() {
    if SHRINK_DUE.with(|due| due.replace(true)) {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        SHRINK_DUE.with(|due| due.set(false));
        return;
    };
    runtime.spawn(async {
        tokio::time::sleep(Duration::from_millis(250)).await;
        SHRINK_DUE.with(|due| due.set(false));
        for cache in [&CACHE, &SMALL_CACHE, &LARGE_CACHE] {
            cache.with(|c| c.borrow_mut().truncate(KEPT_AFTER_BURST));
        }
        FIELD_CACHE.with(|c| c.borrow_mut().truncate(KEPT_AFTER_BURST));
        crate::memory::release_free_memory();
    });
}

/// A buffer of [`BUFFER`] bytes' capacity, empty: from this thread's cache if it has one.
pub fn take_buffer() -> Vec<u8> {
    take(&CACHE, BUFFER)
}

/// Gives a buffer back to this thread's cache (one grown past [`BUFFER`] is freed instead).
pub fn give_buffer(buf: Vec<u8>) {
    give(&CACHE, buf, BUFFER)
}

/// A buffer of [`SMALL`] bytes' capacity, empty, from this thread's cache if it has one.
pub fn take_small() -> Vec<u8> {
    take(&SMALL_CACHE, SMALL)
}

/// Gives a small buffer back (one that grew is freed instead).
pub fn give_small(buf: Vec<u8>) {
    give(&SMALL_CACHE, buf, SMALL)
}

/// Gives a buffer back to the cache its capacity belongs to, small, full or large (one
/// that grew is freed instead).
pub fn give_back(buf: Vec<u8>) {
    match buf.capacity() {
        SMALL => give_small(buf),
        LARGE => give(&LARGE_CACHE, buf, LARGE),
        _ => give_buffer(buf),
    }
}

/// A buffer of [`LARGE`] bytes' capacity, empty, from this thread's cache if it has one.
pub fn take_large() -> Vec<u8> {
    take(&LARGE_CACHE, LARGE)
}

/// An empty field list for a head, from this thread's cache if it has one.
pub fn take_fields() -> Vec<Field> {
    take(&FIELD_CACHE, FIELDS)
}

/// Gives a field list back (one that grew is freed instead).
pub fn give_fields(fields: Vec<Field>) {
    give(&FIELD_CACHE, fields, FIELDS)
}
