//! `admin:` of the router config (docs/admin.md): the admin API's token, its session lifetime, and
//! the host names a tokenless admin answers to.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::source::{Seg, Source, SourceError};

/// The shortest admin token `check` and start accept, in characters: 32 random characters
/// are beyond guessing even without the login throttle.
pub const MIN_TOKEN_CHARS: usize = 32;

/// The default `admin.session_max_age_s`: 12 hours, a working day.
pub const DEFAULT_SESSION_MAX_AGE_S: u64 = 12 * 3600;

/// The longest `admin.session_max_age_s`: 30 days.
pub const MAX_SESSION_MAX_AGE_S: u64 = 30 * 24 * 3600;

/// `admin:` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AdminSpec {
    #[serde(default)]
    pub(super) token_file: Option<String>,
    #[serde(default = "default_max_age")]
    session_max_age_s: u64,
    #[serde(default)]
    allowed_hosts: Vec<String>,
}

fn default_max_age() -> u64 {
    DEFAULT_SESSION_MAX_AGE_S
}

/// The admin API's access settings (docs/admin.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminSettings {
    /// `admin.token_file`: the file holding the bearer token, resolved against the config's
    /// directory; read again on every check, so a new token takes effect at once (and ends
    /// every session). `None`: no token, and the admin API must listen on loopback.
    pub token_file: Option<PathBuf>,
    /// `admin.session_max_age_s`: how long a console session lasts after its login, in
    /// seconds (the cookie's `Max-Age` and the server's own expiry). Default 43200 (12 h),
    /// 1 to 2592000 (30 days).
    pub session_max_age_s: u64,
    /// `admin.allowed_hosts`: host names (no port), lowercase, that a tokenless admin API
    /// answers to besides `127.0.0.1`, `localhost` and `[::1]` — against DNS rebinding, any
    /// other `Host` is refused. Default none. Unused with a token.
    pub allowed_hosts: Vec<String>,
}

impl Default for AdminSettings {
    fn default() -> Self {
        AdminSettings {
            token_file: None,
            session_max_age_s: DEFAULT_SESSION_MAX_AGE_S,
            allowed_hosts: Vec::new(),
        }
    }
}

/// Whether `name` can be a `Host` name: a DNS name or an IPv4 address, or an IPv6 address in
/// brackets; no port, scheme, path or wildcard.
fn is_host_name(name: &str) -> bool {
    if let Some(inner) = name.strip_prefix('[').and_then(|n| n.strip_suffix(']')) {
        return inner.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
        })
}

/// Validates `admin:` (absent: the defaults); each error at its key.
pub(super) fn settings(
    spec: Option<&AdminSpec>,
    base: &Path,
    source: &Source,
    errors: &mut Vec<SourceError>,
) -> AdminSettings {
    let Some(spec) = spec else {
        return AdminSettings::default();
    };
    let at = |k: &str| [Seg::Key("admin".to_owned()), Seg::Key(k.to_owned())];
    // Whether the file reads and its token is long enough is `files::check`'s (I/O).
    let token_file = spec.token_file.as_ref().map(|f| base.join(f));
    if spec.session_max_age_s == 0 || spec.session_max_age_s > MAX_SESSION_MAX_AGE_S {
        errors.push(source.error_at(
            &at("session_max_age_s"),
            format!(
                "session_max_age_s is in seconds, 1 to {MAX_SESSION_MAX_AGE_S} (30 days); \
                 default {DEFAULT_SESSION_MAX_AGE_S} (12 h)"
            ),
        ));
    }
    for (i, name) in spec.allowed_hosts.iter().enumerate() {
        if !is_host_name(name) {
            let mut key = at("allowed_hosts").to_vec();
            key.push(Seg::Index(i));
            errors.push(source.error_at(
                &key,
                format!(
                    "`{name}` is not a host name: write the name alone, without scheme, port \
                     or wildcard (e.g. console.internal)"
                ),
            ));
        }
    }
    AdminSettings {
        token_file,
        session_max_age_s: spec.session_max_age_s,
        allowed_hosts: spec
            .allowed_hosts
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::is_host_name;

    #[test]
    fn host_names() {
        for ok in [
            "console.internal",
            "localhost",
            "10.0.0.1",
            "[::1]",
            "a_b-c.x",
        ] {
            assert!(is_host_name(ok), "{ok}");
        }
        for bad in [
            "",
            "http://x",
            "x:8080",
            "*.example",
            "a..b",
            "[::1]:80",
            "[zz]",
            "x/y",
        ] {
            assert!(!is_host_name(bad), "{bad}");
        }
    }
}
