//! Route extraction on arbitrary heads (docs/config.md `routes`), with the shipped routes:
//! a path (ASCII, as both codecs guarantee) and an `x-entity-id` value; what a route finds
//! resolves to a declared region or a reasoned refusal.

use http::HeaderName;

use super::{declared, shipped};
use crate::proxy::route::Extraction;

/// The input, split at its first `\n`: a path, then a header value.
pub fn check(data: &[u8]) {
    let (path, value) = match data.iter().position(|&b| b == b'\n') {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    // The codecs refuse a target that is not ASCII before the phases run.
    let Ok(path) = std::str::from_utf8(path) else {
        return;
    };
    if !path.is_ascii() {
        return;
    }
    let path = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("/{path}")
    };
    let (routes, table) = shipped();
    let name = HeaderName::from_static("x-entity-id");
    let extraction = routes.extract_head(&path, "", |n| (*n == name).then_some(value));
    if let Extraction::Id(token, kind) = extraction {
        if let Ok((_, decision)) = table.resolve_text(token.scheme, &token.text) {
            declared(table, decision.region, &(kind, &path, value));
        }
    }
}
