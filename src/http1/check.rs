//! The invariants the fuzz target (`fuzz/fuzz_targets/http1.rs`) and the corpus replay
//! (`tests/http1_corpus.rs`) check on any input, in one place so both check the same. Not
//! part of the codec: it panics on the first invariant broken.
//!
//! The input's first byte picks how a chunked body is split between `scan` calls; the rest is
//! a byte stream read three ways: as a request (head, framing, then a chunked body), as a
//! response (the same, for a `HEAD` request and for another), and as a chunked body on its
//! own. A chunked body is checked against a line-based reference decoder written for this
//! check alone, so a scanner that ends a body at another byte than the grammar says, or
//! accepts what it should refuse, fails.

use super::chunked::{Chunked, Progress, MAX_LINE, MAX_TRAILERS};
use super::framing::{request_framing, response_framing, Framing, FramingError};
use super::head::{parse_request, parse_response, Field, RequestHead, ResponseHead, Span};

/// Field lines the check parses heads with: small, so the limit is reached.
pub const MAX_FIELDS: usize = 16;
/// Head bytes the check parses heads with.
pub const MAX_HEAD: usize = 1024;

/// Checks every invariant on `data` (first byte: the split; the rest: the stream). Panics
/// on the first one broken.
pub fn check(data: &[u8]) {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    check_request(stream, seed);
    check_response(stream, seed);
    check_chunked(stream, seed);
}

fn tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A field value's or chunk extension's byte: HTAB, SP, visible, obs-text.
fn text(b: u8) -> bool {
    b == b'\t' || (b >= 0x20 && b != 0x7f)
}

/// `span` lies in `buf[..end]`, after `after`, and is not empty: its bytes.
fn inside<'b>(buf: &'b [u8], span: Span, after: u32, end: usize, what: &str) -> &'b [u8] {
    assert!(
        after <= span.start && span.start < span.end && span.end as usize <= end,
        "{what} {span:?} is not within {after}..{end}"
    );
    let bytes = span.of(buf);
    assert_eq!(bytes.len(), (span.end - span.start) as usize, "{what}");
    bytes
}

/// The field lines: in order, within the head, names tokens, values free of CR, LF and
/// controls. Returns the end of the last one.
fn check_fields(buf: &[u8], fields: &[Field], mut after: u32, len: usize) -> u32 {
    assert!(fields.len() <= MAX_FIELDS, "{} fields", fields.len());
    for field in fields {
        let name = inside(buf, field.name, after, len, "field name");
        assert!(name.iter().all(|&b| tchar(b)), "field name {name:?}");
        after = field.name.end;
        if field.value != Span::default() {
            let value = inside(buf, field.value, after, len, "field value");
            assert!(value.iter().all(|&b| text(b)), "field value {value:?}");
            after = field.value.end;
        }
    }
    after
}

fn values<'b>(buf: &'b [u8], fields: &'b [Field], name: &'b str) -> Vec<&'b [u8]> {
    super::head::all(buf, fields, name.as_bytes()).collect()
}

/// The comma-separated entries of `values`, trimmed, empty ones left out.
fn entries<'b>(values: &[&'b [u8]]) -> Vec<&'b [u8]> {
    values
        .iter()
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii)
        .filter(|e| !e.is_empty())
        .collect()
}

/// What a head's `Content-Length` and `Transfer-Encoding` lines say, for the framing's
/// invariants.
struct Lines<'b> {
    lengths: Vec<&'b [u8]>,
    codings: Vec<&'b [u8]>,
    coded: bool,
}

impl<'b> Lines<'b> {
    fn of(buf: &'b [u8], fields: &'b [Field]) -> Lines<'b> {
        let lengths = values(buf, fields, "content-length");
        let te = values(buf, fields, "transfer-encoding");
        Lines {
            lengths: lengths
                .iter()
                .flat_map(|v| v.split(|&b| b == b','))
                .collect(),
            codings: entries(&te),
            coded: !te.is_empty(),
        }
    }

    /// Every length entry is 1–19 digits and they all say `n`.
    fn all_say(&self, n: u64) -> bool {
        !self.lengths.is_empty()
            && self.lengths.iter().all(|e| {
                let e = e.trim_ascii();
                !e.is_empty()
                    && e.len() <= 19
                    && e.iter().all(u8::is_ascii_digit)
                    && std::str::from_utf8(e).ok().and_then(|s| s.parse().ok()) == Some(n)
            })
    }

    fn chunked_count(&self) -> usize {
        self.codings
            .iter()
            .filter(|c| c.eq_ignore_ascii_case(b"chunked"))
            .count()
    }

    /// `chunked`, once, as the only coding.
    fn only_chunked(&self) -> bool {
        self.codings.len() == 1 && self.chunked_count() == 1
    }
}

/// Parses `buf` as a request; if its head is complete, checks it, its framing and a chunked
/// body after it.
pub fn check_request(buf: &[u8], seed: u8) {
    let mut head = RequestHead::default();
    match parse_request(buf, &mut head, MAX_FIELDS, MAX_HEAD) {
        Ok(false) => {
            assert!(buf.len() < MAX_HEAD, "{} bytes and no head", buf.len());
            return;
        }
        Err(_) => return,
        Ok(true) => {}
    }
    let len = head.len;
    assert!(
        len <= buf.len() && len <= MAX_HEAD && len > 0,
        "head.len {len}"
    );
    assert_eq!(buf[len - 1], b'\n', "a head ends with its line end");
    let method = inside(buf, head.method, 0, len, "method");
    assert!(method.iter().all(|&b| tchar(b)), "method {method:?}");
    let target = inside(buf, head.target, head.method.end, len, "target");
    assert!(
        target.iter().all(|&b| b.is_ascii_graphic()),
        "target {target:?}"
    );
    assert!(head.minor <= 1);
    check_fields(buf, &head.fields, head.target.end, len);

    // The head reads the same whatever follows it, and a part of it is not yet a head.
    let mut again = RequestHead::default();
    assert_eq!(
        parse_request(&buf[..len], &mut again, MAX_FIELDS, MAX_HEAD),
        Ok(true)
    );
    assert_eq!(
        (again.method, again.target, again.minor, again.len),
        (head.method, head.target, head.minor, head.len)
    );
    assert_eq!(again.fields, head.fields);
    for cut in [len - 1, len / 2, usize::from(seed) % len] {
        assert_eq!(
            parse_request(&buf[..cut], &mut again, MAX_FIELDS, MAX_HEAD),
            Ok(false),
            "the first {cut} bytes of a {len}-byte head"
        );
    }

    let lines = Lines::of(buf, &head.fields);
    let framing = request_framing(buf, &head);
    match framing {
        Ok(Framing::Empty) => {
            assert!(!lines.coded && (lines.lengths.is_empty() || lines.all_say(0)))
        }
        Ok(Framing::Length(n)) => assert!(!lines.coded && n > 0 && lines.all_say(n)),
        Ok(Framing::Chunked) => {
            assert!(lines.lengths.is_empty() && head.minor == 1 && lines.only_chunked());
        }
        Ok(Framing::Close) => panic!("a request framed by the close"),
        Err(FramingError::BadLength) => assert!(!lines.lengths.is_empty()),
        Err(FramingError::LengthAndChunked) => {
            assert!(lines.coded && !lines.lengths.is_empty() && head.minor == 1);
        }
        Err(FramingError::CodingInHttp10) => assert!(lines.coded && head.minor == 0),
        Err(FramingError::ChunkedTwice) => assert!(lines.coded && lines.chunked_count() >= 2),
        Err(FramingError::UnsupportedCoding | FramingError::ChunkedNotLast) => {
            assert!(lines.coded && !lines.only_chunked())
        }
    }
    // The framing is told by the head alone: the body's bytes do not change it.
    assert_eq!(request_framing(&buf[..len], &head), framing);
    if framing == Ok(Framing::Chunked) {
        check_chunked(&buf[len..], seed);
    }
}

/// Parses `buf` as a response; if its head is complete, checks it, its framing (as the
/// answer to a `HEAD` request and to another) and a chunked body after it.
pub fn check_response(buf: &[u8], seed: u8) {
    let mut head = ResponseHead::default();
    match parse_response(buf, &mut head, MAX_FIELDS, MAX_HEAD) {
        Ok(false) => {
            assert!(buf.len() < MAX_HEAD, "{} bytes and no head", buf.len());
            return;
        }
        Err(_) => return,
        Ok(true) => {}
    }
    let len = head.len;
    assert!(
        len <= buf.len() && len <= MAX_HEAD && len > 0,
        "head.len {len}"
    );
    assert_eq!(buf[len - 1], b'\n', "a head ends with its line end");
    assert!((100..=999).contains(&head.status) && head.minor <= 1);
    check_fields(buf, &head.fields, 0, len);
    let mut again = ResponseHead::default();
    assert_eq!(
        parse_response(&buf[..len], &mut again, MAX_FIELDS, MAX_HEAD),
        Ok(true)
    );
    assert_eq!(
        (again.status, again.minor, again.len),
        (head.status, head.minor, head.len)
    );
    assert_eq!(again.fields, head.fields);
    assert_eq!(
        parse_response(&buf[..len - 1], &mut again, MAX_FIELDS, MAX_HEAD),
        Ok(false)
    );

    let lines = Lines::of(buf, &head.fields);
    for head_request in [false, true] {
        let bodiless =
            head_request || head.status < 200 || head.status == 204 || head.status == 304;
        let framing = response_framing(buf, &head, head_request);
        match framing {
            Ok((Framing::Empty, exact)) => {
                assert!(bodiless || (!lines.coded && lines.all_say(0)));
                assert!(exact || (bodiless && !head_request));
            }
            Ok((Framing::Length(n), exact)) => {
                assert!(!bodiless && !lines.coded && n > 0 && lines.all_say(n) && exact);
            }
            Ok((Framing::Chunked, exact)) => {
                assert!(!bodiless && head.minor == 1 && lines.only_chunked());
                assert_eq!(exact, lines.lengths.is_empty());
            }
            Ok((Framing::Close, exact)) => {
                assert!(!bodiless && !exact && (lines.coded || lines.lengths.is_empty()));
            }
            Err(FramingError::BadLength) => assert!(!lines.lengths.is_empty()),
            Err(FramingError::ChunkedTwice) => {
                assert!(!bodiless && lines.chunked_count() >= 2);
            }
            Err(FramingError::CodingInHttp10) => {
                assert!(!bodiless && lines.coded && head.minor == 0);
            }
            Err(
                e @ (FramingError::LengthAndChunked
                | FramingError::UnsupportedCoding
                | FramingError::ChunkedNotLast),
            ) => {
                panic!("a response refused for {e:?}")
            }
        }
        if framing.is_ok_and(|(f, _)| f == Framing::Chunked) {
            check_chunked(&buf[len..], seed);
        }
    }
}

/// Scans `body` as a chunked body whole, in the pieces `seed` picks, and against the
/// reference decoder: all three must agree on where it ends or that it is refused.
pub fn check_chunked(body: &[u8], seed: u8) {
    let whole = Chunked::new().scan(body);
    let pieces = scan_in_pieces(body, seed);
    assert_eq!(whole, pieces, "whole and in pieces (seed {seed})");
    match (whole, reference(body)) {
        (Ok(Progress { used, done: true }), Reference::Done(end)) => {
            assert_eq!(used, end, "where the body ends");
            assert!(body[..end].ends_with(b"\r\n\r\n"));
        }
        (Ok(Progress { used, done: false }), Reference::More) => assert_eq!(used, body.len()),
        (Err(_), Reference::Bad) => {}
        (scanned, expected) => panic!("scanned {scanned:?}, the reference says {expected:?}"),
    }
}

/// A 32-bit xorshift: the piece lengths `seed` stands for.
fn next(state: &mut u32) -> u32 {
    *state ^= *state << 13;
    *state ^= *state >> 17;
    *state ^= *state << 5;
    *state
}

/// Scans `body` in pieces: byte by byte, of 1–8 bytes, of 1–64 bytes, or split once, as
/// `seed` says (with empty scans between some of them). Every piece's progress is checked;
/// the result is what one scan of the whole would say.
fn scan_in_pieces(body: &[u8], seed: u8) -> Result<Progress, super::chunked::ChunkError> {
    let mut rng = u32::from(seed).wrapping_mul(0x9e37_79b9) | 1;
    let mode = seed % 4;
    let once = (next(&mut rng) as usize) % (body.len() + 1);
    let mut c = Chunked::new();
    let mut at = 0;
    let mut calls = 0;
    while at < body.len() {
        let n = match mode {
            0 => 1,
            1 => 1 + next(&mut rng) as usize % 8,
            2 => 1 + next(&mut rng) as usize % 64,
            _ if calls == 0 && once > 0 => once,
            _ => body.len() - at,
        };
        calls += 1;
        if next(&mut rng).is_multiple_of(8) {
            assert_eq!(
                c.scan(&[])?,
                Progress {
                    used: 0,
                    done: false
                }
            );
        }
        let piece = &body[at..(at + n).min(body.len())];
        let p = c.scan(piece)?;
        assert!(p.used <= piece.len(), "{p:?} of {} bytes", piece.len());
        assert_eq!(c.is_done(), p.done);
        at += p.used;
        if p.done {
            // Nothing after the end belongs to the body, however it is offered.
            assert_eq!(
                c.scan(&body[at..])?,
                Progress {
                    used: 0,
                    done: true
                }
            );
            assert_eq!(
                c.scan(&[])?,
                Progress {
                    used: 0,
                    done: true
                }
            );
            return Ok(Progress {
                used: at,
                done: true,
            });
        }
        assert_eq!(p.used, piece.len(), "a body that goes on takes every byte");
    }
    Ok(Progress {
        used: at,
        done: false,
    })
}

/// What the reference decoder says of a chunked body.
#[derive(Debug)]
enum Reference {
    /// Valid, ending at this byte.
    Done(usize),
    /// A valid start of a body.
    More,
    /// Invalid (whatever follows).
    Bad,
}

/// A line of the framing from `at`.
enum Line<'b> {
    /// Ended by CRLF; the next line starts at `next`.
    Full { content: &'b [u8], next: usize },
    /// The input ended first (`cr`: right after a CR).
    Open { content: &'b [u8], cr: bool },
    /// A bare CR or LF.
    Bad,
}

fn line(b: &[u8], at: usize) -> Line<'_> {
    let rest = &b[at..];
    match rest.iter().position(|&c| c == b'\r' || c == b'\n') {
        None => Line::Open {
            content: rest,
            cr: false,
        },
        Some(i) if rest[i] == b'\n' => Line::Bad,
        Some(i) => match rest.get(i + 1) {
            None => Line::Open {
                content: &rest[..i],
                cr: true,
            },
            Some(b'\n') => Line::Full {
                content: &rest[..i],
                next: at + i + 2,
            },
            Some(_) => Line::Bad,
        },
    }
}

/// A size line, `1*16HEXDIG [ *(SP / HTAB) ";" *text ]` of at most `MAX_LINE` bytes:
/// `Some(Some(size))` when `complete` and valid, `Some(None)` a valid start of one, `None`
/// invalid.
fn size_line(l: &[u8], complete: bool) -> Option<Option<u64>> {
    let digits = l.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if l.len() > MAX_LINE || digits > 16 || (digits == 0 && (complete || !l.is_empty())) {
        return None;
    }
    if digits == 0 {
        return Some(None);
    }
    let ok = match chunk_ext(&l[digits..]) {
        None => false,
        Some(whole) => whole || !complete,
    };
    let size = std::str::from_utf8(&l[..digits])
        .ok()
        .and_then(|s| u64::from_str_radix(s, 16).ok());
    match (ok, complete) {
        (false, _) => None,
        (true, true) => Some(size),
        (true, false) => Some(None),
    }
}

/// The extensions after a chunk size, `*( BWS ";" BWS token [ BWS "=" BWS ( token /
/// quoted-string ) ] )` (RFC 9112 §7.1.1), read token by token: `Some(true)` valid as it is,
/// `Some(false)` a valid start that cannot end here (whitespace, `;` or `=` last, an open
/// quote), `None` invalid.
fn chunk_ext(e: &[u8]) -> Option<bool> {
    let skip = |mut i: usize| {
        while e.get(i).is_some_and(|&b| b == b' ' || b == b'\t') {
            i += 1;
        }
        i
    };
    let token = |mut i: usize| {
        while e.get(i).is_some_and(|&b| tchar(b)) {
            i += 1;
        }
        i
    };
    let mut i = 0;
    loop {
        let semi = skip(i);
        if semi == e.len() {
            return Some(semi == i);
        }
        if e[semi] != b';' {
            return None;
        }
        let name = skip(semi + 1);
        let name_end = token(name);
        if name_end == e.len() {
            return Some(name_end > name);
        }
        if name_end == name {
            return None;
        }
        let eq = skip(name_end);
        if eq == e.len() {
            return Some(false);
        }
        match e[eq] {
            b';' => {
                i = name_end;
                continue;
            }
            b'=' => {}
            _ => return None,
        }
        let value = skip(eq + 1);
        if value == e.len() {
            return Some(false);
        }
        if e[value] != b'"' {
            let end = token(value);
            if end == value {
                return None;
            }
            i = end;
            continue;
        }
        let mut j = value + 1;
        loop {
            match e.get(j) {
                None => return Some(false),
                Some(b'"') => break,
                Some(b'\\') => match e.get(j + 1) {
                    None => return Some(false),
                    Some(&b) if text(b) => j += 2,
                    Some(_) => return None,
                },
                Some(&b) if text(b) => j += 1,
                Some(_) => return None,
            }
        }
        i = j + 1;
    }
}

/// A trailer line, `token ":" *text`, or (not `complete`) a valid start of one.
fn trailer_line(l: &[u8], complete: bool) -> bool {
    let name = l.iter().take_while(|&&b| tchar(b)).count();
    match l[name..].split_first() {
        None => !complete,
        Some((b':', value)) => name > 0 && value.iter().all(|&b| text(b)),
        Some(_) => false,
    }
}

/// The reference: the body read line by line, as RFC 9112 §7.1 writes it, with the limits
/// of `chunked.rs`'s docs.
fn reference(b: &[u8]) -> Reference {
    let mut at = 0;
    let trailers = loop {
        let size = match line(b, at) {
            Line::Bad => return Reference::Bad,
            Line::Open { content, cr } => {
                return match size_line(content, cr) {
                    Some(_) => Reference::More,
                    None => Reference::Bad,
                }
            }
            Line::Full { content, next } => match size_line(content, true) {
                Some(Some(size)) => {
                    at = next;
                    size
                }
                _ => return Reference::Bad,
            },
        };
        if size == 0 {
            break at;
        }
        if ((b.len() - at) as u64) < size {
            return Reference::More;
        }
        let end = at + size as usize;
        match (b.get(end), b.get(end + 1)) {
            (None, _) | (Some(b'\r'), None) => return Reference::More,
            (Some(b'\r'), Some(b'\n')) => at = end + 2,
            _ => return Reference::Bad,
        }
    };
    loop {
        match line(b, at) {
            Line::Bad => return Reference::Bad,
            Line::Open { content, cr } => {
                let ok = (cr && content.is_empty()) || trailer_line(content, cr);
                return match ok && b.len() - trailers <= MAX_TRAILERS {
                    true => Reference::More,
                    false => Reference::Bad,
                };
            }
            Line::Full { content, next } => {
                if next - trailers > MAX_TRAILERS {
                    return Reference::Bad;
                }
                if content.is_empty() {
                    return Reference::Done(next);
                }
                if !trailer_line(content, true) {
                    return Reference::Bad;
                }
                at = next;
            }
        }
    }
}

#[cfg(test)]
mod tests;
