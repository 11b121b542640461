//! Request ids: `x-request-id` taken from the client when it is sane, made here otherwise;
//! sent upstream and returned to the client, so one id follows a request through every hop
//! and every log line (the convention of nginx's `$request_id` and Envoy). Taken once per
//! request, whatever its protocol, by `life::Life::begin`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// `x-request-id`.
pub static HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Longest client-sent id kept; longer ones are replaced (they would bloat every log line).
const MAX_LEN: usize = 128;

/// A request's id, kept on the stack: 1–128 bytes of `[A-Za-z0-9._:-]` (ASCII).
pub struct RequestId {
    bytes: [u8; MAX_LEN],
    len: usize,
}

impl RequestId {
    /// The client's `x-request-id` (`sent`, its first line) if it is sane ([`is_sane`]),
    /// else a fresh one (32 hex digits: a random per-process prefix and a counter). With
    /// several lines the first is judged; every line is then replaced by the id kept
    /// (`stamp`, or the head path's header rules), so no unchecked line rides along behind a
    /// sane one.
    pub fn of(sent: Option<&[u8]>) -> RequestId {
        match sent {
            Some(kept) if is_sane(kept) => {
                let mut id = RequestId {
                    bytes: [0; MAX_LEN],
                    len: kept.len(),
                };
                id.bytes[..kept.len()].copy_from_slice(kept);
                id
            }
            _ => RequestId::fresh(),
        }
    }

    /// A fresh id, for a request whose head could not be read.
    pub fn fresh() -> RequestId {
        let mut id = RequestId {
            bytes: [0; MAX_LEN],
            len: 32,
        };
        id.bytes[..32].copy_from_slice(&make_bytes());
        id
    }

    /// The id's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }

    /// The id as text for logs and spans.
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(self.as_bytes()).unwrap_or("-")
    }

    /// Sets the id as the one `x-request-id` line of `headers` (a request's in `http` form)
    /// and returns it, for the answer. The client's own value is reused when it is the id.
    pub fn stamp(&self, headers: &mut HeaderMap) -> HeaderValue {
        let mut lines = headers.get_all(&HEADER).iter();
        if let (Some(sent), None) = (lines.next(), lines.next()) {
            if sent.as_bytes() == self.as_bytes() {
                return sent.clone();
            }
        }
        // Only sane bytes are kept or made.
        let value =
            HeaderValue::from_bytes(self.as_bytes()).unwrap_or(HeaderValue::from_static("0"));
        headers.insert(HEADER.clone(), value.clone());
        value
    }
}

/// Whether a client's id is kept: 1–128 characters of `[A-Za-z0-9._:-]`. Anything else
/// (`/`, `%`, quotes, spaces) could forge a path or a log field downstream, so it is replaced
/// rather than passed on.
pub fn is_sane(b: &[u8]) -> bool {
    !b.is_empty() && b.len() <= MAX_LEN && b.iter().all(|&c| sane(c))
}

/// A byte a client's request id may hold.
fn sane(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':' | b'-')
}

/// A fresh id: 32 hex digits, a random per-process prefix and a counter (no allocation).
pub fn make_bytes() -> [u8; 32] {
    static PREFIX: OnceLock<[u8; 16]> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let hex16 = |word: u64| {
        let mut out = [0u8; 16];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = HEX[((word >> (60 - 4 * i)) & 0xf) as usize];
        }
        out
    };
    // The prefix's text is made once: only the counter's is made per request.
    let prefix = PREFIX.get_or_init(|| {
        // Any process-unique value will do; a minted iUID's random bits are one at hand.
        hex16(iuid::Generator::new(0, 0).mint().rand())
    });
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut buf = [0u8; 32];
    buf[..16].copy_from_slice(prefix);
    buf[16..].copy_from_slice(&hex16(n));
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(values: &[&str]) -> (RequestId, HeaderMap) {
        let mut req = http::Request::new(());
        for v in values {
            req.headers_mut()
                .append(HEADER.clone(), HeaderValue::from_str(v).expect("value"));
        }
        let (mut parts, ()) = req.into_parts();
        let id = RequestId::of(parts.headers.get(&HEADER).map(HeaderValue::as_bytes));
        id.stamp(&mut parts.headers);
        (id, parts.headers)
    }

    #[test]
    fn keeps_sane_ids_and_replaces_others() {
        let (kept, h) = id_of(&["abc-123"]);
        assert_eq!(kept.as_str(), "abc-123");
        assert_eq!(h[&HEADER], "abc-123");
        let (made, h) = id_of(&["has space"]);
        assert_eq!(made.as_bytes().len(), 32);
        assert_eq!(h[&HEADER].as_bytes(), made.as_bytes());
        let (next, _) = id_of(&[]);
        assert_ne!(made.as_str(), next.as_str());
        for forged in [
            "../../etc/passwd%0d%0a",
            "a/b",
            "a\"b",
            "x".repeat(129).as_str(),
        ] {
            assert_ne!(id_of(&[forged]).0.as_str(), forged);
        }
        assert_eq!(id_of(&["trace-1.2:3_x"]).0.as_str(), "trace-1.2:3_x");
        // The first line is judged, and the only one that goes on.
        let (first, h) = id_of(&["one", "two"]);
        assert_eq!(first.as_str(), "one");
        assert_eq!(h.get_all(&HEADER).iter().count(), 1);
    }
}
