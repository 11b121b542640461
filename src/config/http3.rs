//! `http3:` of the router config (docs/http3.md): HTTP/3 over QUIC on the TLS listener's
//! address and port, over UDP. Absent: no QUIC socket is opened and no `Alt-Svc` is sent.

use serde::Deserialize;

use crate::source::{Seg, Source, SourceError};

/// `http3:` as written and as used: every key has a default, so `http3: {}` turns it on.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Http3Settings {
    /// Accept 0-RTT (TLS 1.3 early data, RFC 9001 §4.6) on resumed connections. Only safe
    /// methods are forwarded from it, with `Early-Data: 1` (RFC 8470 §5.1); any other
    /// request waits for the handshake to complete.
    pub zero_rtt: bool,
    /// Request streams a client may have open at once on one connection (QUIC's
    /// `initial_max_streams_bidi`, RFC 9000 §18.2), as HTTP/2's `SETTINGS_MAX_CONCURRENT_STREAMS`.
    pub max_streams: u32,
    /// Handshakes in progress per worker above which a new client must first prove its
    /// address with a Retry (RFC 9000 §8.1.2): a flood of Initial packets from forged
    /// addresses then costs a stateless answer each, no connection state.
    pub max_handshakes: usize,
}

impl Default for Http3Settings {
    fn default() -> Self {
        Http3Settings {
            zero_rtt: true,
            max_streams: 100,
            max_handshakes: 64,
        }
    }
}

/// Validates `http3:`; each error at its key. `tls`: whether `tls:` is set (QUIC carries
/// TLS 1.3 and needs the listener's certificates).
pub(super) fn check(
    settings: &Http3Settings,
    tls: bool,
    source: &Source,
    errors: &mut Vec<SourceError>,
) {
    let at = |key: Option<&str>| -> Vec<Seg> {
        std::iter::once("http3")
            .chain(key)
            .map(|k| Seg::Key(k.to_owned()))
            .collect()
    };
    if !tls {
        errors.push(source.error_at(
            &at(None),
            "http3 needs tls: QUIC carries TLS 1.3 with the listener's certificates (docs/http3.md)",
        ));
    }
    if settings.max_streams == 0 {
        errors.push(source.error_at(&at(Some("max_streams")), "max_streams must be at least 1"));
    }
}
