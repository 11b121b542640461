//! `router.yaml` and `routing-table.yaml` from arbitrary text (docs/config.md,
//! docs/routing-table.md): either loaded, or refused with every error's position inside
//! the text; a table that loads routes every country to a region it declares.

use crate::config::RouterConfig;
use crate::proxy::route::Routes;
use crate::source::{Source, SourceErrors};
use crate::table::load_source;

/// The first byte picks the file: even, the router config (and its routes); odd, a table.
pub fn check(data: &[u8]) {
    let Some((&which, text)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(text).into_owned();
    // YAML's line breaks (1.2 §5.4): LF, CRLF, and a CR alone, as an editor counts them too.
    let breaks =
        text.matches('\n').count() + text.matches('\r').count() - text.matches("\r\n").count();
    let lines = breaks + 1;
    let within = |errors: &SourceErrors| {
        for e in &errors.0 {
            if let Some((line, column)) = e.position {
                assert!(line >= 1 && line <= lines, "{e} (of {lines} lines)");
                assert!(column >= 1, "{e}");
            }
            assert!(!e.message.is_empty(), "an error without a message");
        }
    };
    let source = Source {
        path: "fuzz.yaml".into(),
        text,
    };
    if which % 2 == 0 {
        match RouterConfig::validate(&source) {
            Ok(config) => {
                if let Err(errors) = Routes::for_config(&config) {
                    within(&errors);
                }
            }
            Err(errors) => within(&errors),
        }
        return;
    }
    match load_source(&source) {
        Ok(table) => {
            for country in 0..=255u8 {
                if let Some(region) = table.country_region(country) {
                    super::declared(&table, region, &country);
                }
            }
            super::declared(&table, table.default_region, &"default_region");
        }
        Err(errors) => within(&errors),
    }
}
