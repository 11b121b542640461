//! Rate limits (docs/rate-limits.md): `rate_limits:` rules, each a GCRA (the
//! generic cell rate algorithm: `rate` with `burst` extra; from idle `burst + 1` pass at
//! once, then one per `1/rate`) counted per key, and the answer to a request over one.
//!
//! The proxy asks at two places, once each per request (ARCHITECTURE.md "Where a feature
//! goes"): [`RateLimits::check_head`] in the admit phase, for the keys a request's head
//! gives (`client_ip`, a header, `route`), and [`RateLimits::check_region`] in the plan step
//! and for every fan-out leg and legacy probe, for the owner region's budget. Every rule that
//! applies is checked, in the file's order; the first that refuses answers, and the rules
//! before it have counted the request (as nginx's `limit_req` zones do).
//!
//! Counters live in this edge's memory (`local.rs`, `governor`) or, with `store.redis`, in
//! a Redis every edge shares (`shared.rs`), whose decision is a future the proxy awaits;
//! the in-memory one is made at once. Nothing here knows a socket or a codec: the proxy
//! hands in what a rule reads through [`Keys`] and turns a [`Limited`] into its 429.

mod client_ip;
mod local;
mod shared;

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use http::{HeaderName, HeaderValue};
use metrics::Counter;

pub use client_ip::client_ip;
pub use local::TopKey;

use crate::config::{LimitKey, OnStoreError, RateLimitRule, RouterConfig};

/// What a rule reads of one request's head.
pub trait Keys {
    /// The request's path (before `?`).
    fn path(&self) -> &str;
    /// The client's address ([`client_ip`]); asked only when a `client_ip` rule applies.
    fn client_ip(&self) -> IpAddr;
    /// The first value of the header `name`.
    fn field(&self, name: &HeaderName) -> Option<&[u8]>;
}

/// Whether a key field's lines say one thing: none, one, or the same value on each (read
/// once). Lines that differ are no one key: an upstream reads the first (Go's `Header.Get`),
/// the last, or all of them joined (WSGI, Node.js), and the rule would count another key
/// than the one the upstream acts on (docs/rate-limits.md, "A key sent twice").
pub fn one_value<'a>(mut lines: impl Iterator<Item = &'a [u8]>) -> bool {
    match lines.next() {
        None => true,
        Some(first) => lines.all(|line| line == first),
    }
}

/// A request over a rule: the 429 to answer (`Problem::RateLimited`).
#[derive(Debug, Clone)]
pub struct Limited {
    /// The rule's name (`rule` label of `iuid_router_rate_limited_total`).
    pub rule: Arc<str>,
    /// How long until the key would be admitted again.
    pub retry_after: Duration,
    /// `RateLimit-Policy` (draft-ietf-httpapi-ratelimit-headers-08): `"name";q=N;w=S`.
    pub policy: HeaderValue,
    /// The rule in words, for the problem's detail: `100/s with a burst of 200`.
    pub terms: Arc<str>,
}

impl Limited {
    /// `Retry-After` in whole seconds, rounded up, at least 1 (RFC 9110 §10.2.3).
    pub fn retry_after_secs(&self) -> u64 {
        u64::try_from(self.retry_after.as_millis().div_ceil(1000))
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// `RateLimit` (draft -08): `"name";r=0;t=S`, none left for `S` seconds.
    pub fn rate_limit_field(&self) -> String {
        format!("\"{}\";r=0;t={}", self.rule, self.retry_after_secs())
    }
}

/// A decision: made at once, or a Redis answer to await. A refusal is boxed: rare, and
/// every request's `Result`s would be sized for it.
pub enum Verdict<'a> {
    /// Every rule that applies admits the request.
    Admit,
    /// A rule refuses it.
    Limited(Box<Limited>),
    /// The shared store decides (`store.redis`).
    Ask(Pin<Box<dyn Future<Output = Result<(), Box<Limited>>> + Send + 'a>>),
}

impl<'a> Verdict<'a> {
    /// The decision, awaited when it is the store's.
    pub async fn decided(self) -> Result<(), Box<Limited>> {
        match self {
            Verdict::Admit => Ok(()),
            Verdict::Limited(limited) => Err(limited),
            Verdict::Ask(asked) => asked.await,
        }
    }
}

/// One compiled rule.
struct Rule {
    settings: RateLimitRule,
    name: Arc<str>,
    terms: Arc<str>,
    /// `routes:` as one router, the value each template's index.
    scope: Option<matchit::Router<usize>>,
    local: local::Local,
    policy: HeaderValue,
    refused: Counter,
    refused_n: AtomicU64,
    /// `(interval, tolerance)` for the shared store's script.
    gcra: (Duration, Duration),
}

/// A key's value as one request gave it.
enum KeyVal<'k> {
    Ip(IpAddr),
    Bytes(&'k [u8]),
}

impl KeyVal<'_> {
    fn hash(&self, seed: &rustc_hash::FxBuildHasher, salt: u64) -> u64 {
        let mut h = seed.build_hasher();
        h.write_u64(salt);
        match self {
            KeyVal::Ip(IpAddr::V4(v4)) => h.write_u32(v4.to_bits()),
            KeyVal::Ip(IpAddr::V6(v6)) => h.write_u128(v6.to_bits()),
            KeyVal::Bytes(b) => h.write(b),
        }
        h.finish()
    }

    fn text(&self) -> Vec<u8> {
        match self {
            KeyVal::Ip(ip) => ip.to_string().into_bytes(),
            KeyVal::Bytes(b) => b.to_vec(),
        }
    }
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.rules.iter().map(|r| &*r.name).collect();
        f.debug_struct("RateLimits")
            .field("rules", &names)
            .field("shared", &self.shared.is_some())
            .finish()
    }
}

/// The compiled `rate_limits:`, their counters, and the shared store.
pub struct RateLimits {
    rules: Vec<Rule>,
    head: bool,
    region: bool,
    /// The fields `{ header: NAME }` rules read, each once.
    header_keys: Vec<HeaderName>,
    shared: Option<shared::Shared>,
    hasher: rustc_hash::FxBuildHasher,
    /// Mixed into every key's hash, so that which keys collide is not known outside.
    salt: u64,
}

impl RateLimits {
    /// The rules of `config`, and a thread that evicts their idle keys every second for as
    /// long as they live. `None` when there are none: no request pays for a check.
    pub fn start(config: &RouterConfig) -> Option<Arc<RateLimits>> {
        if config.rate_limits.is_empty() {
            return None;
        }
        let rules: Vec<Rule> = config.rate_limits.iter().map(Rule::new).collect();
        let mut header_keys: Vec<HeaderName> = Vec::new();
        for rule in &rules {
            if let LimitKey::Header(name) = &rule.settings.key {
                if !header_keys.contains(name) {
                    header_keys.push(name.clone());
                }
            }
        }
        let limits = Arc::new(RateLimits {
            header_keys,
            head: rules.iter().any(|r| r.settings.key.from_head()),
            region: rules.iter().any(|r| !r.settings.key.from_head()),
            rules,
            shared: config.store.as_ref().map(shared::Shared::new),
            hasher: rustc_hash::FxBuildHasher,
            salt: std::collections::hash_map::RandomState::new().hash_one(0u8),
        });
        let weak = Arc::downgrade(&limits);
        let spawned = std::thread::Builder::new()
            .name("rate-limit-keys".into())
            .spawn(move || housekeep(weak));
        if let Err(e) = spawned {
            tracing::error!(error = %e, "no thread to evict idle rate-limit keys");
        }
        Some(limits)
    }

    /// Whether a rule reads the head (a `client_ip`, header or `route` key).
    pub fn has_head_rules(&self) -> bool {
        self.head
    }

    /// The fields `{ header: NAME }` rules read (each once): a request that sends one on
    /// lines with different values is refused in the admit phase, whatever the rules'
    /// `routes:` (`Problem::AmbiguousHeader`, docs/rate-limits.md).
    pub fn header_keys(&self) -> &[HeaderName] {
        &self.header_keys
    }

    /// Whether a rule counts the owner region (`key: region`).
    pub fn has_region_rules(&self) -> bool {
        self.region
    }

    /// Whether decisions are Redis's (the own engine's head path hands a request Redis must
    /// decide to the shared phases, which can await it).
    pub fn is_shared(&self) -> bool {
        self.shared.is_some()
    }

    /// The admit phase's decision: the rules keyed by the head (`client_ip`, a header,
    /// `route`) whose `routes:` hold the path.
    pub fn check_head<'a>(&'a self, keys: &dyn Keys) -> Verdict<'a> {
        if !self.head {
            return Verdict::Admit;
        }
        let mut ip = None;
        self.decide(
            true,
            || keys.path(),
            |rule, route| match &rule.settings.key {
                LimitKey::ClientIp => Some(KeyVal::Ip(*ip.get_or_insert_with(|| keys.client_ip()))),
                LimitKey::Header(name) => keys.field(name).map(KeyVal::Bytes),
                LimitKey::Route => rule
                    .settings
                    .routes
                    .get(route)
                    .map(|r| KeyVal::Bytes(r.as_bytes())),
                LimitKey::Region => None,
            },
        )
    }

    /// The decision for one exchange with `region` (a request in the plan step, a fan-out
    /// leg, a legacy probe) at `path` (asked only when a rule has `routes:`): the `region`
    /// rules.
    pub fn check_region<'a, 'p>(
        &'a self,
        path: impl FnOnce() -> &'p str,
        region: &str,
    ) -> Verdict<'a> {
        if !self.region {
            return Verdict::Admit;
        }
        self.decide(false, path, |_, _| Some(KeyVal::Bytes(region.as_bytes())))
    }

    /// Every rule of the stage (`head` or region) that applies: its key, its decision. The
    /// path is read once, and only for a rule with `routes:` (it is a UTF-8 check and a
    /// search on the head path).
    fn decide<'a: 'k, 'k, 'p>(
        &'a self,
        head: bool,
        path: impl FnOnce() -> &'p str,
        mut key_of: impl FnMut(&'a Rule, usize) -> Option<KeyVal<'k>>,
    ) -> Verdict<'a> {
        let shared = self.shared.as_ref();
        let mut asks: Vec<(usize, Vec<u8>, u64)> = Vec::new();
        let mut path = Some(path);
        let mut read: &str = "";
        let mut fell_back = false;
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.settings.key.from_head() != head {
                continue;
            }
            let route = match &rule.scope {
                None => 0,
                Some(scope) => {
                    if let Some(path) = path.take() {
                        read = path();
                    }
                    match scope.at(read) {
                        Ok(matched) => *matched.value,
                        Err(_) => continue,
                    }
                }
            };
            let Some(key) = key_of(rule, route) else {
                continue;
            };
            let hash = key.hash(&self.hasher, self.salt);
            match shared {
                Some(store) if store.up() => asks.push((i, key.text(), hash)),
                Some(store) => {
                    // Redis failed within the last second: `on_error` decides, counted once
                    // per decision.
                    if !fell_back {
                        fell_back = true;
                        store.count_error();
                    }
                    if store.on_error() == OnStoreError::Local {
                        if let Err(limited) = rule.check_local(hash, || key.text()) {
                            return Verdict::Limited(limited);
                        }
                    }
                }
                None => {
                    if let Err(limited) = rule.check_local(hash, || key.text()) {
                        return Verdict::Limited(limited);
                    }
                }
            }
        }
        match shared {
            Some(store) if !asks.is_empty() => Verdict::Ask(Box::pin(self.ask(store, asks))),
            _ => Verdict::Admit,
        }
    }

    /// One script call for every rule in `asks` (`(rule, key text, key hash)`); Redis away,
    /// `on_error` decides them.
    async fn ask(
        &self,
        store: &shared::Shared,
        asks: Vec<(usize, Vec<u8>, u64)>,
    ) -> Result<(), Box<Limited>> {
        let keys: Vec<Vec<u8>> = asks
            .iter()
            .map(|(i, text, _)| self.rules[*i].store_key(text))
            .collect();
        let params: Vec<(Duration, Duration)> =
            asks.iter().map(|(i, _, _)| self.rules[*i].gcra).collect();
        match store.ask(&keys, &params).await {
            Some(shared::Answer::Admit) => Ok(()),
            Some(shared::Answer::Refuse(n, wait)) => match asks.get(n) {
                Some((i, text, hash)) => Err(self.rules[*i].refuse(*hash, wait, || lossy(text))),
                None => Ok(()),
            },
            None if store.on_error() == OnStoreError::Allow => Ok(()),
            None => {
                for (i, text, hash) in &asks {
                    self.rules[*i].check_local(*hash, || text.clone())?;
                }
                Ok(())
            }
        }
    }

    /// The rules, their keys now and refusals, for `GET /admin/rate-limits`
    /// (docs/admin.md).
    pub fn snapshot(&self) -> serde_json::Value {
        let rules: Vec<serde_json::Value> = self
            .rules
            .iter()
            .map(|rule| {
                let s = &rule.settings;
                serde_json::json!({
                    "name": &*rule.name,
                    "key": s.key.label(),
                    "rate": format!("{}/{}", s.rate.count, unit(s.rate.window_secs())),
                    "burst": s.burst,
                    "routes": s.routes,
                    "policy": rule.policy.to_str().unwrap_or(""),
                    "keys_in_memory": rule.local.keys(),
                    "refused": rule.refused_n.load(Ordering::Relaxed),
                    "top_keys": rule.local.top(),
                })
            })
            .collect();
        let store = match &self.shared {
            None => serde_json::json!({ "kind": "memory" }),
            Some(store) => serde_json::json!({
                "kind": "redis",
                "url": store.url(),
                "reachable": store.reachable(),
                "on_error": match store.on_error() {
                    OnStoreError::Local => "local",
                    OnStoreError::Allow => "allow",
                },
                "errors": store.errors.load(Ordering::Relaxed),
            }),
        };
        serde_json::json!({ "store": store, "rules": rules })
    }
}

fn unit(secs: u64) -> &'static str {
    match secs {
        1 => "s",
        60 => "min",
        _ => "h",
    }
}

fn lossy(text: &[u8]) -> String {
    let end = text.len().min(64);
    String::from_utf8_lossy(&text[..end]).into_owned()
}

impl Rule {
    fn new(settings: &RateLimitRule) -> Rule {
        let scope = (!settings.routes.is_empty()).then(|| {
            let mut router = matchit::Router::new();
            for (i, route) in settings.routes.iter().enumerate() {
                // Validated with the config; a template conflicting with an earlier one of
                // the same rule is refused there too.
                let _ = router.insert(route.as_str(), i);
            }
            router
        });
        let rate = settings.rate;
        let name: Arc<str> = Arc::from(settings.name.as_str());
        let policy = format!("\"{name}\";q={};w={}", rate.count, rate.window_secs());
        let terms = format!(
            "{}/{} with a burst of {}",
            rate.count,
            unit(rate.window_secs()),
            settings.burst
        );
        Rule {
            local: local::Local::new(rate, settings.burst),
            policy: HeaderValue::from_str(&policy).unwrap_or(HeaderValue::from_static("\"rule\"")),
            refused: crate::metrics::rate_limited(&name),
            refused_n: AtomicU64::new(0),
            gcra: (rate.interval(), rate.interval() * settings.burst),
            terms: Arc::from(terms),
            name,
            scope,
            settings: settings.clone(),
        }
    }

    /// The in-memory decision for the key hashed to `hash`.
    fn check_local(&self, hash: u64, text: impl FnOnce() -> Vec<u8>) -> Result<(), Box<Limited>> {
        match self.local.check(hash) {
            Ok(()) => Ok(()),
            Err(wait) => Err(self.refuse(hash, wait, || lossy(&text()))),
        }
    }

    /// A refusal: counted, its key noted for the admin API, its answer.
    fn refuse(&self, hash: u64, wait: Duration, text: impl FnOnce() -> String) -> Box<Limited> {
        self.refused.increment(1);
        self.refused_n.fetch_add(1, Ordering::Relaxed);
        self.local.note_refused(hash, text);
        Box::new(Limited {
            rule: Arc::clone(&self.name),
            retry_after: wait,
            policy: self.policy.clone(),
            terms: Arc::clone(&self.terms),
        })
    }

    /// The Redis key of a key's text: `iuid-router:rl:<rule>:<text>` (a text over 200 bytes
    /// by its hash, so a client cannot make Redis hold large keys).
    fn store_key(&self, text: &[u8]) -> Vec<u8> {
        let mut key = format!("iuid-router:rl:{}:", self.name).into_bytes();
        if text.len() <= 200 {
            key.extend_from_slice(text);
        } else {
            let h = xxhash_rust::xxh64::xxh64(text, 0);
            key.extend_from_slice(format!("#{h:016x}").as_bytes());
        }
        key
    }
}

/// Every second, each rule's idle keys evicted (and its key gauge set); every minute, the
/// lists of most-refused keys started anew. Ends when the rules are dropped.
fn housekeep(limits: Weak<RateLimits>) {
    let mut seconds = 0u64;
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let Some(limits) = limits.upgrade() else {
            return;
        };
        seconds += 1;
        for rule in &limits.rules {
            let keys = rule.local.evict_idle();
            crate::metrics::rate_limit_keys(&rule.name, keys);
            if seconds.is_multiple_of(60) {
                rule.local.rotate_top();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::one_value;

    #[test]
    fn a_key_sent_twice_is_one_only_when_its_lines_agree() {
        let lines = |v: &[&'static str]| v.iter().map(|s| s.as_bytes()).collect::<Vec<_>>();
        assert!(one_value(lines(&[]).into_iter()));
        assert!(one_value(lines(&["k1"]).into_iter()));
        assert!(one_value(lines(&["k1", "k1", "k1"]).into_iter()));
        assert!(!one_value(lines(&["fresh", "over"]).into_iter()));
        assert!(!one_value(lines(&["k1", "k1", "K1"]).into_iter()));
        // One line with a comma is one value, as sent: not split here.
        assert!(one_value(lines(&["a, b"]).into_iter()));
    }
}
