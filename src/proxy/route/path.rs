//! `path:` routes (docs/config.md): a path template with an `{id}` parameter, e.g.
//! `/v1/orders/{id}/{*rest}`.
//!
//! All templates live in one `matchit` router, tried at the place of the first `path:` route;
//! `matchit` refuses templates that conflict at load, and prefers static segments over
//! `{params}`, so among templates the most specific one matches. The hot path: no allocation
//! unless the segment is percent-encoded.

use serde::Deserialize;

use super::{scheme_or_default, Kind, Route, RouteError, Token};
use crate::extract::graphql::plan::ParseLimits;
use crate::extract::path::decode_segment;

/// A `path:` route's keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Spec {
    /// The template, starting with `/`, with an `{id}` parameter.
    path: String,
    /// The scheme of the route's ids (docs/schemes.md); default `iuid`.
    #[serde(default)]
    scheme: Option<String>,
}

impl Kind for Spec {
    fn scheme(&self) -> Option<&str> {
        self.scheme.as_deref()
    }

    /// Adds the template to the routes' one `matchit` router, placed where the first `path:`
    /// route is.
    fn compile(self, routes: &mut Vec<Route>, _: ParseLimits) -> Result<(), RouteError> {
        let p = &self.path;
        if !p.starts_with('/') {
            return Err(RouteError::new(
                "path",
                format!("path template `{p}` must start with /"),
            ));
        }
        crate::extract::normalize::check_template(p).map_err(|e| RouteError::new("path", e))?;
        if !p.contains("{id}") {
            return Err(RouteError::new(
                "path",
                format!("path template `{p}` has no {{id}}"),
            ));
        }
        let id = PathId {
            at: IdAt::of(p),
            scheme: scheme_or_default(self.scheme)?,
            template: p.clone(),
        };
        let at = routes.iter().position(|r| matches!(r, Route::Path(_)));
        let at = at.unwrap_or_else(|| {
            routes.push(Route::Path(Paths::default()));
            routes.len() - 1
        });
        let Route::Path(paths) = &mut routes[at] else {
            unreachable!("found or pushed above")
        };
        paths
            .router
            .insert(self.path.as_str(), id)
            .map_err(|e| RouteError::new("path", format!("path template `{}`: {e}", self.path)))
    }
}

/// Every `path:` template of the config, in one router.
#[derive(Debug, Default)]
pub struct Paths {
    router: matchit::Router<PathId>,
}

/// A path template's `{id}`: where it is and the scheme of its ids.
#[derive(Debug, Clone)]
struct PathId {
    at: IdAt,
    scheme: String,
    /// The template as written (a span's `http.route`).
    template: String,
}

impl Paths {
    /// The id's token in `path`, if a template matches it.
    pub(super) fn token<'q>(&self, path: &'q str) -> Option<Token<'_, 'q>> {
        let matched = self.router.at(path).ok()?;
        let PathId { at, scheme, .. } = matched.value;
        let raw = match *at {
            IdAt::Offset(start) => segment_at(path, start)?,
            IdAt::Param => matched.params.get("id")?,
        };
        Some(Token {
            text: decode_segment(raw),
            scheme,
        })
    }
}

impl Paths {
    /// The template that matches `path`.
    pub(super) fn template(&self, path: &str) -> Option<&str> {
        Some(&self.router.at(path).ok()?.value.template)
    }
}

/// Where a template's `{id}` is found in a matched path.
#[derive(Debug, Clone, Copy)]
enum IdAt {
    /// `{id}` is a whole segment after static ones only (`/v1/orders/{id}/...`), so it starts
    /// at this byte offset of every path the template matches and runs to the next `/`.
    /// Reading it there skips matchit's parameter lookup and its UTF-8 check; with the
    /// hyphenated-id fast path of the iUID scheme, extract + resolve went from 49 to 43 ns.
    Offset(usize),
    /// Anywhere else (after another parameter, or with text around it in its segment): read
    /// through matchit's params.
    Param,
}

impl IdAt {
    fn of(template: &str) -> IdAt {
        match template.find("/{id}") {
            Some(at)
                if !template[..at].contains(['{', '}'])
                    && matches!(template.as_bytes().get(at + 5), None | Some(b'/')) =>
            {
                IdAt::Offset(at + 1)
            }
            _ => IdAt::Param,
        }
    }
}

/// The path segment that starts at byte `start`: up to the next `/` or the end.
fn segment_at(path: &str, start: usize) -> Option<&str> {
    let rest = path.get(start..)?;
    rest.get(..memchr::memchr(b'/', rest.as_bytes()).unwrap_or(rest.len()))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{found, parts, routes, ID};
    use super::*;
    use crate::extract::RouteKind;

    #[test]
    fn id_found_by_offset_or_by_param() {
        assert!(matches!(IdAt::of("/v1/orders/{id}"), IdAt::Offset(11)));
        assert!(matches!(
            IdAt::of("/v1/orders/{id}/{*rest}"),
            IdAt::Offset(11)
        ));
        assert!(matches!(IdAt::of("/t/{tenant}/o/{id}"), IdAt::Param));
        assert!(matches!(IdAt::of("/o/{id}.json"), IdAt::Param));
        let r = routes("- path: /v1/orders/{id}\n- path: /v1/orders/{id}/{*rest}\n- path: /t/{tenant}/o/{id}\n");
        let want = crate::scheme::iuid::parse(ID.as_bytes()).expect("vector");
        let simple = ID.replace('-', "");
        for uri in [
            format!("/v1/orders/{ID}"),
            format!("/v1/orders/{ID}/items/3"),
            format!("/v1/orders/{simple}"),
            format!("/v1/orders/{simple}/items"),
            // 36 bytes with a `/` inside: not taken for a hyphenated id.
            format!("/v1/orders/{simple}/abc"),
            format!("/v1/orders/%7B{ID}%7D/x"),
            format!("/t/acme/o/{ID}"),
        ] {
            assert_eq!(
                found(r.extract(&parts(&uri, None))),
                Some((Ok(want), RouteKind::Path)),
                "{uri}"
            );
        }
        // A 37-byte segment is not cut at 36.
        assert!(matches!(
            found(r.extract(&parts(&format!("/v1/orders/{ID}0"), None))),
            Some((Err(_), RouteKind::Path))
        ));
    }

    proptest::proptest! {
        /// Reading the id at its offset (with the hyphenated fast path) finds what matchit's
        /// params find, for any path the templates match: ids, near-ids (a simple id and a
        /// short tail in 36 bytes, 37 bytes), and junk.
        #[test]
        fn offset_agrees_with_params(
            segment in proptest::prop_oneof![
                "[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}",
                "[0-9a-f]{32}(/[a-z]{0,3})?",
                "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}[0-9a-f/]?",
                "[0-9a-fA-F%.-]{1,50}",
            ],
            tail in proptest::option::of("[a-z0-9/]{0,20}"),
        ) {
            let r = routes("- path: /v1/orders/{id}\n- path: /v1/orders/{id}/{*rest}\n");
            let mut router = matchit::Router::new();
            router.insert("/v1/orders/{id}", ()).expect("route");
            router.insert("/v1/orders/{id}/{*rest}", ()).expect("route");
            let path = match &tail {
                Some(t) => format!("/v1/orders/{segment}/x{t}"),
                None => format!("/v1/orders/{segment}"),
            };
            let Ok(head) = http::Request::get(path.as_str()).body(()) else {
                return Ok(());
            };
            let head = head.into_parts().0;
            let want = router
                .at(head.uri.path())
                .ok()
                .and_then(|m| m.params.get("id"))
                .map(|raw| (crate::scheme::iuid::parse(&decode_segment(raw)), RouteKind::Path));
            proptest::prop_assert_eq!(found(r.extract(&head)), want);
        }
    }

    #[test]
    fn percent_encoded_braced_id() {
        let r = routes("- path: /o/{id}\n");
        let uri = format!("/o/%7B{}%7d", ID.to_uppercase());
        assert!(matches!(
            found(r.extract(&parts(&uri, None))),
            Some((Ok(_), _))
        ));
    }
}
