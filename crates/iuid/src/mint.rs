//! Minting: strictly increasing iUIDs per generator (docs/iuid.md; RFC 9562 §6.2, method 1).
//!
//! The 54 `rand` bits are a 24-bit counter followed by 30 random bits. The counter is seeded
//! randomly at each new millisecond with its top bit clear, leaving at least 2^23 increments
//! of headroom, and counts up within the millisecond. If the clock stands still or steps
//! back, the generator keeps its last timestamp and keeps counting; if the counter overflows,
//! the timestamp runs one millisecond ahead. Either way each id is greater than the last.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::Iuid;

const COUNTER_BITS: u32 = 24;
const COUNTER_MAX: u32 = (1 << COUNTER_BITS) - 1;
const RANDOM_BITS: u32 = 30;

/// A thread-safe source of strictly increasing iUIDs for one country and service entity.
#[derive(Debug)]
pub struct Generator {
    country: u8,
    service_entity: u8,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    ts_ms: u64,
    counter: u32,
    /// Fallback entropy when the OS source fails (see [`random_u64`]).
    fallback: u64,
}

impl Generator {
    /// A generator for ids of `country` and `service_entity`.
    pub fn new(country: u8, service_entity: u8) -> Generator {
        Generator {
            country,
            service_entity,
            state: Mutex::new(State {
                ts_ms: 0,
                counter: 0,
                fallback: 0,
            }),
        }
    }

    /// A fresh id stamped with the wall clock.
    pub fn mint(&self) -> Iuid {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        self.mint_at(now)
    }

    /// A fresh id as if the clock read `now_ms`; greater than every id this generator made
    /// before, whatever `now_ms` is.
    pub fn mint_at(&self, now_ms: u64) -> Iuid {
        // A panic elsewhere while holding the lock cannot leave the state inconsistent (it is
        // two integers), so a poisoned lock is simply taken over.
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if now_ms > st.ts_ms {
            st.ts_ms = now_ms;
            st.counter = seed(&mut st.fallback);
        } else if st.counter < COUNTER_MAX {
            st.counter += 1;
        } else {
            st.ts_ms += 1;
            st.counter = seed(&mut st.fallback);
        }
        let low = random_u64(&mut st.fallback) & ((1 << RANDOM_BITS) - 1);
        let rand = (u64::from(st.counter) << RANDOM_BITS) | low;
        Iuid::from_fields(st.ts_ms, self.country, self.service_entity, rand)
    }
}

/// A counter seed with its top bit clear.
fn seed(fallback: &mut u64) -> u32 {
    (random_u64(fallback) as u32) & (COUNTER_MAX >> 1)
}

/// 64 bits from the OS CSPRNG. Should that fail (no entropy source at all), ids must still be
/// minted: a SplitMix64 step over the clock and a per-generator state stands in, which keeps
/// them unique and increasing, only less unpredictable.
fn random_u64(fallback: &mut u64) -> u64 {
    let mut buf = [0u8; 8];
    if getrandom::fill(&mut buf).is_ok() {
        return u64::from_le_bytes(buf);
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    *fallback = fallback.wrapping_add(0x9e37_79b9_7f4a_7c15 ^ nanos);
    let mut z = *fallback;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counter_overflow_runs_the_timestamp_ahead() {
        let g = Generator::new(1, 2);
        let first = g.mint_at(1000);
        {
            let mut st = g.state.lock().unwrap_or_else(|p| p.into_inner());
            st.counter = COUNTER_MAX - 1;
        }
        let a = g.mint_at(1000);
        let b = g.mint_at(1000); // overflows
        assert!(first < a && a < b);
        assert_eq!(a.unix_ts_ms(), 1000);
        assert_eq!(b.unix_ts_ms(), 1001);
        assert_eq!((b.country(), b.service_entity()), (1, 2));
        let c = g.mint_at(1001);
        assert!(b < c);
    }
}
