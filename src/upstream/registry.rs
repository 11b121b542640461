//! The upstream registry: one [`UpstreamState`] per upstream, by [`UpstreamSpec::key`], shared
//! by every routing table that names it, so that a reload keeps its pools, health and
//! active check (ARCHITECTURE.md, "Who owns which state").

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use super::{check, raw, UpstreamState};
use crate::config::{CheckPolicy, Timeouts};
use crate::table::UpstreamSpec;

/// Upstream states by [`UpstreamSpec::key`] (scheme, protocol, TLS identity, authority),
/// shared across table reloads.
#[derive(Debug)]
pub struct Registry {
    timeouts: Timeouts,
    answer_head: raw::AnswerHead,
    workers: usize,
    checks: Option<CheckPolicy>,
    states: Mutex<HashMap<String, Weak<UpstreamState>>>,
}

impl Registry {
    /// A registry whose clients use `timeouts`, with active checks if `checks` is set, for a
    /// router of `workers` worker threads.
    pub fn new(timeouts: Timeouts, checks: Option<CheckPolicy>, workers: usize) -> Registry {
        Registry {
            timeouts,
            answer_head: raw::AnswerHead::default(),
            workers,
            checks,
            states: Mutex::new(HashMap::new()),
        }
    }

    /// The registry with answer heads bounded by `answer_head` (the config's `limits`;
    /// the defaults' otherwise).
    pub fn with_answer_head(mut self, answer_head: raw::AnswerHead) -> Registry {
        self.answer_head = answer_head;
        self
    }

    /// The state of `spec`'s upstream: the existing one while any table holds it, else a new
    /// one (which starts its active check, if configured and inside a runtime).
    pub fn get(&self, spec: &UpstreamSpec) -> Arc<UpstreamState> {
        let key = spec.key();
        let mut states = self.states.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(state) = states.get(&key).and_then(Weak::upgrade) {
            return state;
        }
        states.retain(|_, w| w.strong_count() > 0);
        let state = Arc::new(UpstreamState::new(
            spec,
            &self.timeouts,
            self.answer_head,
            self.workers,
        ));
        states.insert(key, Arc::downgrade(&state));
        if let Some(policy) = self.checks.clone() {
            check::spawn(Arc::downgrade(&state), policy);
        }
        state
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new(Timeouts::default(), None, 1)
    }
}
