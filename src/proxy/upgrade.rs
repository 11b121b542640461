//! HTTP/1.1 upgrades (WebSocket and others, RFC 9110 §7.8): the request goes upstream with
//! its `Upgrade`; only when the upstream answers `101 Switching Protocols` are the two
//! connections joined into a byte tunnel. Any other answer is an ordinary response, and the
//! client's connection stays HTTP.

use http::request::Parts;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;

/// The client side of an upgrade, if the request asks for one.
pub fn take(parts: &mut Parts) -> Option<OnUpgrade> {
    super::headers::upgrade_of(&parts.headers)?;
    parts.extensions.remove::<OnUpgrade>()
}

/// Joins client and upstream once both have switched; runs until either side closes.
pub fn tunnel(client: OnUpgrade, upstream: OnUpgrade) {
    tokio::spawn(async move {
        let (client, upstream) = match tokio::try_join!(client, upstream) {
            Ok(pair) => pair,
            Err(e) => {
                tracing::debug!(error = %e, "upgrade failed");
                return;
            }
        };
        let (mut client, mut upstream) = (TokioIo::new(client), TokioIo::new(upstream));
        match tokio::io::copy_bidirectional(&mut client, &mut upstream).await {
            Ok((up, down)) => tracing::debug!(up, down, "tunnel closed"),
            Err(e) => tracing::debug!(error = %e, "tunnel ended"),
        }
    });
}
