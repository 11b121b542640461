//! W3C Trace Context (<https://www.w3.org/TR/trace-context/>): the `traceparent` field read
//! from a request and written on the one going upstream, without allocating.
//!
//! `traceparent: 00-<trace-id: 32 hex>-<parent-id: 16 hex>-<trace-flags: 2 hex>`: lowercase
//! hex, neither id all zeros, version `ff` invalid. A later version may append fields after
//! a `-` (§3.2.4: read the first four as version 00's); version `00` is exactly 55 bytes.

use opentelemetry::trace::{SpanId, TraceFlags, TraceId};

/// The length of a version-00 `traceparent` value, in bytes.
pub const TRACEPARENT_LEN: usize = 55;

/// `traceparent: `, before the value on its field line.
const LINE_NAME: &[u8; 13] = b"traceparent: ";

/// The length of a `traceparent` field line as an HTTP/1.1 head carries it, in bytes:
/// `traceparent: <value>\r\n`.
pub const TRACEPARENT_LINE_LEN: usize = LINE_NAME.len() + TRACEPARENT_LEN + 2;

/// A version-00 `traceparent` as sent: its whole field line (ASCII), so that an HTTP/1.1
/// head takes it in one copy and `http` parts take [`Traceparent::value`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Traceparent([u8; TRACEPARENT_LINE_LEN]);

impl Traceparent {
    /// The value: 55 bytes, `00-{trace}-{span}-{flags}`.
    pub fn value(&self) -> &[u8] {
        &self.0[LINE_NAME.len()..LINE_NAME.len() + TRACEPARENT_LEN]
    }

    /// The field line, `traceparent: {value}\r\n`.
    pub fn line(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Traceparent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.value()))
    }
}

/// A parsed `traceparent`: the caller's trace, its span (the parent id), and its flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    /// The trace id, never all zeros.
    pub trace_id: TraceId,
    /// The caller's span id, never all zeros.
    pub span_id: SpanId,
    /// Bit 0: the caller sampled it.
    pub flags: TraceFlags,
}

/// Reads a `traceparent` value (W3C Trace Context §3.2). `None`: it is not one (wrong length,
/// uppercase or non-hex digits, an id of zeros, version `ff`, version 00 with more after it).
pub fn parse(value: &[u8]) -> Option<Parent> {
    if value.len() < TRACEPARENT_LEN {
        return None;
    }
    let version = hex_byte(&value[0..2])?;
    let longer = value.len() > TRACEPARENT_LEN;
    if version == 0xff || (version == 0 && longer) || (longer && value[TRACEPARENT_LEN] != b'-') {
        return None;
    }
    if value[2] != b'-' || value[35] != b'-' || value[52] != b'-' {
        return None;
    }
    let mut trace = [0u8; 16];
    for (i, byte) in trace.iter_mut().enumerate() {
        *byte = hex_byte(&value[3 + 2 * i..5 + 2 * i])?;
    }
    let mut span = [0u8; 8];
    for (i, byte) in span.iter_mut().enumerate() {
        *byte = hex_byte(&value[36 + 2 * i..38 + 2 * i])?;
    }
    let flags = hex_byte(&value[53..55])?;
    if trace == [0; 16] || span == [0; 8] {
        return None;
    }
    Some(Parent {
        trace_id: TraceId::from_bytes(trace),
        span_id: SpanId::from_bytes(span),
        // Only the sampled bit is defined; the others are passed on as 0 (§3.2.2.5).
        flags: TraceFlags::new(flags & 1),
    })
}

/// Writes the version-00 `traceparent` of a span: `00-{trace}-{span}-{flags}`.
pub fn format(trace_id: TraceId, span_id: SpanId, sampled: bool) -> Traceparent {
    let trace = u128::from_be_bytes(trace_id.to_bytes());
    let span = u64::from_be_bytes(span_id.to_bytes());
    let mut line = Traceparent::BLANK;
    line.set_ids(
        &hex16((trace >> 64) as u64),
        &hex16(trace as u64),
        &hex16(span),
    );
    line.0[VALUE + 54] = if sampled { b'1' } else { b'0' };
    line
}

/// Where the value starts on the line.
const VALUE: usize = LINE_NAME.len();

impl Traceparent {
    /// `traceparent: 00-{32 zeros}-{16 zeros}-00\r\n`: the line with its ids to write and
    /// not sampled.
    pub const BLANK: Traceparent = {
        let mut line = [b'0'; TRACEPARENT_LINE_LEN];
        let mut i = 0;
        while i < VALUE {
            line[i] = LINE_NAME[i];
            i += 1;
        }
        line[VALUE + 2] = b'-';
        line[VALUE + 35] = b'-';
        line[VALUE + 52] = b'-';
        line[VALUE + 55] = b'\r';
        line[VALUE + 56] = b'\n';
        Traceparent(line)
    };

    /// Writes the ids of a request that is not sampled into a [`Traceparent::BLANK`] in
    /// place, in fewer instructions than `format` (callgrind: 134 → 74 a request), as nobody
    /// reads them as numbers: `high`, the trace id's first 16 digits (the adopted parent's,
    /// or `random_digits`); `low`, the trace id's low 64 bits, whose value the ratio sampler
    /// compared (written exactly); `span`, 64 random bits, not 0, made digits by
    /// `random_digits`.
    pub fn set_unsampled(&mut self, high: &[u8; 16], low: u64, span: u64) {
        self.set_ids(high, &hex16(low), &random_digits(span));
    }

    fn set_ids(&mut self, high: &[u8; 16], low: &[u8; 16], span: &[u8; 16]) {
        self.0[VALUE + 3..VALUE + 19].copy_from_slice(high);
        self.0[VALUE + 19..VALUE + 35].copy_from_slice(low);
        self.0[VALUE + 36..VALUE + 52].copy_from_slice(span);
    }
}

/// The first 16 digits of a valid `traceparent`'s trace id (one [`parse`] accepted), as
/// [`Traceparent::set_unsampled`] takes them.
pub fn trace_high_digits(value: &[u8]) -> Option<[u8; 16]> {
    value.get(3..19)?.try_into().ok()
}

/// 16 hex digits from 64 random bits, one nibble each, in an order that is not the bits'
/// (so the digits' value is a permutation of `bits`: 0 only when `bits` is). Two masks and
/// no spreading: a third of [`hex16`]'s instructions.
pub fn random_digits(bits: u64) -> [u8; 16] {
    let mut out = [0; 16];
    out[..8].copy_from_slice(&digits(bits & every_byte(0x0F)));
    out[8..].copy_from_slice(&digits(bits >> 4 & every_byte(0x0F)));
    out
}

/// The 16 lowercase hex digits of `x`, most significant first.
fn hex16(x: u64) -> [u8; 16] {
    let mut out = [0; 16];
    out[..8].copy_from_slice(&hex8((x >> 32) as u32));
    out[8..].copy_from_slice(&hex8(x as u32));
    out
}

/// The 8 lowercase hex digits of `x`, most significant first, computed in one word: each
/// nibble spread into a byte of its own, then made a digit.
fn hex8(x: u32) -> [u8; 8] {
    let mut n = u64::from(x);
    n = (n | n << 16) & 0x0000_FFFF_0000_FFFF;
    n = (n | n << 8) & 0x00FF_00FF_00FF_00FF;
    n = (n | n << 4) & every_byte(0x0F);
    digits(n)
}

/// Eight bytes of nibbles (0 to 15 each) as their lowercase hex digits, the most
/// significant byte first.
fn digits(nibbles: u64) -> [u8; 8] {
    // A nibble over 9 carries into bit 4 when 6 is added.
    let letters = ((nibbles + every_byte(6)) >> 4) & every_byte(1);
    (nibbles + every_byte(b'0') + letters * u64::from(b'a' - b'0' - 10)).to_be_bytes()
}

const fn every_byte(b: u8) -> u64 {
    u64::from_ne_bytes([b; 8])
}

/// Two lowercase hex digits as a byte.
fn hex_byte(two: &[u8]) -> Option<u8> {
    Some(digit(two[0])? << 4 | digit(two[1])?)
}

fn digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        _ => None,
    }
}

/// The most bytes of a `tracestate` a vendor must propagate (§3.3.1.5), counting the commas
/// between list members but not optional whitespace: beyond, it may truncate.
pub const TRACESTATE_BYTES: usize = 512;
/// The most list members of a `tracestate` (§3.3.1.1).
pub const TRACESTATE_MEMBERS: usize = 32;
/// A list member longer than this is the first dropped when a `tracestate` is truncated
/// (§3.3.1.5).
const TRACESTATE_LONG_MEMBER: usize = 128;

/// `value` as it may go on as `tracestate` (W3C Trace Context §3.3): `None` when it is not
/// one (a byte other than visible ASCII, space or tab; nothing but empty members), dropped
/// whole. Within the limits of §3.3.1.5 (at most 512 bytes, 32 list members), as it came,
/// borrowed. Beyond them, truncated as §3.3.1.5 says a vendor may: whole list members
/// dropped, never one cut, never the field whole: to 32 members from the right, then,
/// while over 512 bytes, members longer than 128 bytes (the right-most first), then members
/// from the right; what is kept is written with `,` between members and no optional
/// whitespace.
pub fn tracestate_within_limits(value: &[u8]) -> Option<std::borrow::Cow<'_, [u8]>> {
    let mut commas = 0usize;
    for &b in value {
        if b != b'\t' && !(b' '..=b'~').contains(&b) {
            return None;
        }
        commas += usize::from(b == b',');
    }
    // At most 32 members (some may be empty) in at most 512 bytes: within the limits as it
    // came, whatever its whitespace.
    if value.len() <= TRACESTATE_BYTES && commas < TRACESTATE_MEMBERS {
        return match value.iter().all(|&b| matches!(b, b' ' | b'\t' | b',')) {
            true => None,
            false => Some(std::borrow::Cow::Borrowed(value)),
        };
    }
    let mut members: Vec<&[u8]> = value
        .split(|&b| b == b',')
        .map(|m| m.trim_ascii())
        .filter(|m| !m.is_empty())
        .collect();
    members.truncate(TRACESTATE_MEMBERS);
    let size = |members: &[&[u8]]| {
        members.iter().map(|m| m.len()).sum::<usize>() + members.len().saturating_sub(1)
    };
    while size(&members) > TRACESTATE_BYTES {
        match members
            .iter()
            .rposition(|m| m.len() > TRACESTATE_LONG_MEMBER)
        {
            Some(long) => members.remove(long),
            None => members.pop()?,
        };
    }
    if members.is_empty() {
        return None;
    }
    Some(std::borrow::Cow::Owned(members.join(&b',')))
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: &[u8] = b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn the_specifications_example_reads_and_writes_back() {
        let p = parse(VALID).expect("valid");
        assert!(p.flags.is_sampled());
        let written = format(p.trace_id, p.span_id, true);
        assert_eq!(written.value(), VALID);
        assert_eq!(written.line(), [b"traceparent: ", VALID, b"\r\n"].concat());
    }

    #[test]
    fn what_is_not_a_traceparent_is_refused() {
        let bad: [&[u8]; 10] = [
            b"",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",
            b"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            b"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            b"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            b"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            b"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ];
        for value in bad {
            assert_eq!(parse(value), None, "{}", String::from_utf8_lossy(value));
        }
    }

    #[test]
    fn a_later_version_is_read_as_version_00() {
        let later = b"cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes";
        assert!(parse(later).is_some());
    }

    #[test]
    fn an_unsampled_traceparent_keeps_the_parents_trace_and_the_low_half_exactly() {
        let high = trace_high_digits(VALID).expect("valid");
        let low = 0xa3ce929d0e0e4736;
        let mut written = Traceparent::BLANK;
        written.set_unsampled(&high, low, 0x0123_4567_89ab_cdef);
        let read = parse(written.value()).expect("valid");
        assert_eq!(read.trace_id, parse(VALID).expect("valid").trace_id);
        assert!(!read.flags.is_sampled());
        assert_eq!(&written.value()[36..52], b"13579bdf02468ace".as_slice());
    }

    /// `n` list members `k{i}=` with values of `len` bytes each (`len` + 3 or 4 bytes a
    /// member).
    fn members(from: usize, n: usize, len: usize) -> Vec<String> {
        (from..from + n)
            .map(|i| format!("k{i}={}", "v".repeat(len)))
            .collect()
    }

    #[test]
    fn a_tracestate_within_its_limits_goes_on_as_it_came_without_a_copy() {
        for value in [
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE".to_owned(),
            "rojo=1 ,\t congo=2".to_owned(),
            members(0, 32, 10).join(","),
            format!("k={}", "v".repeat(510)),
        ] {
            assert!(value.len() <= 512, "{}", value.len());
            match tracestate_within_limits(value.as_bytes()) {
                Some(std::borrow::Cow::Borrowed(kept)) => assert_eq!(kept, value.as_bytes()),
                other => panic!("{value}: {other:?}"),
            }
        }
    }

    #[test]
    fn what_is_not_a_tracestate_is_dropped_whole() {
        for value in [&b"rojo=1\x00"[..], b"rojo=\xc3\xa9", b"", b" , ,"] {
            assert_eq!(tracestate_within_limits(value), None, "{value:?}");
        }
    }

    #[test]
    fn over_512_bytes_the_right_most_members_go() {
        // 609 bytes: 10 members of 60 bytes and 9 commas; 8 of them fit in 512.
        let all = members(0, 10, 57);
        let value = all.join(",");
        let kept = tracestate_within_limits(value.as_bytes()).expect("kept");
        let kept = std::str::from_utf8(&kept).expect("ascii");
        assert!(value.len() > 512 && kept.len() <= 512, "{}", kept.len());
        // Whole members, from the left, as many as fit.
        let fit = all[..8].join(",");
        assert_eq!(kept, fit);
    }

    #[test]
    fn over_512_bytes_long_members_go_first() {
        // A member of 200 bytes in the middle: it goes, the rest stay.
        let long = format!("long={}", "l".repeat(195));
        let value = [members(0, 2, 100), vec![long], members(2, 2, 100)]
            .concat()
            .join(",");
        assert!(value.len() > 512);
        let kept = tracestate_within_limits(value.as_bytes()).expect("kept");
        let want = [members(0, 2, 100), members(2, 2, 100)].concat().join(",");
        assert_eq!(kept.as_ref(), want.as_bytes());
        // Two long ones: the right-most goes first, and is enough.
        let (a, b) = (
            "a=".to_owned() + &"a".repeat(198),
            "b=".to_owned() + &"b".repeat(198),
        );
        let value = [vec![a.clone()], members(0, 2, 100), vec![b]]
            .concat()
            .join(",");
        let kept = tracestate_within_limits(value.as_bytes()).expect("kept");
        let want = [vec![a], members(0, 2, 100)].concat().join(",");
        assert_eq!(kept.as_ref(), want.as_bytes());
    }

    #[test]
    fn over_32_members_the_right_most_go_and_whitespace_does_not_count() {
        let value = members(0, 40, 1).join(" , ");
        let kept = tracestate_within_limits(value.as_bytes()).expect("kept");
        assert_eq!(kept.as_ref(), members(0, 32, 1).join(",").as_bytes());
        // 559 bytes with its spaces, 289 without: kept whole, its whitespace dropped.
        let spaced = members(0, 10, 25).join(&format!("{},", " ".repeat(30)));
        assert!(spaced.len() > 512);
        let kept = tracestate_within_limits(spaced.as_bytes()).expect("kept");
        assert_eq!(kept.as_ref(), members(0, 10, 25).join(",").as_bytes());
    }

    proptest::proptest! {
        #[test]
        fn a_truncated_tracestate_is_whole_members_within_the_limits(
            lens in proptest::collection::vec(1usize..260, 0..50),
        ) {
            let all: Vec<String> = lens.iter().enumerate().map(|(i, len)| format!("k{i}={}", "v".repeat(*len))).collect();
            let value = all.join(",");
            let kept = tracestate_within_limits(value.as_bytes());
            if all.is_empty() {
                proptest::prop_assert!(kept.is_none());
                return Ok(());
            }
            let kept = kept.map(|k| String::from_utf8(k.into_owned()).expect("ascii")).unwrap_or_default();
            proptest::prop_assert!(kept.len() <= 512);
            let kept_members: Vec<&str> = kept.split(',').filter(|m| !m.is_empty()).collect();
            proptest::prop_assert!(kept_members.len() <= 32);
            // In their order, each one whole.
            let mut at = 0;
            for member in &kept_members {
                let found = all[at..].iter().position(|m| m == member);
                proptest::prop_assert!(found.is_some(), "{} not whole or out of order", member);
                at += found.unwrap_or(0) + 1;
            }
            if value.len() <= 512 && all.len() <= 32 {
                proptest::prop_assert_eq!(kept, value);
            }
        }

        #[test]
        fn random_digits_are_hex_and_zero_only_for_zero(bits: u64) {
            let digits = random_digits(bits);
            proptest::prop_assert!(digits.iter().all(|d| d.is_ascii_hexdigit() && !d.is_ascii_uppercase()));
            proptest::prop_assert_eq!(digits == [b'0'; 16], bits == 0);
        }

        #[test]
        fn any_bytes_parse_without_panic(value in proptest::collection::vec(proptest::num::u8::ANY, 0..80)) {
            let _ = parse(&value);
        }

        #[test]
        fn every_written_value_reads_back(trace in 1u128.., span in 1u64.., sampled: bool) {
            let written = format(TraceId::from(trace), SpanId::from(span), sampled);
            let read = parse(written.value()).expect("written values are valid");
            proptest::prop_assert_eq!(read.trace_id, TraceId::from(trace));
            proptest::prop_assert_eq!(read.span_id, SpanId::from(span));
            proptest::prop_assert_eq!(read.flags.is_sampled(), sampled);
        }
    }
}
