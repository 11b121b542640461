//! A fan-out request's page (`extract/fanout.rs`, docs/fanout.md) from an arbitrary query
//! string, with the shipped `/v1/orders` route: the limit within its bounds, and the query
//! sent to each region read back as the same page (limit, cursor, other parameters).

use super::shipped;
use crate::proxy::route::Extraction;

/// The input is a query string (not UTF-8: skipped, as the codecs refuse such a target).
pub fn check(data: &[u8]) {
    let Ok(query) = std::str::from_utf8(data) else {
        return;
    };
    let (routes, _) = shipped();
    let Extraction::Fanout(route) = routes.extract_head("/v1/orders", "", |_| None) else {
        panic!("the shipped config has no fan-out on /v1/orders");
    };
    let Ok(page) = route.page(Some(query)) else {
        return;
    };
    assert!(page.limit >= 1, "{query:?}: limit {}", page.limit);
    let sent = route.region_query(&page, page.cursor.as_deref());
    let again = route
        .page(Some(&sent))
        .unwrap_or_else(|e| panic!("{query:?} → {sent:?} refused: {e}"));
    assert_eq!(again.limit, page.limit, "{query:?} → {sent:?}");
    assert_eq!(again.cursor, page.cursor, "{query:?} → {sent:?}");
    assert_eq!(again.rest, page.rest, "{query:?} → {sent:?}");
}
