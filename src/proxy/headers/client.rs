//! The client's address as the forwarding fields spell it (`X-Forwarded-For`, `Forwarded:
//! for=`, docs/data-path.md "Header rules"), made once per connection, with what else the
//! connection tells every request on it (TLS, the client certificate, its fan-outs).

use std::net::{IpAddr, SocketAddr};

use http::HeaderValue;

/// The client's address as the forwarding fields spell it, made once per connection rather
/// than formatted for every request, without allocating (a new connection is as cheap as it
/// can be).
#[derive(Debug)]
pub struct ClientAddr {
    /// The client's socket address.
    pub addr: SocketAddr,
    /// The IP as text (at most 39 bytes, an IPv6 address): this hop's `X-Forwarded-For`
    /// element; `text_len` bytes of it.
    text: [u8; 48],
    text_len: u8,
    /// The `for=` pair of `Forwarded`: `for=192.0.2.1`, or `for="[2001:db8::1]"` (RFC 7239
    /// §6: an IPv6 address is bracketed and quoted); `forwarded_len` bytes of it.
    forwarded: [u8; 48],
    forwarded_len: u8,
    /// The IP as a field value, for the shared phases (made at their first request).
    xff: std::sync::OnceLock<HeaderValue>,
    /// Whether the client spoke TLS to this router: `X-Forwarded-Proto` and `Forwarded:
    /// proto=` then say `https` (docs/tls-h2-grpc.md).
    pub tls: bool,
    /// `X-Forwarded-Client-Cert` for the certificate the client presented, when
    /// `tls.client_auth.forward_client_cert: set` (made once per connection).
    pub client_cert: Option<HeaderValue>,
    /// Fan-outs in flight on this connection (`limits.fanout_per_connection`).
    pub fanouts: std::sync::atomic::AtomicU32,
    /// `trusted_proxies` is set and this peer is not in it: its requests' `X-Forwarded-For`
    /// and `Forwarded` are replaced by the router's own, not appended to (docs/data-path.md
    /// "Header rules").
    pub replaces_forwarding: bool,
    /// `trusted_proxies` is set and holds this peer (another edge of the mesh): a mirror
    /// copy it marks `X-Iuid-Mirror: 1` is served as one (docs/moves.md).
    pub trusted_peer: bool,
}

impl ClientAddr {
    /// The same client, its forwarding fields trusted only when `trusted` (the config's
    /// `trusted_proxies`) is unset or holds its address.
    pub fn trusting(self, trusted: Option<&crate::config::TrustedProxies>) -> ClientAddr {
        let replaces_forwarding = trusted.is_some_and(|t| !t.contains(self.addr.ip()));
        let trusted_peer = trusted.is_some_and(|t| t.contains(self.addr.ip()));
        ClientAddr {
            replaces_forwarding,
            trusted_peer,
            ..self
        }
    }

    /// The fields for a client at `addr` that connected over TLS.
    pub fn with_tls(addr: SocketAddr) -> ClientAddr {
        ClientAddr {
            tls: true,
            ..ClientAddr::new(addr)
        }
    }

    /// The fields for a client at `addr`.
    pub fn new(addr: SocketAddr) -> ClientAddr {
        use std::io::Write;
        let ip = addr.ip();
        let mut text = [0u8; 48];
        let mut forwarded = [0u8; 48];
        // Both fit: an IPv6 address is at most 39 characters.
        let text_len = {
            let mut cursor = &mut text[..];
            let _ = write!(cursor, "{ip}");
            48 - cursor.len()
        };
        let forwarded_len = {
            let mut cursor = &mut forwarded[..];
            let _ = match ip {
                IpAddr::V4(v4) => write!(cursor, "for={v4}"),
                IpAddr::V6(v6) => write!(cursor, "for=\"[{v6}]\""),
            };
            48 - cursor.len()
        };
        ClientAddr {
            addr,
            text,
            text_len: text_len as u8,
            forwarded,
            forwarded_len: forwarded_len as u8,
            xff: std::sync::OnceLock::new(),
            tls: false,
            client_cert: None,
            fanouts: Default::default(),
            replaces_forwarding: false,
            trusted_peer: false,
        }
    }

    /// The IP as text (ASCII).
    pub fn ip_text(&self) -> &[u8] {
        &self.text[..usize::from(self.text_len)]
    }

    /// The `for=` pair of `Forwarded` (ASCII).
    pub fn forwarded_for(&self) -> &[u8] {
        &self.forwarded[..usize::from(self.forwarded_len)]
    }

    /// The IP as a field value.
    pub(super) fn xff(&self) -> &HeaderValue {
        self.xff.get_or_init(|| {
            // An IP's text is always a valid field value.
            HeaderValue::from_bytes(self.ip_text()).unwrap_or(HeaderValue::from_static("unknown"))
        })
    }
}
