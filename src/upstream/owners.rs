//! Owners learned at run time: of legacy ids (docs/fanout.md `legacy: probe`): which region answered for an id that has
//! no routing bits, so that the next request for it goes straight there.
//!
//! A bounded LRU (the `lru` crate) with a time to live, behind a mutex. Only requests for ids
//! without routing bits under `legacy: probe` touch it: the iUID path never does. Entries hold
//! the region's name, not its index, so an owner outlives a table reload that reorders the
//! regions (and is forgotten when its region is gone).
//!
//! It also keeps the owners the regions named themselves (`421` with `X-Iuid-Owner`,
//! docs/failover.md), by the id's fingerprint (`scheme::Key::fingerprint`), under the same
//! bound and TTL; until the first such hint, a request's only cost is one atomic load.
//!
//! It also remembers, for a shorter time, ids that no region owns (every region answered
//! 404/410), so that asking again and again for an unknown id is not asked of every region
//! each time.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;

/// Canonical id text → (region name, or `None` for "no region", when learned).
type OwnerLru = LruCache<Box<str>, (Option<Box<str>>, Instant)>;

/// Id fingerprint → (the region a `421` named, when learned).
type HintLru = LruCache<u64, (Box<str>, Instant)>;

/// What the cache knows of an id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Known {
    /// The region that last answered for it.
    Owner(Box<str>),
    /// No region owned it a moment ago.
    Nobody,
    /// Nothing (never seen, or expired).
    Unknown,
}

/// The owner cache.
#[derive(Debug)]
pub struct Owners {
    cache: Option<Mutex<OwnerLru>>,
    /// Owners named by `421` answers, by id fingerprint.
    hints: Option<Mutex<HintLru>>,
    /// Set at the first hint learned: until then no request looks.
    any_hint: AtomicBool,
    ttl: Duration,
    negative_ttl: Duration,
}

impl Owners {
    /// A cache of at most `entries` owners (0: none kept), each kept for `ttl`.
    pub fn new(entries: usize, ttl: Duration) -> Owners {
        Owners {
            cache: NonZeroUsize::new(entries).map(|n| Mutex::new(LruCache::new(n))),
            hints: NonZeroUsize::new(entries).map(|n| Mutex::new(LruCache::new(n))),
            any_hint: AtomicBool::new(false),
            ttl,
            negative_ttl: Duration::ZERO,
        }
    }

    /// The cache `legacy_cache` describes (docs/config.md): shared by the data path (legacy
    /// probes, `421` hints) and the admin API (`/admin/resolve`).
    pub fn for_config(config: &crate::config::RouterConfig) -> Owners {
        let cache = &config.legacy_cache;
        Owners::new(cache.entries, Duration::from_secs(cache.ttl_s))
            .with_negative_ttl(Duration::from_millis(cache.negative_ttl_ms))
    }

    /// Also remembers ids no region owns, each for `ttl` (zero: not at all).
    pub fn with_negative_ttl(self, ttl: Duration) -> Owners {
        Owners {
            negative_ttl: ttl,
            ..self
        }
    }

    /// The region that last answered for `id`, unless that is older than the TTL.
    #[cfg(test)]
    pub fn get(&self, id: &str) -> Option<Box<str>> {
        match self.lookup(id) {
            Known::Owner(region) => Some(region),
            Known::Nobody | Known::Unknown => None,
        }
    }

    /// What is known of `id`: its owner (within the TTL), that no region owns it (within
    /// the negative TTL), or nothing.
    pub fn lookup(&self, id: &str) -> Known {
        let Some(cache) = &self.cache else {
            return Known::Unknown;
        };
        let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
        let Some((region, at)) = cache.get(id) else {
            return Known::Unknown;
        };
        let ttl = if region.is_some() {
            self.ttl
        } else {
            self.negative_ttl
        };
        if at.elapsed() >= ttl {
            cache.pop(id);
            return Known::Unknown;
        }
        match region {
            Some(region) => Known::Owner(region.clone()),
            None => Known::Nobody,
        }
    }

    /// Remembers that no region owns `id` (if a negative TTL is set).
    pub fn insert_nobody(&self, id: &str) {
        if let (Some(cache), false) = (&self.cache, self.negative_ttl.is_zero()) {
            let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.put(id.into(), (None, Instant::now()));
        }
    }

    /// Remembers that `region` answered for `id`.
    pub fn insert(&self, id: &str, region: &str) {
        if let Some(cache) = &self.cache {
            let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.put(id.into(), (Some(region.into()), Instant::now()));
        }
    }

    /// Whether any owner was learned from a `421` (the cheap test before [`Owners::hinted`]).
    #[inline]
    pub fn has_hints(&self) -> bool {
        self.any_hint.load(Ordering::Relaxed)
    }

    /// Remembers that a region named `region` the owner of the id with fingerprint `id`.
    pub fn learn(&self, id: u64, region: &str) {
        if let Some(hints) = &self.hints {
            let mut hints = hints.lock().unwrap_or_else(|p| p.into_inner());
            hints.put(id, (region.into(), Instant::now()));
            self.any_hint.store(true, Ordering::Relaxed);
        }
    }

    /// The owner a region named for the id with fingerprint `id`, within the TTL.
    pub fn hinted(&self, id: u64) -> Option<Box<str>> {
        let mut hints = self
            .hints
            .as_ref()?
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let (region, at) = hints.get(&id)?;
        if at.elapsed() >= self.ttl {
            hints.pop(&id);
            return None;
        }
        Some(region.clone())
    }

    /// Forgets `id`'s owner (it answered 404 or 410 after all).
    pub fn forget(&self, id: &str) {
        if let Some(cache) = &self.cache {
            cache.lock().unwrap_or_else(|p| p.into_inner()).pop(id);
        }
    }

    /// Owners held now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.cache
            .as_ref()
            .map_or(0, |c| c.lock().unwrap_or_else(|p| p.into_inner()).len())
    }

    /// Whether no owner is held.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_expiring_and_forgetful() {
        let owners = Owners::new(2, Duration::from_secs(60));
        owners.insert("a", "ap");
        owners.insert("b", "us");
        assert_eq!(owners.get("a").as_deref(), Some("ap"));
        owners.insert("c", "eu");
        // `b` was used least recently.
        assert_eq!(owners.get("b"), None);
        assert_eq!(owners.len(), 2);
        owners.forget("a");
        assert_eq!(owners.get("a"), None);

        let short = Owners::new(10, Duration::from_millis(1));
        short.insert("a", "ap");
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(short.get("a"), None);
        assert!(short.is_empty());
        assert_eq!(Owners::new(0, Duration::from_secs(1)).get("a"), None);
    }

    #[test]
    fn hints_are_kept_by_fingerprint_and_expire() {
        let owners = Owners::new(2, Duration::from_millis(50));
        assert!(!owners.has_hints());
        owners.learn(7, "us");
        assert!(owners.has_hints());
        assert_eq!(owners.hinted(7).as_deref(), Some("us"));
        assert_eq!(owners.hinted(8), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(owners.hinted(7), None);
    }

    #[test]
    fn nobody_is_remembered_for_the_negative_ttl_only() {
        let owners = Owners::new(10, Duration::from_secs(60));
        owners.insert_nobody("a");
        assert_eq!(
            owners.lookup("a"),
            Known::Unknown,
            "no negative TTL: not kept"
        );
        let owners = owners.with_negative_ttl(Duration::from_millis(20));
        owners.insert_nobody("a");
        assert_eq!(owners.lookup("a"), Known::Nobody);
        assert_eq!(owners.get("a"), None);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(owners.lookup("a"), Known::Unknown);
        owners.insert_nobody("b");
        owners.insert("b", "us");
        assert_eq!(owners.lookup("b"), Known::Owner("us".into()));
    }
}
