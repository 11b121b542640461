//! TLS to upstreams (docs/tls-h2-grpc.md): `https://` upstreams, and per region in the routing table
//! `tls: { ca, client_cert, client_key, server_name }` — a private CA, a client certificate
//! for mTLS between regions, and the name to verify.
//!
//! Without `ca` the system's roots are trusted (read once, by `rustls-native-certs`). ALPN
//! offers `h2` for `protocol: h2` and `http/1.1` otherwise, so the protocol is agreed in the
//! handshake.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// An upstream's TLS: the client config and the name its certificate must carry. Equal when
/// their identities are.
#[derive(Debug, Clone)]
pub struct UpstreamTls {
    /// The rustls client config (roots, client certificate, ALPN).
    pub config: Arc<rustls::ClientConfig>,
    /// The name sent as SNI and verified in the upstream's certificate.
    pub server_name: ServerName<'static>,
    /// What distinguishes this config from another for the same upstream (its files and
    /// names): upstream state is shared across reloads only while this is unchanged.
    pub identity: String,
}

impl PartialEq for UpstreamTls {
    fn eq(&self, other: &Self) -> bool {
        self.identity == other.identity
    }
}

impl Eq for UpstreamTls {}

/// The files and names of a region's `tls:`, resolved against the table's directory.
#[derive(Debug, Clone, Default)]
pub struct TlsFiles<'a> {
    /// CA certificates (PEM) to trust instead of the system's roots.
    pub ca: Option<&'a Path>,
    /// The client certificate chain (PEM), for mTLS.
    pub client_cert: Option<&'a Path>,
    /// Its key (PEM).
    pub client_key: Option<&'a Path>,
}

/// The system's root certificates, loaded once.
fn system_roots() -> Arc<rustls::RootCertStore> {
    static ROOTS: OnceLock<Arc<rustls::RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::warn!(%error, "a system root certificate could not be read");
            }
            let (added, _) = roots.add_parsable_certificates(found.certs);
            tracing::debug!(added, "system root certificates");
            Arc::new(roots)
        })
        .clone()
}

/// The client config for upstreams with `files`, offering `alpn`.
///
/// Errors: a file that cannot be read or parsed (`path: reason`), a client certificate
/// without its key or the other way round, or a key that does not match.
pub fn client_config(
    files: &TlsFiles<'_>,
    alpn: &[&[u8]],
) -> Result<Arc<rustls::ClientConfig>, String> {
    let at = |path: &Path, e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let roots = match files.ca {
        None => system_roots(),
        Some(path) => Arc::new(super::load_roots(path)?),
    };
    let builder = rustls::ClientConfig::builder_with_provider(super::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match (files.client_cert, files.client_key) {
        (None, None) => builder.with_no_client_auth(),
        (Some(cert), Some(key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
                .map_err(|e| at(cert, &e))?
                .collect::<Result<_, _>>()
                .map_err(|e| at(cert, &e))?;
            let der = PrivateKeyDer::from_pem_file(key).map_err(|e| at(key, &e))?;
            builder
                .with_client_auth_cert(chain, der)
                .map_err(|e| at(key, &e))?
        }
        _ => return Err("client_cert and client_key go together".to_owned()),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}
