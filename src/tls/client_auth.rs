//! Client certificates on the listener (docs/tls-h2-grpc.md; the mTLS between edges of docs/mesh.md):
//! verified against the CA file of `tls.client_auth`, which is reloaded with the listener's
//! certificates (`Certificates::reload`), so a rotated mesh CA takes effect without a restart.
//!
//! rustls fixes a `ServerConfig`'s verifier when the config is built; this one delegates every
//! check to a `WebPkiClientVerifier` that a reload swaps whole (`arc-swap`: one load per
//! handshake). It sends no root hints (the CertificateRequest's `certificate_authorities`):
//! they would have to be borrowed from the verifier in use, which a reload may replace. They
//! are optional (RFC 8446 §4.2.4), and a client with one certificate sends it anyway.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use sha2::{Digest, Sha256};

use super::ClientAuth;

/// The verifier built from one reading of the CA file.
#[derive(Debug)]
pub struct Built {
    verifier: Arc<dyn ClientCertVerifier>,
    /// SHA-256 of the CA file's bytes, hex, for `GET /admin/tls`.
    pub sha256: String,
}

/// Reads `auth.ca` and builds its verifier.
///
/// Errors: the file cannot be read or parsed, or holds no usable CA certificate
/// (`path: reason`).
pub fn build(auth: &ClientAuth) -> Result<Built, String> {
    let at = |e: &dyn std::fmt::Display| format!("{}: {e}", auth.ca.display());
    let bytes = std::fs::read(&auth.ca).map_err(|e| at(&e))?;
    let roots = Arc::new(super::load_roots(&auth.ca)?);
    let builder =
        rustls::server::WebPkiClientVerifier::builder_with_provider(roots, super::provider());
    let builder = if auth.required {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    Ok(Built {
        verifier: builder.build().map_err(|e| at(&e))?,
        sha256: Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
    })
}

/// The listener's client certificate verifier, reloadable.
#[derive(Debug)]
pub struct ClientVerifier {
    required: bool,
    current: ArcSwap<Built>,
}

impl ClientVerifier {
    /// A verifier over `built`; `required` as `tls.client_auth.required`.
    pub fn new(required: bool, built: Built) -> ClientVerifier {
        ClientVerifier {
            required,
            current: ArcSwap::from_pointee(built),
        }
    }

    /// Puts `built` in use for the handshakes that start from now on.
    pub fn install(&self, built: Built) {
        self.current.store(Arc::new(built));
    }

    /// The SHA-256 of the CA file in use.
    pub fn sha256(&self) -> String {
        self.current.load().sha256.clone()
    }
}

impl ClientCertVerifier for ClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        self.required
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.current
            .load()
            .verifier
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current
            .load()
            .verifier
            .verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.current
            .load()
            .verifier
            .verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.current.load().verifier.supported_verify_schemes()
    }
}
