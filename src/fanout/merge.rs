//! The merge of docs/fanout.md: the regions' items, one page ordered by (creation time, canonical
//! id text), each id once.
//!
//! Items are kept as the regions sent them: a region's answer is validated once as JSON and
//! its items borrowed from it as [`RawValue`]s, so nothing is re-serialized (members keep
//! their order and spelling) and only each item's id member is decoded.

use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::Deserializer as _;
use serde_json::value::RawValue;

use crate::extract::fanout::Order;
use crate::scheme::Kind;

/// One item of a region's answer.
#[derive(Debug, Clone)]
pub struct Item<'b> {
    /// The id's creation time, in ms since the Unix epoch.
    pub created_ms: u64,
    /// The id's canonical text (docs/schemes.md), whatever form the region wrote it in.
    pub id: String,
    /// The item as the region sent it.
    pub raw: &'b RawValue,
}

impl Item<'_> {
    /// The sort key: (creation time, canonical id text).
    fn key(&self) -> (u64, &str) {
        (self.created_ms, &self.id)
    }
}

/// Why a region's answer gives no items (the region is then named as failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItemsError {
    /// The body is not JSON: serde_json's message.
    NotJson(String),
    /// Nothing, or no array, at the `items` pointer.
    NoArray,
    /// An item whose id is missing, does not parse, or carries no time.
    BadId {
        /// The item's index in the region's array.
        index: usize,
        /// The id member (a string's text, else its JSON), at most 80 characters, when there
        /// is one.
        id: Option<String>,
        /// Why.
        reason: String,
    },
}

impl ItemsError {
    /// What a page's `regions` calls it.
    pub fn leg_error(&self) -> super::leg::LegError {
        use super::leg::LegError;
        match self {
            ItemsError::NotJson(_) => LegError::NotJson,
            ItemsError::NoArray => LegError::NoItemsArray,
            ItemsError::BadId { .. } => LegError::BadId,
        }
    }
}

impl fmt::Display for ItemsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ItemsError::NotJson(m) => write!(f, "the answer is not JSON: {m}"),
            ItemsError::NoArray => f.write_str("the answer has no array at the items pointer"),
            ItemsError::BadId {
                index,
                id: Some(id),
                reason,
            } => write!(f, "item {index}, id {id}: {reason}"),
            ItemsError::BadId {
                index,
                id: None,
                reason,
            } => write!(f, "item {index}: {reason}"),
        }
    }
}

/// A cursor: the sort key of the id a page ended on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The id's creation time, in ms since the Unix epoch.
    pub created_ms: u64,
    /// Its canonical text.
    pub id: String,
}

impl Cursor {
    /// The cursor of an id's text under `kind`.
    ///
    /// Errors: the text is not an id of the scheme, or its id carries no time.
    pub fn parse(kind: &Kind, text: &str) -> Result<Cursor, String> {
        let (created_ms, id) = sort_key(kind, text.trim().as_bytes())?;
        Ok(Cursor { created_ms, id })
    }
}

fn sort_key(kind: &Kind, text: &[u8]) -> Result<(u64, String), String> {
    let key = kind.parse(text).map_err(|e| e.to_string())?;
    let created_ms = kind
        .created_ms(&key)
        .ok_or_else(|| format!("the id {key} carries no creation time"))?;
    Ok((created_ms, key.to_string()))
}

/// The items of one region's answer `body`: the array at the RFC 6901 `pointer`, each
/// item's id read from its `id_field` member (a string, or a number for integer schemes) and
/// parsed with `kind`. At most `keep` items are kept: the first `keep` in `order`.
///
/// Errors: [`ItemsError`]; an answer with any bad item is refused whole, since a page that
/// silently skipped items would break paging.
pub fn items<'b>(
    body: &'b str,
    pointer: &str,
    id_field: &str,
    kind: &Kind,
    order: Order,
    keep: usize,
) -> Result<Vec<Item<'b>>, ItemsError> {
    // The walk to the array validates what it passes and the array is read whole below; only
    // when either fails is the whole body checked, to tell "not JSON" from "no array".
    let found = at_pointer_in(body, pointer)
        .and_then(|array| serde_json::from_str::<Vec<&RawValue>>(array.get()).ok());
    let Some(raws) = found else {
        return Err(match serde_json::from_str::<&RawValue>(body) {
            Err(e) => ItemsError::NotJson(e.to_string()),
            Ok(_) => ItemsError::NoArray,
        });
    };
    let mut out = Vec::with_capacity(raws.len());
    for (index, raw) in raws.into_iter().enumerate() {
        let Some(id) = member(raw, id_field) else {
            return Err(ItemsError::BadId {
                index,
                id: None,
                reason: format!("no `{id_field}` member"),
            });
        };
        let text = id_text(id);
        let written: String = text
            .as_deref()
            .unwrap_or(id.get())
            .chars()
            .take(80)
            .collect();
        let bad = |reason: String| ItemsError::BadId {
            index,
            id: Some(written),
            reason,
        };
        let Some(text) = text else {
            return Err(bad(format!("`{id_field}` is not a string or a number")));
        };
        let (created_ms, id) = sort_key(kind, text.as_bytes()).map_err(bad)?;
        out.push(Item {
            created_ms,
            id,
            raw,
        });
    }
    if out.len() > keep {
        sort(&mut out, order);
        out.truncate(keep);
    }
    Ok(out)
}

/// A merged page: its items, and whether there may be more after the last.
#[derive(Debug, Clone)]
pub struct Page<'b> {
    /// At most `limit` items in order, each id once.
    pub items: Vec<Item<'b>>,
    /// Some region returned a full page, or the merge had more than `limit` items: the last
    /// item's id is the next cursor.
    pub more: bool,
}

/// Merges the regions' items into one page of at most `limit` items in `order`, after
/// `cursor` (strictly: an item with the cursor's own key was on the previous page), each id
/// once.
///
/// A region that returned `limit` items may hold more beyond its last one, which the page
/// cannot see; so the page stops at the *horizon*, the nearest last item of such a region
/// (as a merge sort over shards stops where a shard's stream is cut). With distinct ids per
/// region the top `limit` always lie within it; the horizon keeps paging exact even when a
/// region repeats an id within its own answer.
pub fn merge<'b>(
    regions: Vec<Vec<Item<'b>>>,
    order: Order,
    cursor: Option<&Cursor>,
    limit: usize,
) -> Page<'b> {
    // Keys compared so that "earlier on the page" is smaller, whatever the order.
    let rank = |a: (u64, &str), b: (u64, &str)| match order {
        Order::Desc => b.cmp(&a),
        Order::Asc => a.cmp(&b),
    };
    let mut horizon: Option<(u64, String)> = None;
    for list in regions.iter().filter(|l| l.len() >= limit) {
        let last = list.iter().map(Item::key).max_by(|a, b| rank(*a, *b));
        if let Some(last) = last {
            let nearer = horizon
                .as_ref()
                .is_none_or(|h| rank(last, (h.0, h.1.as_str())).is_lt());
            if nearer {
                horizon = Some((last.0, last.1.to_owned()));
            }
        }
    }
    let full = horizon.is_some();
    let mut all: Vec<Item<'b>> = regions.into_iter().flatten().collect();
    all.retain(|item| {
        let beyond_cursor = cursor.is_none_or(|c| rank(item.key(), (c.created_ms, &c.id)).is_gt());
        let within = horizon
            .as_ref()
            .is_none_or(|h| rank(item.key(), (h.0, h.1.as_str())).is_le());
        beyond_cursor && within
    });
    sort(&mut all, order);
    // Equal ids have equal keys, so duplicates are neighbours.
    all.dedup_by(|a, b| a.id == b.id);
    let more = full || all.len() > limit;
    all.truncate(limit);
    Page { items: all, more }
}

fn sort(items: &mut [Item<'_>], order: Order) {
    match order {
        Order::Desc => items.sort_unstable_by(|a, b| b.key().cmp(&a.key())),
        Order::Asc => items.sort_unstable_by(|a, b| a.key().cmp(&b.key())),
    }
}

/// An id member's text: a JSON string's content, or a number's digits.
fn id_text(raw: &RawValue) -> Option<String> {
    let text = raw.get();
    match text.as_bytes().first()? {
        b'"' => match serde_json::from_str::<&str>(text) {
            Ok(plain) => Some(plain.to_owned()),
            // Escapes: decoded into a new string.
            Err(_) => serde_json::from_str::<String>(text).ok(),
        },
        b'0'..=b'9' => Some(text.to_owned()),
        _ => None,
    }
}

/// The value at an RFC 6901 pointer (`~1` is `/`, `~0` is `~`) in a JSON text; `None` if the
/// text is not one JSON value, or the pointer leads nowhere.
fn at_pointer_in<'b>(body: &'b str, pointer: &str) -> Option<&'b RawValue> {
    if pointer.is_empty() {
        return serde_json::from_str(body).ok();
    }
    let mut tokens = pointer.strip_prefix('/')?.split('/');
    let first = tokens.next()?.replace("~1", "/").replace("~0", "~");
    // The root's other members are skipped (validated, not decoded); bytes after the root
    // make the answer no JSON.
    let mut de = serde_json::Deserializer::from_str(body);
    let mut current: &'b RawValue = match body.trim_start().as_bytes().first()? {
        b'{' => de.deserialize_map(Member(&first)).ok().flatten()?,
        b'[' => {
            let list: Vec<&'b RawValue> = serde::Deserialize::deserialize(&mut de).ok()?;
            list.get(first.parse::<usize>().ok()?)?
        }
        _ => return None,
    };
    de.end().ok()?;
    for token in tokens {
        let token = token.replace("~1", "/").replace("~0", "~");
        current = match current.get().as_bytes().first()? {
            b'{' => member(current, &token)?,
            b'[' => {
                let index: usize = token.parse().ok()?;
                let list: Vec<&'b RawValue> = serde_json::from_str(current.get()).ok()?;
                *list.get(index)?
            }
            _ => return None,
        };
    }
    Some(current)
}

/// Member `name` of a JSON object, borrowed; `None` if absent or not an object.
fn member<'b>(object: &'b RawValue, name: &str) -> Option<&'b RawValue> {
    let mut de = serde_json::Deserializer::from_str(object.get());
    de.deserialize_map(Member(name)).ok().flatten()
}

/// Finds one member of an object, skipping the others' values without decoding them.
struct Member<'n>(&'n str);

impl<'de> Visitor<'de> for Member<'_> {
    type Value = Option<&'de RawValue>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut found = None;
        while let Some(hit) = map.next_key_seed(KeyIs(self.0))? {
            if hit && found.is_none() {
                found = Some(map.next_value::<&'de RawValue>()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Whether a key equals the wanted name (escaped keys are decoded first).
struct KeyIs<'n>(&'n str);

impl<'de> DeserializeSeed<'de> for KeyIs<'_> {
    type Value = bool;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyIs<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a member name")
    }

    fn visit_str<E>(self, v: &str) -> Result<bool, E> {
        Ok(v == self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "017f22e2-79b0-802a-8144-dc0c0c07398f";

    fn iuid_at(ms: u64, n: u16) -> String {
        iuid::Iuid::from_fields(ms, 3, 1, u64::from(n)).to_string()
    }

    #[test]
    fn items_are_borrowed_as_sent_through_a_pointer() {
        let body = format!(
            r#"{{"data": {{"a/b": [{{"name": "x", "id": "{A}", "z": [1, {{"id": 2}}]}}]}}}}"#
        );
        let got = items(&body, "/data/a~1b", "id", &Kind::Iuid, Order::Desc, 10).expect("items");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].id, A);
        assert!(got[0].raw.get().starts_with(r#"{"name": "x""#));
    }

    #[test]
    fn every_failure_is_named() {
        let k = Kind::Iuid;
        let e = |body: &str| {
            items(body, "/items", "id", &k, Order::Desc, 10)
                .map(|_| ())
                .expect_err("bad")
        };
        assert!(matches!(e("<html>"), ItemsError::NotJson(_)));
        assert_eq!(e(r#"{"items": {}}"#), ItemsError::NoArray);
        assert_eq!(e(r#"{"other": []}"#), ItemsError::NoArray);
        assert!(matches!(
            e(r#"{"items": [{"id": "nope"}]}"#),
            ItemsError::BadId { index: 0, .. }
        ));
        assert!(matches!(
            e(r#"{"items": [{"x": 1}]}"#),
            ItemsError::BadId { index: 0, .. }
        ));
        // A UUIDv4 has no time to order by.
        let v4 = r#"{"items": [{"id": "9b2e4c1a-7d3f-4e8b-a6c5-0f1e2d3c4b5a"}]}"#;
        assert!(matches!(e(v4), ItemsError::BadId { index: 0, .. }));
    }

    #[test]
    fn merge_orders_dedupes_and_respects_the_cursor() {
        let ids: Vec<String> = (0..6)
            .map(|i| iuid_at(1_700_000_000_000 + i / 2, i as u16))
            .collect();
        let body = |picks: &[usize]| {
            let list: Vec<String> = picks
                .iter()
                .map(|&i| format!(r#"{{"id":"{}"}}"#, ids[i]))
                .collect();
            format!(r#"{{"items":[{}]}}"#, list.join(","))
        };
        let (a, b) = (body(&[0, 2, 4]), body(&[1, 2, 5, 3]));
        let parse = |s: &'static str| {
            items(s, "/items", "id", &Kind::Iuid, Order::Desc, 10).expect("items")
        };
        let (a, b): (&'static str, &'static str) =
            (Box::leak(a.into_boxed_str()), Box::leak(b.into_boxed_str()));
        let page = merge(vec![parse(a), parse(b)], Order::Desc, None, 4);
        assert!(page.more);
        let got: Vec<&str> = page.items.iter().map(|i| i.id.as_str()).collect();
        let mut want: Vec<&str> = ids.iter().map(String::as_str).collect();
        want.sort_by_key(|id| {
            std::cmp::Reverse(
                Cursor::parse(&Kind::Iuid, id)
                    .map(|c| (c.created_ms, c.id))
                    .ok(),
            )
        });
        assert_eq!(got, want[..4]);
        let cursor = Cursor::parse(&Kind::Iuid, got[3]).expect("cursor");
        // The regions answer the next page with their items before the cursor.
        let (a2, b2) = (body(&[0]), body(&[1]));
        let (a2, b2): (&'static str, &'static str) = (
            Box::leak(a2.into_boxed_str()),
            Box::leak(b2.into_boxed_str()),
        );
        let next = merge(vec![parse(a2), parse(b2)], Order::Desc, Some(&cursor), 4);
        let rest: Vec<&str> = next.items.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(rest, want[4..]);
        assert!(!next.more);
        let asc = merge(vec![parse(a), parse(b)], Order::Asc, None, 10);
        assert_eq!(asc.items.len(), 6);
        assert!(asc.items.windows(2).all(|w| w[0].key() < w[1].key()));
        // A region that fills its page repeats an id: the page stops at its last item, so
        // the item it had no room for is not skipped by the next cursor.
        let (r1, r2) = (body(&[5, 5, 4]), body(&[3, 2]));
        let (r1, r2): (&'static str, &'static str) = (
            Box::leak(r1.into_boxed_str()),
            Box::leak(r2.into_boxed_str()),
        );
        let read3 =
            |s: &'static str| items(s, "/items", "id", &Kind::Iuid, Order::Desc, 3).expect("items");
        let page = merge(vec![read3(r1), read3(r2)], Order::Desc, None, 3);
        let got: Vec<&str> = page.items.iter().map(|i| i.id.as_str()).collect();
        assert_eq!(got, vec![ids[5].as_str(), ids[4].as_str()]);
        assert!(page.more);
    }
}
