//! The `fanout:` route (docs/fanout.md): a list endpoint asked of every region and merged by the
//! items' id creation time.
//!
//! This module holds what the route *is*: its settings as compiled from the config, and how a
//! request's query string becomes the page it asks for (the `limit`, clamped to `max`, and the
//! cursor). The route kind's keys, their validation and its phase (asking the regions) are
//! `crate::proxy::route::fanout`'s; merging the answers is `crate::fanout`'s.

use std::borrow::Cow;
use std::time::Duration;

use serde::Deserialize;

/// Which end of time a page starts from (docs/fanout.md `order`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// Newest first; the next page is `before` the cursor.
    #[default]
    Desc,
    /// Oldest first; the next page is `after` the cursor.
    Asc,
}

impl Order {
    /// The cursor parameter's default name: `before` for `desc`, `after` for `asc`.
    pub fn default_cursor_param(self) -> &'static str {
        match self {
            Order::Desc => "before",
            Order::Asc => "after",
        }
    }
}

/// What a failed region does to the page (docs/fanout.md `on_region_error`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnRegionError {
    /// The page is 200 with the other regions' items and `partial: true`.
    #[default]
    Partial,
    /// The answer is 502 problem+json naming the failed regions.
    Fail,
}

/// `limit: { param, default, max }` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitSpec {
    /// The query parameter holding the page size.
    pub param: String,
    /// The page size when the request gives none.
    pub default: usize,
    /// The largest page size; a larger `limit` is clamped to it.
    pub max: usize,
}

impl Default for LimitSpec {
    fn default() -> Self {
        LimitSpec {
            param: "limit".to_owned(),
            default: 50,
            max: 500,
        }
    }
}

/// `cursor: { param }` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CursorSpec {
    /// The query parameter holding the cursor id (default `before`, or `after` for `asc`).
    #[serde(default)]
    pub param: Option<String>,
}

/// A compiled `fanout:` route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FanoutRoute {
    /// The list endpoint's path, matched exactly.
    pub path: String,
    /// The scheme of the items' ids (it must carry a creation time).
    pub scheme: String,
    /// RFC 6901 JSON pointer to the array of items in each region's answer (`""` is the
    /// answer itself).
    pub items: String,
    /// The member of each item holding its id.
    pub id_field: String,
    /// Newest or oldest first.
    pub order: Order,
    /// The query parameter holding the page size.
    pub limit_param: String,
    /// The page size when the request gives none.
    pub limit_default: usize,
    /// The largest page size.
    pub limit_max: usize,
    /// The query parameter holding the cursor.
    pub cursor_param: String,
    /// Bound on each region's whole answer (headers and body).
    pub timeout: Duration,
    /// What a failed region does to the page.
    pub on_region_error: OnRegionError,
}

/// The page a fan-out request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageRequest<'q> {
    /// Items on the page: the request's `limit`, clamped to `[1, max]`, or the default.
    pub limit: usize,
    /// The cursor id's text (percent-decoded), if the request has one.
    pub cursor: Option<Cow<'q, str>>,
    /// The client's query parameters but the limit and the cursor, each followed by `&`, as
    /// written: [`FanoutRoute::region_query`] adds those two back.
    pub rest: String,
}

impl FanoutRoute {
    /// Reads the page out of a request's query string, and the query to send each region.
    ///
    /// Errors: the limit parameter is not a non-negative integer, or the cursor parameter is
    /// given twice (which one would a region read?); the message names it, the caller
    /// answers 400.
    pub fn page<'q>(&self, query: Option<&'q str>) -> Result<PageRequest<'q>, String> {
        let query = query.unwrap_or("");
        let mut limit = self.limit_default;
        let mut cursor = None;
        let mut cursor_seen = false;
        let mut rest = String::with_capacity(query.len() + 16);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (raw_key, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(raw_key);
            if key == self.limit_param.as_str() {
                let text = decode(raw_value);
                limit = text.trim().parse::<usize>().map_err(|_| {
                    format!(
                        "the `{}` parameter must be a whole number of items, not `{text}`",
                        self.limit_param
                    )
                })?;
                continue;
            }
            if key == self.cursor_param.as_str() {
                if cursor_seen {
                    return Err(format!(
                        "the `{}` parameter is given twice: give one cursor",
                        self.cursor_param
                    ));
                }
                cursor_seen = true;
                let text = decode(raw_value);
                if !text.is_empty() {
                    cursor = Some(text);
                }
                continue;
            }
            rest.push_str(pair);
            rest.push('&');
        }
        Ok(PageRequest {
            limit: limit.clamp(1, self.limit_max),
            cursor,
            rest,
        })
    }

    /// The query string each region gets: the client's other parameters, the cursor as
    /// `canonical_cursor` (the text of the id the router parsed and merges by, so that every
    /// region reads the id the router did, whatever form the client wrote it in), and the
    /// limit parameter set to the page's `limit` (so every region returns the same page
    /// size).
    pub fn region_query(&self, page: &PageRequest<'_>, canonical_cursor: Option<&str>) -> String {
        let mut query = String::with_capacity(page.rest.len() + 64);
        query.push_str(&page.rest);
        if let Some(cursor) = canonical_cursor {
            query.extend(form_urlencoded::byte_serialize(
                self.cursor_param.as_bytes(),
            ));
            query.push('=');
            query.extend(form_urlencoded::byte_serialize(cursor.as_bytes()));
            query.push('&');
        }
        query.extend(form_urlencoded::byte_serialize(self.limit_param.as_bytes()));
        query.push('=');
        query.push_str(&page.limit.to_string());
        query
    }
}

/// A query-string key or value, `application/x-www-form-urlencoded` decoded.
fn decode(raw: &str) -> Cow<'_, str> {
    if !raw.contains(['%', '+']) {
        return Cow::Borrowed(raw);
    }
    form_urlencoded::parse(raw.as_bytes())
        .next()
        .map(|(k, _)| Cow::Owned(k.into_owned()))
        .unwrap_or(Cow::Borrowed(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route() -> FanoutRoute {
        FanoutRoute {
            path: "/v1/orders".into(),
            scheme: "iuid".into(),
            items: "/items".into(),
            id_field: "id".into(),
            order: Order::Desc,
            limit_param: "limit".into(),
            limit_default: 50,
            limit_max: 500,
            cursor_param: "before".into(),
            timeout: Duration::from_secs(2),
            on_region_error: OnRegionError::Partial,
        }
    }

    #[test]
    fn limit_is_clamped_and_always_sent() {
        let r = route();
        let p = r.page(None).expect("page");
        assert_eq!(
            (p.limit, r.region_query(&p, None).as_str()),
            (50, "limit=50")
        );
        let p = r.page(Some("user=7&limit=9000&x=a%20b")).expect("page");
        assert_eq!(p.limit, 500);
        assert_eq!(r.region_query(&p, None), "user=7&x=a%20b&limit=500");
        let p = r.page(Some("limit=0")).expect("page");
        assert_eq!(p.limit, 1);
        assert!(r.page(Some("limit=ten")).is_err());
        assert!(r.page(Some("limit=-1")).is_err());
    }

    #[test]
    fn cursor_is_decoded_and_passed_on_as_given_to_region_query() {
        let r = route();
        let p = r.page(Some("before=%7Babc%7D&limit=3&x=1")).expect("page");
        assert_eq!(p.cursor.as_deref(), Some("{abc}"));
        assert_eq!(r.region_query(&p, Some("abc")), "x=1&before=abc&limit=3");
        assert_eq!(r.region_query(&p, Some("a b")), "x=1&before=a+b&limit=3");
        assert_eq!(r.page(Some("before=")).expect("page").cursor, None);
        let twice = r.page(Some("before=a&before=b")).expect_err("twice");
        assert!(twice.contains("`before`"), "{twice}");
        assert!(r.page(Some("before=&before=b")).is_err());
    }
}
