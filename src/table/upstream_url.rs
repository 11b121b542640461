//! An upstream's base URL in the routing table (docs/routing-table.md `regions.<name>.upstreams`):
//! `http://host[:port]` or `https://host[:port]`, nothing after the authority, made into
//! the [`UpstreamSpec`] the upstream runtime keys its state by, with the region's TLS.

use http::uri::{Scheme, Uri};

use super::UpstreamSpec;

/// Checks an upstream base URL: `http://host[:port]`, nothing after the authority.
pub(super) fn parse_upstream(
    url: &str,
    spec: &super::model::RegionSpec,
    tls: Option<&(std::sync::Arc<rustls::ClientConfig>, Option<String>, String)>,
) -> Result<UpstreamSpec, String> {
    let uri: Uri = url.parse().map_err(|e| format!("not a URL ({e})"))?;
    let https = match uri.scheme() {
        Some(s) if *s == Scheme::HTTP => false,
        Some(s) if *s == Scheme::HTTPS => true,
        _ => return Err("must start with http:// or https://".into()),
    };
    let authority = uri.authority().cloned().ok_or("no host")?;
    if authority.host().is_empty() {
        return Err("no host".into());
    }
    if authority.as_str().contains('@') {
        return Err("user info is not allowed".into());
    }
    if let Some(pq) = uri.path_and_query() {
        if pq.as_str() != "/" && !pq.as_str().is_empty() {
            return Err(
                "must not have a path or query: requests keep their own path (http://host:port)"
                    .into(),
            );
        }
    }
    // An https URL without a port means 443, as for any client.
    let authority = match (https, authority.port()) {
        (true, None) => format!("{}:443", authority.host())
            .parse()
            .map_err(|_| "no host".to_owned())?,
        _ => authority,
    };
    let tls = match (https, tls) {
        (false, _) => None,
        // The region's TLS config failed; its error is reported at `tls`.
        (true, None) => return Err("the region's TLS settings are invalid".into()),
        (true, Some((config, server_name, identity))) => {
            let name = server_name
                .clone()
                .unwrap_or_else(|| authority.host().trim_matches(['[', ']']).to_owned());
            let server_name = rustls::pki_types::ServerName::try_from(name.clone())
                .map_err(|_| format!("`{name}` is not a server name"))?;
            Some(crate::tls::client::UpstreamTls {
                config: config.clone(),
                server_name,
                identity: format!("{identity}{name}"),
            })
        }
    };
    Ok(UpstreamSpec {
        url: url.to_owned(),
        authority,
        tls,
        protocol: spec.protocol,
    })
}
