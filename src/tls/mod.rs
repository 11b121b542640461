//! HTTPS on the public listener (SPEC §12): rustls, certificates chosen by SNI, ALPN `h2` and
//! `http/1.1`, certificates reloaded when their files change.
//!
//! The crypto provider is *ring*: it builds with a C compiler alone (aws-lc-rs needs cmake and
//! doubles the clean build), is what `tokio-rustls` and most of the ecosystem default to on
//! Linux, and its TLS 1.2/1.3 suites cover what edge clients offer.
//!
//! - [`certs`]: loading a certificate chain and its key, the SNI resolver (which swaps its
//!   whole set of certificates at once on a reload) and its status for the admin API.
//! - [`watch`]: reloads when a certificate or key file changes; a broken file is reported
//!   and the certificates in use are kept.
//!
//! The handshake itself runs on the worker that serves the connection (`crate::server`),
//! bounded by `limits.header_read_timeout_ms` like a client's first request bytes.

pub mod certs;
pub mod client;
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
        }
    }
}

/// The crypto provider of every TLS context the router makes (see the module docs).
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The listener's rustls config: the SNI resolver over `certs`, the versions from
/// `min_version`, ALPN `h2` then `http/1.1`.
///
/// Errors: the provider does not support the versions (not expected with ring).
pub fn server_config(
    certs: Arc<Certificates>,
    min_version: MinVersion,
) -> Result<Arc<rustls::ServerConfig>, rustls::Error> {
    let versions: &[&rustls::SupportedProtocolVersion] = match min_version {
        MinVersion::Tls12 => &[&rustls::version::TLS13, &rustls::version::TLS12],
        MinVersion::Tls13 => &[&rustls::version::TLS13],
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(versions)?
        .with_no_client_auth()
        .with_cert_resolver(certs);
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
