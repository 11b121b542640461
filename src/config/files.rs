//! The files a router config names, read once the config is valid in itself: the listener's
//! certificates and keys, the client CA (`tls.client_auth.ca`) and the admin token. Kept
//! apart from validation (`RouterConfig::validate`), which never touches a file, so that the
//! config's rules can be tested on text alone. Each failure is reported at the key that
//! names the file.

use std::path::Path;

use super::admin::MIN_TOKEN_CHARS;
use super::ConfigFile;
use crate::source::{Seg, Source, SourceError};

/// Every file of `source`'s config that does not load; none when the config itself does not
/// parse (validation reports that).
pub(super) fn check(source: &Source) -> Vec<SourceError> {
    let Ok(file) = source.parse::<ConfigFile>() else {
        return Vec::new();
    };
    let base = source.path.parent().unwrap_or(Path::new("."));
    let key = |k: &str| Seg::Key(k.to_owned());
    let mut errors = Vec::new();
    if let Some(settings) = file.tls.as_ref().map(|spec| spec.resolve(base)) {
        // Each pair is loaded alone, so that a bad file is reported at its entry.
        for (i, files) in settings.certificates.iter().enumerate() {
            if let Err(e) = crate::tls::Certificates::load(vec![files.clone()], None) {
                let at = [key("tls"), key("certificates"), Seg::Index(i)];
                errors.push(source.error_at(&at, e));
            }
        }
        if let Some(auth) = &settings.client_auth {
            if let Err(e) = crate::tls::client_auth::build(auth) {
                errors.push(source.error_at(&[key("tls"), key("client_auth"), key("ca")], e));
            }
        }
    }
    let token_file = file.admin.as_ref().and_then(|a| a.token_file.as_ref());
    if let Some(path) = token_file.map(|f| base.join(f)) {
        let problem = match std::fs::read_to_string(&path) {
            Ok(text) if text.trim().is_empty() => {
                Some(format!("the token file {} is empty", path.display()))
            }
            Ok(text) if text.trim().chars().count() < MIN_TOKEN_CHARS => Some(format!(
                "the token in {} has {} characters: use at least {MIN_TOKEN_CHARS} random ones \
                 (e.g. `openssl rand -hex 32`)",
                path.display(),
                text.trim().chars().count()
            )),
            Ok(_) => None,
            Err(e) => Some(format!(
                "cannot read the token file {}: {e}",
                path.display()
            )),
        };
        if let Some(message) = problem {
            errors.push(source.error_at(&[key("admin"), key("token_file")], message));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RouterConfig;

    /// Validation reads no file: a config naming files that do not exist is valid as text,
    /// and only reading them (`from_source`) reports each at its key.
    #[test]
    fn validation_is_pure_and_the_files_are_read_after() {
        let source = Source {
            path: "/nonexistent/router.yaml".into(),
            text: "listen: 127.0.0.1:8080\nregion: eu\nrouting_table: t.yaml\n\
                   tls:\n  certificates: [ { cert: c.pem, key: k.pem } ]\n\
                   admin: { token_file: token }\n"
                .to_owned(),
        };
        let config = RouterConfig::validate(&source).expect("valid as text");
        assert_eq!(config.region, "eu");
        let errors = RouterConfig::from_source(&source).expect_err("the files are missing");
        let text = errors.to_string();
        assert!(text.contains("router.yaml:5:"), "{text}");
        assert!(text.contains("c.pem"), "{text}");
        assert!(
            text.contains("router.yaml:6:") && text.contains("token"),
            "{text}"
        );
    }
}
