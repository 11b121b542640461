//! The plan cache: document shape → extraction plan, shared by all requests.
//!
//! Reads are lock-free: the map sits behind `arc-swap` and is replaced whole (copy on write)
//! when a plan is added. That is cheap because clients send few distinct documents: after
//! warm-up, the map only changes when a new document appears. The map is bounded; when full,
//! the half of the entries hit least since the last eviction is dropped, so a flood of
//! one-off documents cannot push out the documents real clients keep sending.
//!
//! Every entry keeps the shape it was built from and is applied only to a document of exactly
//! that shape, so a hash collision costs a parse, never a wrong route.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use super::plan::{Plan, PlanError};
use super::scan::{same_shape, Literal};

/// A cached outcome for one shape and operation name.
#[derive(Debug)]
pub struct Entry {
    shape: Box<[u8]>,
    operation_name: Option<Box<str>>,
    /// The plan, or the deterministic error the document gives (a bad document is rejected
    /// again without parsing).
    pub plan: Result<Plan, PlanError>,
    hits: AtomicU32,
}

/// Bounded, lock-free-read plan cache.
#[derive(Debug)]
pub struct PlanCache {
    map: ArcSwap<HashMap<u64, Arc<Entry>>>,
    capacity: usize,
    /// Documents longer than this are not cached (their shapes would crowd out the rest).
    max_shape: usize,
}

impl PlanCache {
    /// A cache of at most `capacity` plans, caching documents up to `max_shape` bytes.
    pub fn new(capacity: usize, max_shape: usize) -> PlanCache {
        PlanCache {
            map: ArcSwap::from_pointee(HashMap::new()),
            capacity: capacity.max(2),
            max_shape,
        }
    }

    /// The cache key: the shape hash mixed with the operation name.
    pub fn key(shape_hash: u64, operation_name: Option<&str>) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = rustc_hash::FxHasher::default();
        shape_hash.hash(&mut h);
        operation_name.hash(&mut h);
        h.finish()
    }

    /// The entry for this document, if cached.
    pub fn get(
        &self,
        key: u64,
        doc: &[u8],
        literals: &[Literal],
        operation_name: Option<&str>,
    ) -> Option<Arc<Entry>> {
        let map = self.map.load();
        let entry = map.get(&key)?;
        if entry.operation_name.as_deref() == operation_name
            && same_shape(doc, literals, &entry.shape)
        {
            entry.hits.fetch_add(1, Ordering::Relaxed);
            Some(entry.clone())
        } else {
            None
        }
    }

    /// Adds an outcome; returns it shared. Documents over `max_shape` are not kept.
    pub fn insert(
        &self,
        key: u64,
        shape: Vec<u8>,
        operation_name: Option<&str>,
        plan: Result<Plan, PlanError>,
    ) -> Arc<Entry> {
        let keep = shape.len() <= self.max_shape;
        let entry = Arc::new(Entry {
            shape: shape.into_boxed_slice(),
            operation_name: operation_name.map(Into::into),
            plan,
            hits: AtomicU32::new(1),
        });
        if keep {
            self.map.rcu(|old| {
                let mut map: HashMap<u64, Arc<Entry>> = if old.len() >= self.capacity {
                    evict(old, self.capacity / 2)
                } else {
                    (**old).clone()
                };
                map.insert(key, entry.clone());
                map
            });
        }
        entry
    }

    /// How many plans are cached.
    pub fn len(&self) -> usize {
        self.map.load().len()
    }

    /// Whether no plan is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Keeps the `keep` most-hit entries and halves their counts, so that the past weighs less
/// than the present.
fn evict(old: &HashMap<u64, Arc<Entry>>, keep: usize) -> HashMap<u64, Arc<Entry>> {
    let mut entries: Vec<(&u64, &Arc<Entry>)> = old.iter().collect();
    entries.sort_by_key(|(_, e)| std::cmp::Reverse(e.hits.load(Ordering::Relaxed)));
    entries
        .into_iter()
        .take(keep)
        .map(|(k, e)| {
            let hits = e.hits.load(Ordering::Relaxed);
            e.hits.store(hits / 2, Ordering::Relaxed);
            (*k, e.clone())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_keeps_what_is_used() {
        let cache = PlanCache::new(4, 1024);
        let hot = cache.insert(1, b"hot".to_vec(), None, Ok(Plan::default()));
        for _ in 0..10 {
            assert!(cache.get(1, b"hot", &[], None).is_some());
        }
        // A flood of one-off documents while clients keep sending the hot one.
        for k in 2..200u64 {
            cache.insert(k, format!("doc{k}").into_bytes(), None, Ok(Plan::default()));
            assert!(cache.len() <= 4);
            assert!(cache.get(1, b"hot", &[], None).is_some(), "evicted at {k}");
        }
        assert!(
            cache.get(1, b"hot", &[], None).is_some(),
            "the hot entry survives"
        );
        assert!(Arc::ptr_eq(
            &hot,
            &cache.get(1, b"hot", &[], None).expect("hot")
        ));
        // Same key, other shape or operation: a miss, not a wrong plan.
        assert!(cache.get(1, b"cold", &[], None).is_none());
        assert!(cache.get(1, b"hot", &[], Some("Op")).is_none());
    }
}
