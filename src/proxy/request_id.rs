//! Request ids: `x-request-id` taken from the client when it is sane, made here otherwise;
//! sent upstream and returned to the client, so one id follows a request through every hop
//! and every log line (the convention of nginx's `$request_id` and Envoy).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use http::header::{HeaderMap, HeaderName, HeaderValue};

/// `x-request-id`.
pub static HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// Longest client-sent id kept; longer ones are replaced (they would bloat every log line).
const MAX_LEN: usize = 128;

/// The request's id: the client's `x-request-id` if it is 1–128 characters of
/// `[A-Za-z0-9._:-]` (what request ids are made of: UUIDs, hex, trace ids), else a fresh one
/// (32 hex digits: a random per-process prefix and a counter). The header is set on
/// `headers`, so it goes upstream.
///
/// Exactly one line goes upstream: with several `x-request-id` lines the first is judged and
/// every line replaced by the id kept, so no unchecked line rides along behind a sane one.
pub fn take_or_make(headers: &mut HeaderMap) -> HeaderValue {
    let mut lines = headers.get_all(&HEADER).iter();
    let kept = lines.next().filter(|v| is_sane(v.as_bytes()));
    match (kept, lines.next()) {
        (Some(v), None) => v.clone(),
        (Some(v), Some(_)) => {
            let id = v.clone();
            headers.insert(HEADER.clone(), id.clone());
            id
        }
        (None, _) => {
            let id = make();
            headers.insert(HEADER.clone(), id.clone());
            id
        }
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

/// The id as text for logs (ids are checked to be ASCII).
pub fn as_str(id: &HeaderValue) -> &str {
    id.to_str().unwrap_or("-")
}

fn make() -> HeaderValue {
    // Only hex digits are made.
    HeaderValue::from_bytes(&make_bytes()).unwrap_or(HeaderValue::from_static("0"))
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

    #[test]
    fn keeps_sane_ids_and_replaces_others() {
        let mut h = HeaderMap::new();
        h.insert(HEADER.clone(), HeaderValue::from_static("abc-123"));
        assert_eq!(take_or_make(&mut h), "abc-123");
        h.insert(HEADER.clone(), HeaderValue::from_static("has space"));
        let made = take_or_make(&mut h);
        assert_eq!(made.len(), 32);
        assert_eq!(h[&HEADER], made);
        let next = take_or_make(&mut HeaderMap::new());
        assert_ne!(made, next);
        for forged in [
            "../../etc/passwd%0d%0a",
            "a/b",
            "a\"b",
            "x".repeat(129).as_str(),
        ] {
            h.insert(
                HEADER.clone(),
                HeaderValue::from_str(forged).expect("value"),
            );
            assert_ne!(take_or_make(&mut h), forged);
        }
        h.insert(HEADER.clone(), HeaderValue::from_static("trace-1.2:3_x"));
        assert_eq!(take_or_make(&mut h), "trace-1.2:3_x");
    }
}
