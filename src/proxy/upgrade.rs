//! HTTP/1.1 upgrades (WebSocket and others, RFC 9110 §7.8): the request goes upstream with
//! its `Upgrade`; only when the upstream answers `101 Switching Protocols` are the two
//! connections joined into a byte tunnel. Any other answer is an ordinary response, and the
//! client's connection stays HTTP.
//!
//! The client's side is the own engine's (`h1/bridge.rs`): it marks the request
//! ([`ClientUpgrade`]), and takes the upstream's switched connection from the `101`
//! answer ([`UpstreamUpgrade`]) once that answer is written, to tunnel the two.

use http::request::Parts;
use http::Response;

use crate::upstream::body::Inbound;
use hyper::upgrade::OnUpgrade;

/// Marks a request whose client connection can be switched (an HTTP/1.1 request that asks
/// for an upgrade, on the own engine).
#[derive(Debug, Clone, Copy)]
pub struct ClientUpgrade;

/// The upstream's side of a `101` answer, in the answer's extensions: resolves to its
/// switched connection.
#[derive(Debug, Clone)]
pub struct UpstreamUpgrade(pub OnUpgrade);

/// Whether the request asks for an upgrade its client connection can make.
pub fn take(parts: &mut Parts) -> bool {
    super::headers::upgrade_of(&parts.headers).is_some()
        && parts.extensions.remove::<ClientUpgrade>().is_some()
}

/// Keeps the upstream's side of a `101` answer in the answer for the client's connection.
pub fn keep(resp: &mut Response<Inbound>) {
    let upstream = hyper::upgrade::on(&mut *resp);
    resp.extensions_mut().insert(UpstreamUpgrade(upstream));
}
