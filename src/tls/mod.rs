//! HTTPS on the public listener (docs/tls-h2-grpc.md): rustls, certificates chosen by SNI, ALPN `h2` and
//! `http/1.1`, certificates reloaded when their files change.
//!
//! The crypto provider is *ring*: it builds with a C compiler alone (aws-lc-rs needs cmake and
//! doubles the clean build), is what `tokio-rustls` and most of the ecosystem default to on
//! Linux, and its TLS 1.2/1.3 suites cover what edge clients offer.
//!
//! - [`certs`]: loading a certificate chain and its key, the SNI resolver (which swaps its
//!   whole set of certificates at once on a reload) and its status for the admin API.
//! - [`client_auth`]: client certificates verified against `tls.client_auth.ca` (the mTLS
//!   between edges), the CA reloaded with the certificates.
//! - [`watch`]: reloads when a certificate, key or client CA file changes; a broken file is
//!   reported and what is in use is kept.
//!
//! The handshake itself runs on the worker that serves the connection (`crate::server`),
//! bounded by `limits.header_read_timeout_ms` like a client's first request bytes.

pub mod certs;
pub mod client;
pub mod client_auth;
pub mod peer;
pub mod watch;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

pub use certs::{Certificates, TlsStatus};

/// `tls:` in the router config, as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsSpec {
    /// Certificates with their keys; the first without `server_names` is the default.
    pub certificates: Vec<CertSpec>,
    /// The oldest TLS version accepted.
    #[serde(default)]
    pub min_version: MinVersion,
    /// Client certificates (mTLS between edges, docs/mesh.md): the CA they must chain to.
    #[serde(default)]
    pub client_auth: Option<ClientAuthSpec>,
}

/// `tls.client_auth`: verify client certificates against `ca`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientAuthSpec {
    /// PEM file of the CA certificates a client certificate must chain to.
    pub ca: String,
    /// `true` (the default): a client without a certificate is refused in the handshake.
    /// `false`: one without is let in; a client that presents one must still pass.
    #[serde(default = "required_by_default")]
    pub required: bool,
    /// What the upstream is told of the client's certificate.
    #[serde(default)]
    pub forward_client_cert: ForwardClientCert,
}

/// `tls.client_auth.forward_client_cert` (named after Envoy's setting): client-certificate
/// fields a client sends are removed from every request whatever this says
/// (`proxy::headers`); this decides whether the router then vouches for the certificate
/// it verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForwardClientCert {
    /// Tell the upstream nothing (the default).
    #[default]
    Sanitize,
    /// Set `X-Forwarded-Client-Cert` from the verified certificate (`peer.rs`, Envoy's
    /// format); a client without a certificate (`required: false`) gets none.
    Set,
}

fn required_by_default() -> bool {
    true
}

/// `tls.client_auth`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAuth {
    /// The CA file.
    pub ca: PathBuf,
    /// Whether a client must present a certificate.
    pub required: bool,
    /// Whether the upstream is told of the certificate.
    pub forward_client_cert: ForwardClientCert,
}

/// One certificate of `tls.certificates`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CertSpec {
    /// PEM file: the certificate, then its chain.
    pub cert: String,
    /// PEM file: its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: String,
    /// Host names (SNI) this certificate answers; `*.example.com` matches one label. None:
    /// a default candidate.
    #[serde(default)]
    pub server_names: Vec<String>,
}

/// `tls.min_version`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
pub enum MinVersion {
    /// TLS 1.2 and 1.3.
    #[default]
    #[serde(rename = "1.2")]
    Tls12,
    /// TLS 1.3 only.
    #[serde(rename = "1.3")]
    Tls13,
}

/// A certificate's files, resolved against the config's directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    /// The chain's PEM file.
    pub cert: PathBuf,
    /// The key's PEM file.
    pub key: PathBuf,
    /// Lowercased SNI names.
    pub server_names: Vec<String>,
}

/// The listener's TLS settings, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// The certificates, in config order.
    pub certificates: Vec<CertFiles>,
    /// The oldest version accepted.
    pub min_version: MinVersion,
    /// Client certificate verification, if any.
    pub client_auth: Option<ClientAuth>,
}

impl TlsSpec {
    /// The settings with paths relative to `base` (the config file's directory).
    pub fn resolve(&self, base: &Path) -> TlsSettings {
        TlsSettings {
            certificates: self
                .certificates
                .iter()
                .map(|c| CertFiles {
                    cert: base.join(&c.cert),
                    key: base.join(&c.key),
                    server_names: c
                        .server_names
                        .iter()
                        .map(|n| n.to_ascii_lowercase())
                        .collect(),
                })
                .collect(),
            min_version: self.min_version,
            client_auth: self.client_auth.as_ref().map(|c| ClientAuth {
                ca: base.join(&c.ca),
                required: c.required,
                forward_client_cert: c.forward_client_cert,
            }),
        }
    }
}

/// The crypto provider of every TLS context the router makes (see the module docs).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The CA certificates in a PEM file, as roots to verify against.
///
/// Errors: the file cannot be read or parsed, or holds no certificate (`path: reason`).
pub fn load_roots(path: &Path) -> Result<rustls::RootCertStore, String> {
    use rustls::pki_types::pem::PemObject;
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(path).map_err(|e| at(&e))? {
        roots.add(cert.map_err(|e| at(&e))?).map_err(|e| at(&e))?;
    }
    if roots.is_empty() {
        return Err(at(&"no CERTIFICATE in the file"));
    }
    Ok(roots)
}

/// The listener's rustls config: the SNI resolver over `certs`, the versions from
/// `min_version`, client certificates verified by `certs`' client verifier
/// (`tls.client_auth`), ALPN `h2` then `http/1.1`.
///
/// Errors: the provider does not support the versions (not expected with ring).
pub fn server_config(
    certs: Arc<Certificates>,
    min_version: MinVersion,
) -> Result<Arc<rustls::ServerConfig>, String> {
    let versions: &[&rustls::SupportedProtocolVersion] = match min_version {
        MinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        MinVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)
        .map_err(|e| e.to_string())?;
    let builder = match certs.client_verifier() {
        None => builder.with_no_client_auth(),
        Some(verifier) => builder.with_client_cert_verifier(verifier),
    };
    let mut config = builder.with_cert_resolver(certs);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The QUIC listener's TLS (docs/http3.md): TLS 1.3 only (RFC 9001 §4.2), the same SNI
/// resolver and client verifier as [`server_config`] (so a certificate reload reaches both),
/// ALPN `h3`. With `zero_rtt`, resumed clients may send early data (quinn asks for a
/// `max_early_data_size` of `u32::MAX` under QUIC); rustls's in-memory session store makes
/// each ticket single-use, so early data cannot be replayed into this process.
///
/// Errors: the provider lacks TLS 1.3 or QUIC's initial cipher suite (not expected with ring).
pub fn quic_server_config(certs: Arc<Certificates>, zero_rtt: bool) -> Result<QuicTls, String> {
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?;
    let builder = match certs.client_verifier() {
        None => builder.with_no_client_auth(),
        Some(verifier) => builder.with_client_cert_verifier(verifier),
    };
    let mut config = builder.with_cert_resolver(certs);
    config.alpn_protocols = vec![b"h3".to_vec()];
    config.max_early_data_size = if zero_rtt { u32::MAX } else { 0 };
    config.session_storage = rustls::server::ServerSessionMemoryCache::new(4096);
    let quic =
        quinn::crypto::rustls::QuicServerConfig::try_from(config).map_err(|e| e.to_string())?;
    Ok(QuicTls(Arc::new(quic)))
}

/// The QUIC listener's TLS context ([`quic_server_config`]).
#[derive(Clone)]
pub struct QuicTls(pub Arc<quinn::crypto::rustls::QuicServerConfig>);

impl std::fmt::Debug for QuicTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QuicTls(TLS 1.3, ALPN h3)")
    }
}
