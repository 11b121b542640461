//! The answer of a fan-out route (docs/fanout.md): `{"items", "next_cursor", "partial", "regions"}`.

use serde::Serialize;

use super::leg::LegError;
use super::merge::Item;

/// How one region answered, as the page's `regions` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum RegionReport {
    /// A usable answer: its status and how many items it gave.
    Answered {
        /// The region's HTTP status.
        status: u16,
        /// Items in its answer.
        items: usize,
        /// The failover region that answered in its place (docs/failover.md), with
        /// `"failover": true` beside it.
        #[serde(skip_serializing_if = "Option::is_none")]
        served_by: Option<String>,
        /// Whether `served_by` answered (omitted when the region did).
        #[serde(skip_serializing_if = "std::ops::Not::not")]
        failover: bool,
    },
    /// The region failed.
    Failed {
        /// What failed.
        error: LegError,
        /// The region's status, for `status`.
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<u16>,
        /// For `status`: the `type` of the region's problem+json answer (RFC 9457), if it
        /// gave one.
        #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
        problem_type: Option<String>,
        /// For `bad_id`: the index of the item in the region's array.
        #[serde(skip_serializing_if = "Option::is_none")]
        index: Option<usize>,
        /// For `bad_id`: the id as the region wrote it (a string's text, else its JSON; at most
        /// 80 characters).
        #[serde(skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// A sentence for people.
        detail: String,
    },
}

impl RegionReport {
    /// Whether the region failed.
    pub fn failed(&self) -> bool {
        matches!(self, RegionReport::Failed { .. })
    }
}

/// The page's JSON: the merged items verbatim, `next_cursor` (the last item's id when there
/// may be `more`, else `null`: every region has been read to its end), `partial`, and each
/// region's report in `regions` (by region name).
pub fn render(items: &[Item<'_>], more: bool, regions: &[(&str, RegionReport)]) -> Vec<u8> {
    let body_len: usize = items.iter().map(|i| i.raw.get().len() + 1).sum();
    let mut out = Vec::with_capacity(body_len + 128 + regions.len() * 64);
    out.extend_from_slice(b"{\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item.raw.get().as_bytes());
    }
    out.extend_from_slice(b"],\"next_cursor\":");
    let next = items.last().filter(|_| more).map(|i| i.id.as_str());
    // Writing to a Vec cannot fail, and these values always serialize.
    let _ = serde_json::to_writer(&mut out, &next);
    let partial = regions.iter().any(|(_, r)| r.failed());
    out.extend_from_slice(if partial {
        b",\"partial\":true,\"regions\":{"
    } else {
        b",\"partial\":false,\"regions\":{"
    });
    for (i, (name, report)) in regions.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let _ = serde_json::to_writer(&mut out, name);
        out.push(b':');
        let _ = serde_json::to_writer(&mut out, report);
    }
    out.extend_from_slice(b"}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_of_a_page() {
        let raw: &serde_json::value::RawValue =
            serde_json::from_str(r#"{"id": "x", "b": 1}"#).expect("raw");
        let items = [Item {
            created_ms: 1,
            id: "x".into(),
            raw,
        }];
        let regions = [
            (
                "eu",
                RegionReport::Answered {
                    status: 200,
                    items: 1,
                    served_by: None,
                    failover: false,
                },
            ),
            (
                "us",
                RegionReport::Failed {
                    error: LegError::Timeout,
                    status: None,
                    problem_type: None,
                    index: None,
                    id: None,
                    detail: "no answer within 2000 ms".into(),
                },
            ),
        ];
        let page: serde_json::Value =
            serde_json::from_slice(&render(&items, true, &regions)).expect("json");
        assert_eq!(page["next_cursor"], "x");
        assert_eq!(page["partial"], true);
        assert_eq!(page["items"][0]["b"], 1);
        assert_eq!(page["regions"]["eu"]["items"], 1);
        assert_eq!(page["regions"]["us"]["error"], "timeout");
        let last: serde_json::Value =
            serde_json::from_slice(&render(&items, false, &regions[..1])).expect("json");
        assert_eq!(last["next_cursor"], serde_json::Value::Null);
        assert_eq!(last["partial"], false);
    }
}
