//! Owners of legacy ids (SPEC §11 `legacy: probe`): which region answered for an id that has
//! no routing bits, so that the next request for it goes straight there.
//!
//! A bounded LRU (the `lru` crate) with a time to live, behind a mutex. Only requests for ids
//! without routing bits under `legacy: probe` touch it: the iUID path never does. Entries hold
//! the region's name, not its index, so an owner outlives a table reload that reorders the
//! regions (and is forgotten when its region is gone).

use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;

/// Canonical id text → (region name, when learned).
type OwnerLru = LruCache<Box<str>, (Box<str>, Instant)>;

/// The owner cache.
#[derive(Debug)]
pub struct Owners {
    cache: Option<Mutex<OwnerLru>>,
    ttl: Duration,
}

impl Owners {
    /// A cache of at most `entries` owners (0: none kept), each kept for `ttl`.
    pub fn new(entries: usize, ttl: Duration) -> Owners {
        Owners {
            cache: NonZeroUsize::new(entries).map(|n| Mutex::new(LruCache::new(n))),
            ttl,
        }
    }

    /// The region that last answered for `id`, unless that is older than the TTL.
    pub fn get(&self, id: &str) -> Option<Box<str>> {
        let mut cache = self
            .cache
            .as_ref()?
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match cache.get(id) {
            Some((region, at)) if at.elapsed() < self.ttl => Some(region.clone()),
            Some(_) => {
                cache.pop(id);
                None
            }
            None => None,
        }
    }

    /// Remembers that `region` answered for `id`.
    pub fn insert(&self, id: &str, region: &str) {
        if let Some(cache) = &self.cache {
            let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
            cache.put(id.into(), (region.into(), Instant::now()));
        }
    }

    /// Forgets `id`'s owner (it answered 404 or 410 after all).
    pub fn forget(&self, id: &str) {
        if let Some(cache) = &self.cache {
            cache.lock().unwrap_or_else(|p| p.into_inner()).pop(id);
        }
    }

    /// Owners held now.
    pub fn len(&self) -> usize {
        self.cache
            .as_ref()
            .map_or(0, |c| c.lock().unwrap_or_else(|p| p.into_inner()).len())
    }

    /// Whether no owner is held.
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
}
