//! Active health checks (router config `health_check:`): each upstream is asked
//! `GET {path}` every `interval_ms`; a non-2xx answer, an error or no answer within
//! `timeout_ms` takes it out of balancing until a check passes again.
//!
//! A check goes through the upstream's own connection layer (`UpstreamState::probe`): the
//! same TLS (CA, client certificate, server name) and protocol as the requests it vouches
//! for, so an `https://` or `protocol: h2` upstream is checked as it is used.
//!
//! Checks run per upstream, not per region, and stop when no table lists the upstream any
//! more (the task holds only a weak reference).

use std::sync::Weak;
use std::time::Duration;

use crate::config::CheckPolicy;

use super::UpstreamState;

/// Starts checking `state`'s upstream; does nothing outside a tokio runtime (as in `check`).
pub fn spawn(state: Weak<UpstreamState>, policy: CheckPolicy) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    runtime.spawn(async move {
        let interval = Duration::from_millis(policy.interval_ms.max(10));
        let timeout = Duration::from_millis(policy.timeout_ms);
        loop {
            let Some(state) = state.upgrade() else { return };
            let answer = tokio::time::timeout(timeout, state.probe(&policy.path)).await;
            let passed = matches!(answer, Ok(Ok(status)) if status.is_success());
            if !passed {
                tracing::debug!(upstream = %state.authority, ?answer, "health check failed");
            }
            state.health.checked(passed);
            drop(state);
            tokio::time::sleep(interval).await;
        }
    });
}
