//! The verified client certificate as the upstream sees it: `X-Forwarded-Client-Cert` in
//! Envoy's format (docs/tls-h2-grpc.md, `tls.client_auth.forward_client_cert: set`).
//!
//! `Hash=<SHA-256 of the DER, hex>;Subject="<RFC 4514 subject>";URI=<SAN URI>;DNS=<SAN DNS>`,
//! one `URI=` / `DNS=` pair per subject alternative name, as Envoy writes it with
//! `set_current_client_cert_details { subject, uri, dns }`. Made once per connection, after the
//! handshake, from the certificate rustls already verified; a request only clones it.

use http::HeaderValue;
use sha2::{Digest, Sha256};
use x509_parser::extensions::GeneralName;
use x509_parser::objects::{oid2abbrev, oid_registry};
use x509_parser::x509::X509Name;

/// The `X-Forwarded-Client-Cert` value for the end-entity certificate `der`.
///
/// Errors: `None` when the certificate cannot be read (rustls verified it, so only an odd
/// encoding gets here); the request then goes without the field rather than with a partial one.
pub fn forwarded_client_cert(der: &[u8]) -> Option<HeaderValue> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let mut out = String::with_capacity(160);
    out.push_str("Hash=");
    for b in Sha256::digest(der) {
        out.push_str(&format!("{b:02x}"));
    }
    out.push_str(";Subject=\"");
    for c in subject(cert.subject()).chars() {
        // Inside a quoted XFCC value a `"` is escaped with a backslash (Envoy's grammar);
        // RFC 4514's own backslashes stay as they are.
        if c == '"' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            let (key, value) = match name {
                GeneralName::URI(uri) => ("URI", *uri),
                GeneralName::DNSName(dns) => ("DNS", *dns),
                _ => continue,
            };
            out.push(';');
            out.push_str(key);
            out.push('=');
            // A value holding a separator is quoted.
            if value.contains([',', ';', '=', '"']) {
                out.push('"');
                out.push_str(&value.replace('"', "\\\""));
                out.push('"');
            } else {
                out.push_str(value);
            }
        }
    }
    HeaderValue::try_from(out).ok()
}

/// A distinguished name as RFC 4514 writes it: the last RDN first, `CN=edge,O=Example`;
/// attribute types by their short name (or dotted OID), special characters escaped.
fn subject(name: &X509Name<'_>) -> String {
    let registry = oid_registry();
    let mut rdns: Vec<String> = Vec::new();
    for rdn in name.iter_rdn() {
        let mut parts: Vec<String> = Vec::new();
        for attr in rdn.iter() {
            let oid = attr.attr_type();
            let key = oid2abbrev(oid, registry)
                .map(str::to_owned)
                .unwrap_or_else(|_| oid.to_id_string());
            let value = match attr.as_str() {
                Ok(text) => escape(text),
                // RFC 4514 §2.4: a value that is no string is `#` and its BER in hex.
                Err(_) => {
                    let raw = attr.attr_value().data;
                    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
                    format!("#{hex}")
                }
            };
            parts.push(format!("{key}={value}"));
        }
        rdns.push(parts.join("+"));
    }
    rdns.reverse();
    rdns.join(",")
}

/// RFC 4514 §2.4 escaping of an attribute value.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let last = value.chars().count().saturating_sub(1);
    for (i, c) in value.chars().enumerate() {
        let special = matches!(c, '"' | '+' | ',' | ';' | '<' | '>' | '\\')
            || (i == 0 && matches!(c, '#' | ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        if c == '\0' {
            out.push_str("\\00");
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn rfc4514_escapes() {
        assert_eq!(escape("a,b+c"), "a\\,b\\+c");
        assert_eq!(escape(" #x "), "\\ #x\\ ");
        assert_eq!(escape("#x"), "\\#x");
        assert_eq!(escape("plain"), "plain");
    }
}
