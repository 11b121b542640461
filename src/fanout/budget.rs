//! Bounds on what fan-outs hold (docs/fanout.md: memory is bounded): how many are in flight in the
//! router and on one client connection, and how many bytes of regions' answers they buffer
//! together. Beyond a bound a fan-out is refused at once (503 with `Retry-After`) rather than
//! queued: a client that retries later costs less than a router that swaps.
//!
//! Lock-free: a few atomics. Every permit and byte reservation is an RAII guard, so an
//! answer that is merged, refused or dropped half-read (a timeout, a client gone) gives its
//! share back. Only fan-outs touch this; the REST path never does.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use crate::config::Limits;

/// When the last fan-out in flight ends and at least this many bytes were buffered since the
/// memory was last handed back, the allocator's free memory is returned to the OS.
const TRIM_AFTER_BYTES: usize = 8 << 20;

/// Which bound refused a fan-out; each names its config key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `limits.fanout_concurrent` fan-outs are in flight in the router.
    Concurrent,
    /// `limits.fanout_per_connection` fan-outs are in flight on the client's connection.
    PerConnection,
    /// The answers buffered would go over `limits.fanout_buffer_bytes`.
    Memory,
}

impl Refusal {
    /// The metric label: `concurrent`, `per_connection`, `memory`.
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::Concurrent => "concurrent",
            Refusal::PerConnection => "per_connection",
            Refusal::Memory => "memory",
        }
    }

    /// The config key of the bound.
    pub fn key(self) -> &'static str {
        match self {
            Refusal::Concurrent => "limits.fanout_concurrent",
            Refusal::PerConnection => "limits.fanout_per_connection",
            Refusal::Memory => "limits.fanout_buffer_bytes",
        }
    }
}

/// The router-wide fan-out bounds and what is in use of them.
#[derive(Debug)]
pub struct FanoutBudget {
    max_bytes: usize,
    max_in_flight: usize,
    max_per_connection: u32,
    bytes: AtomicUsize,
    in_flight: AtomicUsize,
    /// Bytes reserved since the memory was last handed back to the OS.
    since_trim: AtomicUsize,
}

/// One fan-out in flight; dropping it ends it.
#[derive(Debug)]
pub struct Permit<'a> {
    budget: &'a FanoutBudget,
    connection: &'a AtomicU32,
}

/// Bytes of answers held against the budget; dropping it gives them back.
#[derive(Debug)]
pub struct Reservation<'a> {
    budget: &'a FanoutBudget,
    bytes: usize,
}

impl FanoutBudget {
    /// The bounds of `limits` (`fanout_buffer_bytes`, `fanout_concurrent`,
    /// `fanout_per_connection`).
    pub fn new(limits: &Limits) -> FanoutBudget {
        FanoutBudget {
            max_bytes: limits.fanout_buffer_bytes,
            max_in_flight: limits.fanout_concurrent,
            max_per_connection: u32::try_from(limits.fanout_per_connection).unwrap_or(u32::MAX),
            bytes: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            since_trim: AtomicUsize::new(0),
        }
    }

    /// Starts a fan-out for a client connection whose fan-outs in flight `connection` counts.
    ///
    /// Errors: a bound is reached (the buffer budget counts as reached when it is spent).
    pub fn admit<'a>(&'a self, connection: &'a AtomicU32) -> Result<Permit<'a>, Refusal> {
        if self.bytes.load(Ordering::Relaxed) >= self.max_bytes {
            return Err(Refusal::Memory);
        }
        if connection.fetch_add(1, Ordering::AcqRel) >= self.max_per_connection {
            connection.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::PerConnection);
        }
        if self.in_flight.fetch_add(1, Ordering::AcqRel) >= self.max_in_flight {
            self.in_flight.fetch_sub(1, Ordering::AcqRel);
            connection.fetch_sub(1, Ordering::AcqRel);
            return Err(Refusal::Concurrent);
        }
        Ok(Permit {
            budget: self,
            connection,
        })
    }

    /// Reserves `bytes` of the buffer budget; `None` if they do not fit.
    pub fn reserve(&self, bytes: usize) -> Option<Reservation<'_>> {
        let mut reservation = Reservation {
            budget: self,
            bytes: 0,
        };
        reservation.grow(bytes).then_some(reservation)
    }

    /// Bytes reserved now, by every fan-out.
    pub fn buffered(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Fan-outs in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }
}

impl Reservation<'_> {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Holds `more` bytes too; false (nothing taken) if they do not fit.
    pub fn grow(&mut self, more: usize) -> bool {
        let budget = self.budget;
        let took = budget
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |used| {
                used.checked_add(more).filter(|n| *n <= budget.max_bytes)
            });
        if took.is_err() {
            return false;
        }
        budget.since_trim.fetch_add(more, Ordering::Relaxed);
        self.bytes += more;
        true
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.budget.bytes.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        self.connection.fetch_sub(1, Ordering::AcqRel);
        let last = self.budget.in_flight.fetch_sub(1, Ordering::AcqRel) == 1;
        if last && self.budget.since_trim.load(Ordering::Relaxed) >= TRIM_AFTER_BYTES {
            self.budget.since_trim.store(0, Ordering::Relaxed);
            crate::memory::release_free_memory();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(bytes: usize, concurrent: usize, per_connection: usize) -> FanoutBudget {
        FanoutBudget::new(&Limits {
            fanout_buffer_bytes: bytes,
            fanout_concurrent: concurrent,
            fanout_per_connection: per_connection,
            ..Limits::default()
        })
    }

    #[test]
    fn permits_are_bounded_overall_and_per_connection() {
        let b = budget(100, 3, 2);
        let (one, two) = (AtomicU32::new(0), AtomicU32::new(0));
        let p1 = b.admit(&one).expect("first");
        let p2 = b.admit(&one).expect("second");
        assert_eq!(b.admit(&one).err(), Some(Refusal::PerConnection));
        let p3 = b.admit(&two).expect("another connection");
        assert_eq!(b.admit(&two).err(), Some(Refusal::Concurrent));
        assert_eq!(two.load(Ordering::Relaxed), 1, "a refusal takes nothing");
        drop((p1, p2, p3));
        assert_eq!((b.in_flight(), one.load(Ordering::Relaxed)), (0, 0));
    }

    #[test]
    fn bytes_are_bounded_and_given_back() {
        let b = budget(100, 3, 3);
        let conn = AtomicU32::new(0);
        let mut r = b.reserve(60).expect("fits");
        assert!(b.reserve(41).is_none());
        assert!(r.grow(40));
        assert!(!r.grow(1));
        assert_eq!((r.bytes(), b.buffered()), (100, 100));
        assert_eq!(b.admit(&conn).err(), Some(Refusal::Memory));
        drop(r);
        assert_eq!(b.buffered(), 0);
        assert!(b.admit(&conn).is_ok());
    }
}
