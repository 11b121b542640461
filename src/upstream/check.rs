//! Active health checks (router config `health_check:`): each upstream is asked
//! `GET http://host:port{path}` every `interval_ms`; a non-2xx answer, an error or no answer
//! within `timeout_ms` takes it out of balancing until a check passes again.
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
        let client = match reqwest::Client::builder()
            .timeout(Duration::from_millis(policy.timeout_ms))
            .redirect(reqwest::redirect::Policy::none())
            .build()
        {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "health check client");
                return;
            }
        };
        let interval = Duration::from_millis(policy.interval_ms.max(10));
        loop {
            let Some(state) = state.upgrade() else { return };
            let url = format!("http://{}{}", state.authority, policy.path);
            let passed = client
                .get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if !passed {
                tracing::debug!(upstream = %state.authority, "health check failed");
            }
            state.health.checked(passed);
            drop(state);
            tokio::time::sleep(interval).await;
        }
    });
}
