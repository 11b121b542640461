//! The admin API's server-side state (docs/admin.md): console sessions and the per-address
//! throttle of wrong tokens. Both are bounded in size, so that no client can grow them
//! without limit; both take `now` from the caller, so that tests need no clock.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// The most live sessions kept; a login beyond it ends the session closest to expiry. Only a
/// holder of the token can log in, so this bounds memory, not an attack.
pub const MAX_SESSIONS: usize = 1024;

/// Wrong tokens (login or `Bearer`) an address may send before it is made to wait.
pub const FREE_FAILURES: u32 = 5;

/// The first wait, after the [`FREE_FAILURES`]th wrong token; each further wrong token
/// doubles it, up to [`MAX_BACKOFF`].
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait between two guesses from one address.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// An address's failures are forgotten this long after its last one.
pub const FORGET_AFTER: Duration = Duration::from_secs(900);

/// The most addresses the throttle remembers; beyond it, the one whose last failure is
/// oldest is forgotten first.
pub const MAX_THROTTLED: usize = 4096;

/// A SHA-256, as the stores key and compare secrets: a lookup's timing then says nothing of
/// the secret.
pub type Digest32 = [u8; 32];

/// SHA-256 of `bytes`.
pub fn digest(bytes: &[u8]) -> Digest32 {
    Sha256::digest(bytes).into()
}

#[derive(Debug)]
struct Session {
    expires: Instant,
}

/// Live console sessions, by the SHA-256 of their cookie value (a stolen copy of this table
/// opens nothing). Every session belongs to one token: when the token changes, all end.
#[derive(Debug, Default)]
pub struct Sessions {
    by_id: HashMap<Digest32, Session>,
    /// SHA-256 of the token the sessions were opened with.
    token: Option<Digest32>,
}

impl Sessions {
    /// Forgets every session if `token` (a SHA-256) is not the one they were opened with.
    fn follow_token(&mut self, token: &Digest32) {
        if self.token.as_ref() != Some(token) {
            if !self.by_id.is_empty() {
                tracing::info!(
                    ended = self.by_id.len(),
                    "the admin token changed: sessions ended"
                );
            }
            self.by_id.clear();
            self.token = Some(*token);
        }
    }

    /// Adds the session whose cookie value has SHA-256 `id`, opened with `token`, until
    /// `now + max_age` (the config bounds `max_age` at 30 days; one past what `Instant` can
    /// hold would end at once).
    pub fn open(&mut self, id: Digest32, token: &Digest32, now: Instant, max_age: Duration) {
        self.follow_token(token);
        if self.by_id.len() >= MAX_SESSIONS {
            self.by_id.retain(|_, s| s.expires > now);
        }
        if self.by_id.len() >= MAX_SESSIONS {
            if let Some(oldest) = self
                .by_id
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| *k)
            {
                self.by_id.remove(&oldest);
            }
        }
        let expires = now.checked_add(max_age).unwrap_or(now);
        self.by_id.insert(id, Session { expires });
    }

    /// Whether the session `id` is live under `token`; an expired one is removed.
    pub fn check(&mut self, id: &Digest32, token: &Digest32, now: Instant) -> bool {
        self.follow_token(token);
        match self.by_id.get(id) {
            Some(s) if s.expires > now => true,
            Some(_) => {
                self.by_id.remove(id);
                false
            }
            None => false,
        }
    }

    /// Ends the session `id` (logout).
    pub fn close(&mut self, id: &Digest32) {
        self.by_id.remove(id);
    }

    /// How many sessions are kept (live or not yet swept).
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no session is kept.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    last: Instant,
}

impl Failures {
    /// Until when the address must wait, if it must.
    fn locked_until(&self) -> Option<Instant> {
        let over = self.count.checked_sub(FREE_FAILURES)?;
        let wait = FIRST_BACKOFF
            .checked_mul(1u32 << over.min(16))
            .unwrap_or(MAX_BACKOFF)
            .min(MAX_BACKOFF);
        Some(self.last + wait)
    }
}

/// Wrong tokens per client address. IPv6 addresses count by their /64, the block one
/// subscriber usually holds, so that walking through one's own addresses does not reset the
/// count.
#[derive(Debug, Default)]
pub struct Throttle {
    by_addr: HashMap<IpAddr, Failures>,
}

/// The throttle's key for `addr`.
fn key(addr: IpAddr) -> IpAddr {
    match addr.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

impl Throttle {
    /// How long `addr` must still wait before its next attempt is looked at; `None`: it may
    /// try now.
    pub fn wait(&self, addr: IpAddr, now: Instant) -> Option<Duration> {
        let until = self.by_addr.get(&key(addr))?.locked_until()?;
        (until > now).then(|| until - now)
    }

    /// Counts one wrong token from `addr`.
    pub fn fail(&mut self, addr: IpAddr, now: Instant) {
        let addr = key(addr);
        if !self.by_addr.contains_key(&addr) && self.by_addr.len() >= MAX_THROTTLED {
            self.by_addr
                .retain(|_, f| now.saturating_duration_since(f.last) < FORGET_AFTER);
            if self.by_addr.len() >= MAX_THROTTLED {
                if let Some(oldest) = self
                    .by_addr
                    .iter()
                    .min_by_key(|(_, f)| f.last)
                    .map(|(k, _)| *k)
                {
                    self.by_addr.remove(&oldest);
                }
            }
        }
        let entry = self.by_addr.entry(addr).or_insert(Failures {
            count: 0,
            last: now,
        });
        if now.saturating_duration_since(entry.last) >= FORGET_AFTER {
            entry.count = 0;
        }
        entry.count = entry.count.saturating_add(1);
        entry.last = now;
    }

    /// Forgets `addr`'s failures (it gave the right token).
    pub fn succeed(&mut self, addr: IpAddr) {
        self.by_addr.remove(&key(addr));
    }

    /// How many addresses are remembered.
    pub fn len(&self) -> usize {
        self.by_addr.len()
    }

    /// Whether no address is remembered.
    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_expire_end_with_the_token_and_stay_bounded() {
        let t0 = Instant::now();
        let (a, b) = (digest(b"token-a"), digest(b"token-b"));
        let mut s = Sessions::default();
        s.open(digest(b"one"), &a, t0, Duration::from_secs(10));
        assert!(s.check(&digest(b"one"), &a, t0 + Duration::from_secs(9)));
        assert!(!s.check(&digest(b"two"), &a, t0));
        assert!(!s.check(&digest(b"one"), &a, t0 + Duration::from_secs(10)));
        assert!(s.is_empty(), "expired sessions are removed");
        s.open(digest(b"one"), &a, t0, Duration::from_secs(10));
        assert!(!s.check(&digest(b"one"), &b, t0), "a new token ends them");
        s.open(digest(b"two"), &b, t0, Duration::from_secs(10));
        s.close(&digest(b"two"));
        assert!(!s.check(&digest(b"two"), &b, t0));
        for i in 0..(MAX_SESSIONS + 10) {
            s.open(digest(&i.to_le_bytes()), &b, t0, Duration::from_secs(10));
        }
        assert_eq!(s.len(), MAX_SESSIONS);
    }

    #[test]
    fn the_throttle_backs_off_forgets_and_stays_bounded() {
        let t0 = Instant::now();
        let ip: IpAddr = "192.0.2.1".parse().expect("ip");
        let mut t = Throttle::default();
        for _ in 0..FREE_FAILURES - 1 {
            t.fail(ip, t0);
            assert_eq!(t.wait(ip, t0), None);
        }
        t.fail(ip, t0);
        assert_eq!(t.wait(ip, t0), Some(FIRST_BACKOFF));
        t.fail(ip, t0);
        assert_eq!(t.wait(ip, t0), Some(2 * FIRST_BACKOFF));
        for _ in 0..40 {
            t.fail(ip, t0);
        }
        assert_eq!(t.wait(ip, t0), Some(MAX_BACKOFF));
        assert_eq!(t.wait(ip, t0 + MAX_BACKOFF), None);
        t.fail(ip, t0 + FORGET_AFTER);
        assert_eq!(
            t.wait(ip, t0 + FORGET_AFTER),
            None,
            "forgotten, counts anew"
        );
        t.succeed(ip);
        assert!(t.is_empty());
        // One IPv6 /64 is one address.
        let a: IpAddr = "2001:db8::1".parse().expect("ip");
        let b: IpAddr = "2001:db8::ffff:2".parse().expect("ip");
        for _ in 0..FREE_FAILURES {
            t.fail(a, t0);
        }
        assert!(t.wait(b, t0).is_some());
        for i in 0..(MAX_THROTTLED as u32 + 10) {
            t.fail(IpAddr::V4(i.into()), t0);
        }
        assert_eq!(t.len(), MAX_THROTTLED);
    }
}
