//! `store.redis` (docs/rate-limits.md "Shared by every edge"): the rules' counters in one
//! Redis every edge asks, so N edges together admit the configured rate.
//!
//! One decision is one script call (`EVALSHA`, loaded on first use): the GCRA of every rule
//! that applies to the request, in order, on Redis's own clock (`TIME`), so edges need no
//! synchronised clocks and no read-modify-write race exists between them. Each key holds its
//! theoretical arrival time in microseconds and expires when it would be fresh again.
//!
//! Redis away — refused, reset, or slower than `store.timeout_ms` — is never a 5xx: the
//! decision falls to `on_error` (`local`: this edge's in-memory counters; `allow`), counted
//! in `iuid_router_rate_limit_store_errors_total`, and for the next second every decision
//! goes there directly, without waiting on Redis again. Then Redis is asked again; its
//! connection manager reconnects by itself.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::config::{OnStoreError, RateLimitStore};

/// The GCRA of each `KEYS[i]`, with `ARGV[2i-1]` its emission interval and `ARGV[2i]` its
/// burst tolerance (interval × burst), both in µs. Returns `{0, 0}` when every rule admits,
/// else `{i, µs until rule i would}`; the rules before `i` have counted the request, as the
/// in-memory path's do.
const GCRA: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
for i, key in ipairs(KEYS) do
  local interval = tonumber(ARGV[2 * i - 1])
  local tolerance = tonumber(ARGV[2 * i])
  local tat = tonumber(redis.call('GET', key)) or now
  if tat < now then tat = now end
  local allow_at = tat - tolerance
  if now < allow_at then
    return {i, allow_at - now}
  end
  local new_tat = tat + interval
  redis.call('SET', key, string.format('%d', new_tat), 'PX', math.ceil((new_tat - now) / 1000) + 1)
end
return {0, 0}
"#;

/// How long decisions go to `on_error` after Redis failed one.
const DOWN_FOR: Duration = Duration::from_secs(1);

/// The connection to the shared store and what it decides when it cannot be asked.
pub(super) struct Shared {
    settings: RateLimitStore,
    client: Option<redis::Client>,
    /// Made on first use; dropped when Redis fails, so that the next try after `DOWN_FOR`
    /// connects afresh rather than waiting out the old manager's reconnect backoff.
    manager: ArcSwapOption<ConnectionManager>,
    script: redis::Script,
    started: Instant,
    /// Milliseconds since `started` until which Redis is not asked (0: ask).
    down_until_ms: AtomicU64,
    /// Whether the last attempt failed (for one log line per outage).
    down: AtomicBool,
    /// Decisions made by `on_error`.
    pub(super) errors: AtomicU64,
}

/// What Redis said of one decision.
pub(super) enum Answer {
    /// Every rule admits.
    Admit,
    /// The `n`th key asked (from 0) refuses for this long.
    Refuse(usize, Duration),
}

impl Shared {
    pub(super) fn new(settings: &RateLimitStore) -> Shared {
        let client = match redis::Client::open(settings.redis.as_str()) {
            Ok(client) => Some(client),
            Err(e) => {
                tracing::error!(url = %settings.redis, error = %e, "store.redis cannot be used");
                None
            }
        };
        Shared {
            settings: settings.clone(),
            client,
            manager: ArcSwapOption::empty(),
            script: redis::Script::new(GCRA),
            started: Instant::now(),
            down_until_ms: AtomicU64::new(0),
            down: AtomicBool::new(false),
            errors: AtomicU64::new(0),
        }
    }

    /// Whether Redis is asked now (it has not failed within the last second).
    pub(super) fn up(&self) -> bool {
        let until = self.down_until_ms.load(Ordering::Relaxed);
        until == 0 || self.now_ms() >= until
    }

    /// What decides while Redis cannot be asked.
    pub(super) fn on_error(&self) -> OnStoreError {
        self.settings.on_error
    }

    /// Whether the last attempt reached Redis.
    pub(super) fn reachable(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    /// The URL, without a password.
    pub(super) fn url(&self) -> String {
        match self.settings.redis.split_once('@') {
            Some((scheme_user, host)) => {
                let scheme = scheme_user.split("://").next().unwrap_or("redis");
                format!("{scheme}://…@{host}")
            }
            None => self.settings.redis.clone(),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Counts a decision `on_error` made.
    pub(super) fn count_error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        crate::metrics::rate_limit_store_error(match self.settings.on_error {
            OnStoreError::Local => "local",
            OnStoreError::Allow => "allow",
        });
    }

    fn manager(&self) -> Option<ConnectionManager> {
        if let Some(manager) = self.manager.load_full() {
            return Some((*manager).clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.settings.timeout.max(Duration::from_millis(100))))
            .set_response_timeout(Some(self.settings.timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(500));
        let made = ConnectionManager::new_lazy_with_config(self.client.clone()?, config);
        match made {
            Ok(manager) => {
                self.manager.store(Some(Arc::new(manager.clone())));
                Some(manager)
            }
            Err(e) => {
                tracing::error!(error = %e, "store.redis: no connection manager");
                None
            }
        }
    }

    /// One decision: `keys[i]` with `(interval, tolerance)` of `params[i]`. `None`: Redis
    /// failed (already counted and logged); the caller decides by `on_error`.
    pub(super) async fn ask(
        &self,
        keys: &[Vec<u8>],
        params: &[(Duration, Duration)],
    ) -> Option<Answer> {
        let mut invocation = self.script.prepare_invoke();
        for (key, (interval, tolerance)) in keys.iter().zip(params) {
            invocation.key(key.as_slice());
            invocation.arg(interval.as_micros().max(1) as u64);
            invocation.arg(tolerance.as_micros() as u64);
        }
        let asked = async {
            let mut conn = self.manager().ok_or("no client")?;
            invocation
                .invoke_async::<(i64, i64)>(&mut conn)
                .await
                .map_err(|e| {
                    tracing::debug!(error = %e, "store.redis");
                    "redis error"
                })
        };
        let answer = match tokio::time::timeout(self.settings.timeout, asked).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(why)) => return self.failed(why),
            Err(_) => return self.failed("timed out"),
        };
        if self.down.swap(false, Ordering::Relaxed) {
            tracing::info!(url = %self.url(), "store.redis reachable again: limits shared");
        }
        self.down_until_ms.store(0, Ordering::Relaxed);
        Some(match answer {
            (0, _) => Answer::Admit,
            (n, wait_us) => Answer::Refuse(
                usize::try_from(n - 1).unwrap_or(0),
                Duration::from_micros(u64::try_from(wait_us).unwrap_or(0)),
            ),
        })
    }

    fn failed(&self, why: &str) -> Option<Answer> {
        self.manager.store(None);
        self.down_until_ms.store(
            self.now_ms() + DOWN_FOR.as_millis() as u64,
            Ordering::Relaxed,
        );
        if !self.down.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                url = %self.url(), why, on_error = ?self.settings.on_error,
                "store.redis unreachable: decisions go to on_error until it answers"
            );
        }
        self.count_error();
        None
    }
}
