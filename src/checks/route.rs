//! Route extraction on arbitrary requests (docs/config.md `routes`), with the shipped routes:
//! a target (a path, ASCII as both codecs guarantee, with an optional `?query`), an
//! `x-entity-id` value and a body. What a route finds — in the path, the header, a `query:`
//! parameter or at a `json:` route's pointer in the body — resolves to a declared region or a
//! reasoned refusal; an id found in the body and borrowed from it lies inside it.

use http::HeaderName;

use super::{declared, shipped};
use crate::extract::RouteKind;
use crate::proxy::route::Extraction;

/// The input, split at its first two `\n`: a target, a header value, a body.
pub fn check(data: &[u8]) {
    let mut parts = data.splitn(3, |&b| b == b'\n');
    let target = parts.next().unwrap_or_default();
    let value = parts.next().unwrap_or_default();
    let body = parts.next().unwrap_or_default();
    // The codecs refuse a target that is not ASCII before the phases run.
    let Ok(target) = std::str::from_utf8(target) else {
        return;
    };
    if !target.is_ascii() {
        return;
    }
    let target = if target.starts_with('/') {
        target.to_owned()
    } else {
        format!("/{target}")
    };
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let (routes, table) = shipped();
    let name = HeaderName::from_static("x-entity-id");
    let header = |n: &HeaderName| (*n == name).then_some(value);
    let mut extraction = routes.extract_head(path, query, header);
    if let Extraction::Pending(pending) = extraction {
        let Some(json) = pending.json() else { return };
        extraction = match json.token(None, body) {
            Ok(Some(token)) => {
                if let std::borrow::Cow::Borrowed(text) = &token.text {
                    let inside = body.as_ptr_range();
                    let range = text.as_ptr_range();
                    assert!(
                        text.is_empty() || inside.start <= range.start && range.end <= inside.end,
                        "a borrowed id outside its body: {body:?}"
                    );
                }
                Extraction::Id(token, RouteKind::Json)
            }
            Ok(None) => match routes.after_body(pending, path, query, header, None, Some(body)) {
                Ok(after) => after,
                Err(_) => return,
            },
            // Not JSON, or no id there: a 400, never a route.
            Err(_) => return,
        };
    }
    if let Extraction::Id(token, kind) = extraction {
        if let Ok((_, decision)) = table.resolve_text(token.scheme, &token.text) {
            declared(table, decision.region, &(kind, &target, value));
        }
    }
}
