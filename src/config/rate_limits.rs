//! `rate_limits:` and `store:` of the router config (docs/rate-limits.md): GCRA
//! rules, each a rate with a burst counted per key (the client's address, a header's value,
//! the owner region, the route), checked in the file's order; and where their counters live
//! (this edge's memory, or a Redis every edge shares). Validated here from the text alone;
//! `crate::ratelimit` builds the limiters.

use std::time::Duration;

use http::HeaderName;
use serde::Deserialize;

use crate::source::{Seg, Source, SourceError};

/// What a rule counts by (docs/rate-limits.md "Keys").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKey {
    /// The client's address: the peer, or through `trusted_proxies` the right-most
    /// untrusted `X-Forwarded-For` / `Forwarded` element.
    ClientIp,
    /// A request header's value (an API key); a request without it is not counted.
    Header(HeaderName),
    /// The owner region the request (or a fan-out leg, a legacy probe) goes to, all clients
    /// together.
    Region,
    /// The entry of the rule's `routes:` the request's path matched, all clients together.
    Route,
}

impl LimitKey {
    /// Whether the key is known from the request's head alone (else after the plan step).
    pub fn from_head(&self) -> bool {
        !matches!(self, LimitKey::Region)
    }

    /// As a rule's default name and the admin API show it: `client_ip`, `header:x-api-key`,
    /// `region`, `route`.
    pub fn label(&self) -> String {
        match self {
            LimitKey::ClientIp => "client_ip".to_owned(),
            LimitKey::Header(name) => format!("header:{name}"),
            LimitKey::Region => "region".to_owned(),
            LimitKey::Route => "route".to_owned(),
        }
    }
}

/// A rate as written: `count` requests per `per` (`100/s`, `1000/min`, `10/h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Requests per window, at least 1.
    pub count: u32,
    /// The window: 1 s, 60 s or 3600 s.
    pub per: Duration,
}

impl Rate {
    /// Reads `N/s`, `N/min` or `N/h`, and no other spelling of a unit (`5/sec`, `5/m`,
    /// `5/hour` are refused, not guessed at). Errors: why it is not one.
    pub fn parse(text: &str) -> Result<Rate, String> {
        let bad = || format!("rate `{text}` must be N/s, N/min or N/h with N at least 1");
        let (count, unit) = text.split_once('/').ok_or_else(bad)?;
        let count: u32 = count.trim().parse().map_err(|_| bad())?;
        let secs = match unit.trim() {
            "s" => 1,
            "min" => 60,
            "h" => 3600,
            other => {
                return Err(format!(
                    "rate `{text}`: `{other}` is not a unit: write N/s, N/min or N/h"
                ))
            }
        };
        if count == 0 {
            return Err(bad());
        }
        Ok(Rate {
            count,
            per: Duration::from_secs(secs),
        })
    }

    /// The emission interval: the time one request's cell takes to drain (`per / count`).
    pub fn interval(&self) -> Duration {
        self.per / self.count
    }

    /// The window in whole seconds, the `w` of `RateLimit-Policy`.
    pub fn window_secs(&self) -> u64 {
        self.per.as_secs()
    }
}

/// One rule of `rate_limits:`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitRule {
    /// `name`, else the key's label: the metric's `rule` label and the policy's name in
    /// `RateLimit-Policy`.
    pub name: String,
    /// What it counts by.
    pub key: LimitKey,
    /// The sustained rate.
    pub rate: Rate,
    /// Requests allowed at once beyond the first, from idle (`burst + 1` pass at once).
    pub burst: u32,
    /// The paths it applies to (`matchit` templates, as `routes[].path`); empty: every
    /// request.
    pub routes: Vec<String>,
}

/// What the router does with a decision when Redis cannot be asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnStoreError {
    /// This edge's own in-memory counters decide (each edge then admits the rate).
    Local,
    /// Every request is admitted.
    Allow,
}

/// `store:`, validated: the counters shared by every edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimitStore {
    /// `redis`: the server's URL (`redis://host:port/db`).
    pub redis: String,
    /// `on_error` (default `local`).
    pub on_error: OnStoreError,
    /// `timeout_ms` (default 50): the longest a decision waits for Redis before `on_error`
    /// decides it.
    pub timeout: Duration,
}

/// `rate_limits[]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RuleSpec {
    #[serde(default)]
    name: Option<String>,
    key: KeySpec,
    rate: String,
    #[serde(default)]
    burst: u32,
    #[serde(default)]
    routes: Vec<String>,
}

/// `key:` as written: a name, or `{ header: NAME }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum KeySpec {
    Named(String),
    Header { header: String },
}

/// `store:` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StoreSpec {
    redis: String,
    #[serde(default = "local")]
    on_error: OnStoreError,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
}

fn local() -> OnStoreError {
    OnStoreError::Local
}

fn default_timeout_ms() -> u64 {
    50
}

/// Validates `rate_limits:`; each error at its key (`rate_limits[1].rate`).
pub(super) fn rules(
    specs: &[RuleSpec],
    source: &Source,
    errors: &mut Vec<SourceError>,
) -> Vec<RateLimitRule> {
    let mut rules: Vec<RateLimitRule> = Vec::with_capacity(specs.len());
    for (i, spec) in specs.iter().enumerate() {
        let at = |k: &str| {
            vec![
                Seg::Key("rate_limits".into()),
                Seg::Index(i),
                Seg::Key(k.into()),
            ]
        };
        let mut fail = |k: &str, why: String| {
            errors.push(source.error_at(&at(k), format!("rate_limits[{i}].{k}: {why}")))
        };
        let mut bad_routes = Vec::new();
        let key = match &spec.key {
            KeySpec::Named(name) => match name.as_str() {
                "client_ip" => Some(LimitKey::ClientIp),
                "region" => Some(LimitKey::Region),
                "route" => Some(LimitKey::Route),
                other => {
                    fail(
                        "key",
                        format!(
                            "`{other}` is not a key: client_ip, region, route or {{ header: NAME }}"
                        ),
                    );
                    None
                }
            },
            KeySpec::Header { header } => match HeaderName::try_from(header.as_str()) {
                Ok(name) => Some(LimitKey::Header(name)),
                Err(_) => {
                    fail("key", format!("`{header}` is not a header name"));
                    None
                }
            },
        };
        let rate = Rate::parse(&spec.rate)
            .map_err(|why| fail("rate", why))
            .ok();
        // One router for the rule, as `crate::ratelimit` builds it: a template that
        // conflicts with an earlier one of the rule is refused here.
        let mut router = matchit::Router::new();
        for (j, route) in spec.routes.iter().enumerate() {
            let why = match route.starts_with('/') {
                false => Some(format!("`{route}` must start with /")),
                true => crate::extract::normalize::check_template(route)
                    .err()
                    .or_else(|| {
                        let inserted = router.insert(route.as_str(), ());
                        inserted.err().map(|e| format!("`{route}`: {e}"))
                    }),
            };
            if let Some(why) = why {
                let mut seg = at("routes");
                seg.push(Seg::Index(j));
                bad_routes
                    .push(source.error_at(&seg, format!("rate_limits[{i}].routes[{j}]: {why}")));
            }
        }
        if key == Some(LimitKey::Route) && spec.routes.is_empty() {
            fail(
                "key",
                "key route counts each entry of the rule's routes: apart; list them".to_owned(),
            );
        }
        let (Some(key), Some(rate)) = (key, rate) else {
            errors.extend(bad_routes);
            continue;
        };
        let name = spec.name.clone().unwrap_or_else(|| key.label());
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\')
        {
            fail(
                "name",
                format!("`{name}` must be printable ASCII without spaces, quotes or backslashes"),
            );
            continue;
        }
        if rules.iter().any(|r| r.name == name) {
            // Without `name:`, the rule's own position: a missing key has none.
            let item = [Seg::Key("rate_limits".into()), Seg::Index(i)];
            let seg = match spec.name {
                Some(_) => at("name"),
                None => item.to_vec(),
            };
            errors.push(source.error_at(
                &seg,
                format!("rate_limits[{i}]: two rules are named `{name}`: give this one a name: of its own"),
            ));
            continue;
        }
        if !bad_routes.is_empty() {
            errors.extend(bad_routes);
            continue;
        }
        rules.push(RateLimitRule {
            name,
            key,
            rate,
            burst: spec.burst,
            routes: spec.routes.clone(),
        });
    }
    rules
}

/// Validates `store:`; each error at its key.
pub(super) fn store(
    spec: &StoreSpec,
    source: &Source,
    errors: &mut Vec<SourceError>,
) -> RateLimitStore {
    let at = |k: &str| vec![Seg::Key("store".into()), Seg::Key(k.into())];
    let scheme_ok = spec.redis.starts_with("redis://") || spec.redis.starts_with("rediss://");
    if !scheme_ok || spec.redis.parse::<http::Uri>().is_err() {
        errors.push(source.error_at(
            &at("redis"),
            format!(
                "store.redis: `{}` must be a redis:// URL, such as redis://127.0.0.1:6379/0",
                spec.redis
            ),
        ));
    }
    if spec.timeout_ms == 0 {
        errors.push(source.error_at(&at("timeout_ms"), "store.timeout_ms must be at least 1"));
    }
    RateLimitStore {
        redis: spec.redis.clone(),
        on_error: spec.on_error,
        timeout: Duration::from_millis(spec.timeout_ms),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_read_their_unit() {
        let r = Rate::parse("100/s").expect("rate");
        assert_eq!((r.count, r.interval()), (100, Duration::from_millis(10)));
        let r = Rate::parse("1000/min").expect("rate");
        assert_eq!(
            (r.window_secs(), r.interval()),
            (60, Duration::from_millis(60))
        );
        assert_eq!(Rate::parse("10/h").expect("rate").window_secs(), 3600);
        for bad in ["", "0/s", "10", "10/d", "-1/s", "x/s", "10/"] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rates_accept_only_the_documented_units() {
        for (good, secs) in [("5/s", 1), ("5/min", 60), ("5/h", 3600)] {
            assert_eq!(Rate::parse(good).expect(good).window_secs(), secs);
        }
        for bad in [
            "5/sec", "5/second", "5/m", "5/minute", "5/hour", "5/S", "5/hr",
        ] {
            let why = Rate::parse(bad).expect_err(bad);
            assert!(why.contains("N/s, N/min or N/h"), "{bad}: {why}");
        }
    }
}
