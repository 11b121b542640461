//! The listener's certificates: loaded from PEM files, chosen per handshake by SNI, swapped
//! whole on a reload — with the CA that client certificates must chain to, if any
//! (`tls.client_auth`, [`super::client_auth`]).
//!
//! A reload builds the complete new set (and the client verifier) first; if any file fails
//! to read or parse, or a key does not match its certificate, nothing changes (handshakes
//! keep what is in use) and the error is kept for [`Certificates::status`]. Reads of the set
//! are lock-free (`arc-swap`), one load per handshake.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::InconsistentKeys;
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::client_auth::{self, ClientVerifier};
use super::{CertFiles, ClientAuth};

/// One loaded certificate: its key for handshakes, and what the status reports.
#[derive(Debug)]
struct Loaded {
    key: Arc<CertifiedKey>,
    /// SHA-256 of the leaf certificate's DER, hex: what `openssl x509 -fingerprint -sha256`
    /// prints, to tell which certificate is served.
    sha256: String,
}

/// A complete set: the default and the certificates by SNI name.
#[derive(Debug)]
struct Set {
    loaded: Vec<Loaded>,
    default: usize,
    /// Exact names, lowercased → index in `loaded`.
    exact: HashMap<String, usize>,
    /// `*.suffix` names: `.suffix` → index.
    wildcard: Vec<(String, usize)>,
}

/// The certificates in use, their files and reload history.
pub struct Certificates {
    files: Vec<CertFiles>,
    set: ArcSwap<Set>,
    /// `tls.client_auth` and its verifier, which the listener's config holds too.
    client: Option<(ClientAuth, Arc<ClientVerifier>)>,
    status: Mutex<History>,
}

#[derive(Debug, Default)]
struct History {
    loaded_at: Option<SystemTime>,
    successes: u64,
    failures: u64,
    last_error: Option<String>,
}

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Certificates")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// What `GET /admin/tls` reports.
#[derive(Debug, Clone, Serialize)]
pub struct TlsStatus {
    /// Each certificate in use: its file, names and fingerprint.
    pub certificates: Vec<CertStatus>,
    /// When the set in use was loaded (RFC 3339, in milliseconds like every admin timestamp).
    pub loaded_at: Option<String>,
    /// Reloads that installed a new set.
    pub reloads: u64,
    /// Reloads refused (the set in use was kept).
    pub failed_reloads: u64,
    /// Why the last refused reload failed, until one succeeds.
    pub last_error: Option<String>,
    /// The CA client certificates must chain to (`tls.client_auth`), if any.
    pub client_auth: Option<ClientAuthStatus>,
}

/// `tls.client_auth` in [`TlsStatus`].
#[derive(Debug, Clone, Serialize)]
pub struct ClientAuthStatus {
    /// The CA file.
    pub ca: String,
    /// Whether clients without a certificate are refused.
    pub required: bool,
    /// SHA-256 of the CA file in use, hex: compare with `sha256sum`.
    pub sha256: String,
}

/// One certificate in [`TlsStatus`].
#[derive(Debug, Clone, Serialize)]
pub struct CertStatus {
    /// The certificate's file.
    pub cert: String,
    /// Its SNI names (none: the default candidate).
    pub server_names: Vec<String>,
    /// Whether handshakes without a matching name get it.
    pub default: bool,
    /// SHA-256 of the leaf, hex.
    pub sha256: String,
}

impl Certificates {
    /// Loads every certificate of `files` (at least one), and the CA of `client_auth`.
    ///
    /// Errors: the first file that cannot be read or parsed, or a key that does not match
    /// its certificate, as `path: reason`.
    pub fn load(
        files: Vec<CertFiles>,
        client_auth: Option<ClientAuth>,
    ) -> Result<Arc<Certificates>, String> {
        let set = build(&files)?;
        let client = match client_auth {
            None => None,
            Some(auth) => {
                let built = client_auth::build(&auth)?;
                let verifier = Arc::new(ClientVerifier::new(auth.required, built));
                Some((auth, verifier))
            }
        };
        Ok(Arc::new(Certificates {
            files,
            set: ArcSwap::from_pointee(set),
            client,
            status: Mutex::new(History {
                loaded_at: Some(SystemTime::now()),
                ..History::default()
            }),
        }))
    }

    /// Every file a reload reads: certificates, keys, the client CA.
    pub fn files(&self) -> Vec<&std::path::Path> {
        let mut files: Vec<&std::path::Path> = self
            .files
            .iter()
            .flat_map(|f| [f.cert.as_path(), f.key.as_path()])
            .collect();
        files.extend(self.client.iter().map(|(auth, _)| auth.ca.as_path()));
        files
    }

    /// The client certificate verifier for the listener's config, with `tls.client_auth`.
    pub fn client_verifier(&self) -> Option<Arc<ClientVerifier>> {
        self.client.as_ref().map(|(_, v)| v.clone())
    }

    /// Reads the files again and installs the new set and client CA, or keeps those in use.
    ///
    /// Errors: as [`Certificates::load`]; what is in use is kept.
    pub fn reload(&self) -> Result<(), String> {
        let built = build(&self.files).and_then(|set| {
            let client = match &self.client {
                Some((auth, _)) => Some(client_auth::build(auth)?),
                None => None,
            };
            Ok((set, client))
        });
        let mut history = self.status.lock().unwrap_or_else(|p| p.into_inner());
        match built {
            Ok((set, client)) => {
                self.set.store(Arc::new(set));
                if let (Some((_, verifier)), Some(built)) = (&self.client, client) {
                    verifier.install(built);
                }
                history.loaded_at = Some(SystemTime::now());
                history.successes += 1;
                history.last_error = None;
                crate::metrics::tls_reload(true);
                Ok(())
            }
            Err(e) => {
                history.failures += 1;
                history.last_error = Some(e.clone());
                crate::metrics::tls_reload(false);
                Err(e)
            }
        }
    }

    /// The certificates in use and the reload history.
    pub fn status(&self) -> TlsStatus {
        let set = self.set.load();
        let history = self.status.lock().unwrap_or_else(|p| p.into_inner());
        TlsStatus {
            certificates: self
                .files
                .iter()
                .zip(&set.loaded)
                .enumerate()
                .map(|(i, (files, loaded))| CertStatus {
                    cert: files.cert.display().to_string(),
                    server_names: files.server_names.clone(),
                    default: i == set.default,
                    sha256: loaded.sha256.clone(),
                })
                .collect(),
            loaded_at: history.loaded_at.and_then(|t| {
                // Cut to the millisecond, as `table::rfc3339_ms` writes every admin timestamp.
                let t = time::OffsetDateTime::from(t);
                t.replace_millisecond(t.millisecond())
                    .ok()?
                    .format(&time::format_description::well_known::Rfc3339)
                    .ok()
            }),
            reloads: history.successes,
            failed_reloads: history.failures,
            last_error: history.last_error.clone(),
            client_auth: self
                .client
                .as_ref()
                .map(|(auth, verifier)| ClientAuthStatus {
                    ca: auth.ca.display().to_string(),
                    required: auth.required,
                    sha256: verifier.sha256(),
                }),
        }
    }
}

impl ResolvesServerCert for Certificates {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let set = self.set.load();
        let i = hello
            .server_name()
            .and_then(|name| set.find(name))
            .unwrap_or(set.default);
        set.loaded.get(i).map(|l| l.key.clone())
    }
}

impl Set {
    /// The certificate for an SNI name (rustls gives it lowercased, without a trailing dot).
    fn find(&self, name: &str) -> Option<usize> {
        if let Some(&i) = self.exact.get(name) {
            return Some(i);
        }
        let dot = name.find('.')?;
        let suffix = &name[dot..];
        self.wildcard
            .iter()
            .find(|(s, _)| s == suffix)
            .map(|&(_, i)| i)
    }
}

fn build(files: &[CertFiles]) -> Result<Set, String> {
    let provider = super::provider();
    let mut loaded = Vec::with_capacity(files.len());
    let mut exact = HashMap::new();
    let mut wildcard = Vec::new();
    for (i, f) in files.iter().enumerate() {
        loaded.push(load_pair(f, &provider)?);
        for name in &f.server_names {
            match name.strip_prefix('*') {
                Some(suffix) if suffix.starts_with('.') => wildcard.push((suffix.to_owned(), i)),
                _ => {
                    exact.entry(name.clone()).or_insert(i);
                }
            }
        }
    }
    if loaded.is_empty() {
        return Err("tls.certificates lists no certificate".to_owned());
    }
    let default = files
        .iter()
        .position(|f| f.server_names.is_empty())
        .unwrap_or(0);
    Ok(Set {
        loaded,
        default,
        exact,
        wildcard,
    })
}

/// One certificate chain and its key.
fn load_pair(
    files: &CertFiles,
    provider: &rustls::crypto::CryptoProvider,
) -> Result<Loaded, String> {
    let at = |path: &std::path::Path, e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .map_err(|e| at(&files.cert, &e))?
        .collect::<Result<_, _>>()
        .map_err(|e| at(&files.cert, &e))?;
    let Some(leaf) = chain.first() else {
        return Err(at(&files.cert, &"no CERTIFICATE in the file"));
    };
    let sha256 = Sha256::digest(leaf.as_ref())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|e| at(&files.key, &e))?;
    let signer = provider
        .key_provider
        .load_private_key(key)
        .map_err(|e| at(&files.key, &e))?;
    // What `CertifiedKey::from_der` does, but each failure names the file at fault: a
    // certificate that does not parse is the certificate file's, not the key file's.
    let key = CertifiedKey::new(chain, signer);
    match key.keys_match() {
        Ok(()) | Err(rustls::Error::InconsistentKeys(InconsistentKeys::Unknown)) => {}
        Err(rustls::Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            return Err(format!(
                "{}: the key does not match the certificate in {}",
                files.key.display(),
                files.cert.display()
            ))
        }
        Err(e) => return Err(at(&files.cert, &e)),
    }
    Ok(Loaded {
        key: Arc::new(key),
        sha256,
    })
}
