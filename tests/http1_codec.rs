//! The HTTP/1.1 codec (`iuid_router::http1`) against references written here, over
//! generated cases:
//! - valid chunked bodies (random chunk sizes, size spellings, extensions, trailers) followed
//!   by the next message's bytes: the scanner, fed in random pieces, ends exactly where the
//!   body ends, and a naive decoder reads the very data that was encoded;
//! - the same bodies with one byte of their framing replaced, inserted or deleted: the
//!   scanner refuses them or ends them where the naive decoder does, never elsewhere;
//! - request heads with generated `Content-Length` and `Transfer-Encoding` lines:
//!   `request_framing` says what a rule written from RFC 9112 §6 and the codec's docs says.

mod common;

use iuid_router::http1::chunked::Progress;
use iuid_router::http1::{
    parse_request, request_framing, ChunkError, Chunked, Framing, FramingError, RequestHead,
};
use proptest::prelude::*;
use proptest::sample::Index;

fn cases() -> ProptestConfig {
    ProptestConfig::with_cases(if std::env::var_os("CI").is_some() {
        512
    } else {
        256
    })
}

// ---- the naive decoder ----------------------------------------------------------------

/// What the naive decoder makes of a buffer.
#[derive(Debug, PartialEq)]
enum Naive {
    /// A whole body ending at `end`: its data and trailer lines.
    Done {
        data: Vec<u8>,
        trailers: Vec<Vec<u8>>,
        end: usize,
    },
    /// No error in what is there, but the body has not ended.
    Short,
    /// Invalid.
    Bad,
}

/// The CRLF-ended line at `at`: `Ok(None)` when there is no CRLF yet, `Err` when the line
/// holds a CR or LF of its own.
fn line_at(b: &[u8], at: usize) -> Result<Option<(&[u8], usize)>, ()> {
    let rest = &b[at..];
    let Some(i) = rest.windows(2).position(|w| w == b"\r\n") else {
        return Ok(None);
    };
    let line = &rest[..i];
    if line.iter().any(|&c| c == b'\r' || c == b'\n') {
        return Err(());
    }
    Ok(Some((line, at + i + 2)))
}

/// HTAB, SP, visible ASCII, obs-text: what an extension or a trailer value may hold.
fn is_text(c: u8) -> bool {
    c == b'\t' || (c >= 0x20 && c != 0x7f)
}

fn is_tchar(c: u8) -> bool {
    c.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&c)
}

/// `1*16HEXDIG chunk-ext`: the size.
fn chunk_size(line: &[u8]) -> Option<u64> {
    let digits = line.iter().take_while(|c| c.is_ascii_hexdigit()).count();
    let size = &line[..digits];
    if !common::chunk_ext_ok(&line[digits..]) || size.is_empty() || size.len() > 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(size).ok()?, 16).ok()
}

/// `token ":" *text`.
fn trailer_ok(line: &[u8]) -> bool {
    match line.iter().position(|&c| c == b':') {
        Some(i) => {
            i > 0
                && line[..i].iter().all(|&c| is_tchar(c))
                && line[i + 1..].iter().all(|&c| is_text(c))
        }
        None => false,
    }
}

/// Reads a chunked body from the start of `b` the simple way: line by line, data by size.
/// Partial lines are not judged: they are `Short`.
fn naive(b: &[u8]) -> Naive {
    let mut at = 0;
    let mut data = Vec::new();
    loop {
        let (line, next) = match line_at(b, at) {
            Err(()) => return Naive::Bad,
            Ok(None) => return Naive::Short,
            Ok(Some(l)) => l,
        };
        let Some(size) = chunk_size(line) else {
            return Naive::Bad;
        };
        at = next;
        if size == 0 {
            break;
        }
        if ((b.len() - at) as u64) < size {
            return Naive::Short;
        }
        let end = at + size as usize;
        data.extend_from_slice(&b[at..end]);
        let after = &b[end..];
        if after.starts_with(b"\r\n") {
            at = end + 2;
        } else if b"\r\n".starts_with(after) {
            return Naive::Short;
        } else {
            return Naive::Bad;
        }
    }
    let mut trailers = Vec::new();
    loop {
        let (line, next) = match line_at(b, at) {
            Err(()) => return Naive::Bad,
            Ok(None) => return Naive::Short,
            Ok(Some(l)) => l,
        };
        if line.is_empty() {
            return Naive::Done {
                data,
                trailers,
                end: next,
            };
        }
        if !trailer_ok(line) {
            return Naive::Bad;
        }
        trailers.push(line.to_vec());
        at = next;
    }
}

// ---- generated chunked bodies ---------------------------------------------------------

#[derive(Debug, Clone)]
struct Chunk {
    data: Vec<u8>,
    /// Leading zeros before the size's hex digits.
    zeros: usize,
    upper: bool,
    ext: String,
}

#[derive(Debug, Clone)]
struct Body {
    chunks: Vec<Chunk>,
    /// The last chunk's size as sent (`0`, `000`).
    last: String,
    last_ext: String,
    trailers: Vec<String>,
}

/// Chunk extensions as RFC 9112 §7.1.1 writes them: BWS, then `;name[=value]`s, the value a
/// token or a quoted string.
fn ext() -> impl Strategy<Value = String> {
    prop_oneof![
        2 => Just(String::new()),
        1 => "[ \t]{0,2}(;[ ]?[a-zA-Z!#~]{1,6}([ ]?=[ ]?([a-z0-9.]{1,6}|\"[a-z ;=]{0,6}\"))?){1,3}",
    ]
}

fn body() -> impl Strategy<Value = Body> {
    let chunk = (
        prop::collection::vec(any::<u8>(), 1..48),
        0usize..4,
        any::<bool>(),
        ext(),
    )
        .prop_map(|(data, zeros, upper, ext)| Chunk {
            data,
            zeros,
            upper,
            ext,
        });
    (
        prop::collection::vec(chunk, 0..6),
        "0{1,3}",
        ext(),
        prop::collection::vec("[A-Za-z][A-Za-z0-9-]{0,8}:[ \t]?[ -~]{0,12}", 0..3),
    )
        .prop_map(|(chunks, last, last_ext, trailers)| Body {
            chunks,
            last,
            last_ext,
            trailers,
        })
}

impl Body {
    /// The body on the wire, and where its framing bytes (not its data) are.
    fn encode(&self) -> (Vec<u8>, Vec<usize>) {
        let mut out = Vec::new();
        let mut framing = Vec::new();
        let mut put = |out: &mut Vec<u8>, bytes: &[u8]| {
            framing.extend(out.len()..out.len() + bytes.len());
            out.extend_from_slice(bytes);
        };
        for c in &self.chunks {
            let hex = match c.upper {
                true => format!("{:X}", c.data.len()),
                false => format!("{:x}", c.data.len()),
            };
            let line = format!("{}{hex}{}\r\n", "0".repeat(c.zeros), c.ext);
            put(&mut out, line.as_bytes());
            out.extend_from_slice(&c.data);
            put(&mut out, b"\r\n");
        }
        put(
            &mut out,
            format!("{}{}\r\n", self.last, self.last_ext).as_bytes(),
        );
        for t in &self.trailers {
            put(&mut out, format!("{t}\r\n").as_bytes());
        }
        put(&mut out, b"\r\n");
        (out, framing)
    }

    fn data(&self) -> Vec<u8> {
        self.chunks.iter().flat_map(|c| c.data.clone()).collect()
    }
}

/// Scans `input` in pieces of the given sizes (cycled; the rest in one piece when there are
/// none), as a connection would feed it. Returns what one scan of the whole should say.
fn scan_in(input: &[u8], pieces: &[usize]) -> Result<Progress, ChunkError> {
    let mut c = Chunked::new();
    let mut at = 0;
    let mut sizes = pieces.iter().cycle();
    while at < input.len() {
        let n = sizes.next().copied().unwrap_or(input.len());
        let piece = &input[at..(at + n).min(input.len())];
        let p = c.scan(piece)?;
        at += p.used;
        if p.done {
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

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn a_valid_body_ends_where_it_ends_in_any_split(
        body in body(),
        next in prop::collection::vec(any::<u8>(), 0..24),
        pieces in prop::collection::vec(1usize..32, 0..12),
    ) {
        let (encoded, _) = body.encode();
        let input = [encoded.as_slice(), &next].concat();
        prop_assert_eq!(
            scan_in(&input, &pieces),
            Ok(Progress { used: encoded.len(), done: true })
        );
        prop_assert_eq!(
            naive(&input),
            Naive::Done {
                data: body.data(),
                trailers: body.trailers.iter().map(|t| t.as_bytes().to_vec()).collect(),
                end: encoded.len(),
            }
        );
        // Any part of it is a body still to come, for both.
        let cut = pieces.first().map_or(0, |p| p * 7 % encoded.len());
        prop_assert_eq!(
            Chunked::new().scan(&encoded[..cut]),
            Ok(Progress { used: cut, done: false })
        );
        prop_assert_eq!(naive(&encoded[..cut]), Naive::Short);
    }

    #[test]
    fn a_body_with_broken_framing_is_refused_or_ends_where_the_decoder_says(
        body in body(),
        next in prop::collection::vec(any::<u8>(), 0..24),
        at in any::<Index>(),
        edit in 0u8..3,
        byte in prop_oneof![
            3 => prop::sample::select(b"\r\n\t ;:=\"0179aAfFgGxX-+\x00\x7f\x80\xff".to_vec()),
            1 => any::<u8>(),
        ],
        pieces in prop::collection::vec(1usize..32, 0..12),
    ) {
        let (mut input, framing) = body.encode();
        let at = framing[at.index(framing.len())];
        match edit {
            0 => input[at] = byte,
            1 => input.insert(at, byte),
            _ => {
                input.remove(at);
            }
        }
        input.extend_from_slice(&next);
        let scanned = scan_in(&input, &pieces);
        prop_assert_eq!(&scanned, &Chunked::new().scan(&input), "in pieces and whole");
        match (scanned, naive(&input)) {
            (Ok(Progress { used, done: true }), Naive::Done { end, .. }) => prop_assert_eq!(used, end),
            (Ok(Progress { done: false, .. }), Naive::Short) => {}
            // The scanner may refuse a partial line the naive decoder has not judged yet.
            (Err(_), Naive::Bad | Naive::Short) => {}
            (scanned, naive) => prop_assert!(
                false,
                "scanned {:?}, the naive decoder says {:?} of {:?}",
                scanned,
                naive,
                String::from_utf8_lossy(&input)
            ),
        }
    }
}

// ---- request framing ------------------------------------------------------------------

/// A framing line of a generated request head.
#[derive(Debug, Clone)]
enum Line {
    Length(String, String),
    Coding(String, String),
    Other(String),
}

fn length_value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[0-9]{1,4}",
        1 => Just("0".to_owned()),
        1 => "0{1,3}[1-9]",
        1 => "[1-9][0-9]{17,20}",
        1 => Just("18446744073709551615".to_owned()),
        2 => "[0-9]{1,2}[ \t]?,[ \t]?[0-9]{1,2}",
        1 => "[0-9]{1,2}, ?[0-9]{1,2}, ?[0-9]{1,2}",
        2 => prop::sample::select(vec![
            "+5", "-1", "0x5", "5 5", "5,", ",5", "", "1e3", "5.0", "٥", "5;a", "\"5\"",
        ])
        .prop_map(str::to_owned),
    ]
}

fn coding_value() -> impl Strategy<Value = String> {
    let coding = prop::sample::select(vec![
        "chunked",
        "Chunked",
        "CHUNKED",
        "gzip",
        "identity",
        "deflate",
        "xchunked",
        "chunked;q=1",
        "\"chunked\"",
        "chunk",
        "",
    ]);
    (
        prop::collection::vec(coding, 1..4),
        prop::sample::select(vec![",", ", ", " ,\t", ",,"]),
    )
        .prop_map(|(codings, sep)| codings.join(sep))
}

fn framing_line() -> impl Strategy<Value = Line> {
    let length_name =
        prop::sample::select(vec!["Content-Length", "content-length", "CONTENT-LENGTH"]);
    let coding_name = prop::sample::select(vec![
        "Transfer-Encoding",
        "transfer-encoding",
        "TRANSFER-ENCODING",
    ]);
    prop_oneof![
        3 => (length_name, length_value()).prop_map(|(n, v)| Line::Length(n.to_owned(), v)),
        3 => (coding_name, coding_value()).prop_map(|(n, v)| Line::Coding(n.to_owned(), v)),
        // Look-alikes that are other fields.
        1 => prop::sample::select(vec![
            "Content-Lengths: 5", "X-Content-Length: 5", "Transfer-Encodings: chunked",
            "TE: chunked", "Content-Type: chunked", "Host: a",
        ])
        .prop_map(|l| Line::Other(l.to_owned())),
    ]
}

/// The rule, written from RFC 9112 §6.1–§6.3 and RFC 9110 §8.6 as the codec's docs state
/// it: a request's framing from its lines.
fn reference_rule(minor: u8, lines: &[Line]) -> Result<Framing, FramingError> {
    let trim = |s: &str| s.trim_matches([' ', '\t']).to_owned();
    let lengths: Vec<String> = lines
        .iter()
        .filter_map(|l| match l {
            Line::Length(_, v) => Some(v.split(',').map(trim).collect::<Vec<_>>()),
            _ => None,
        })
        .flatten()
        .collect();
    // Every entry 1 to 19 ASCII digits, and all equal in value.
    let mut values = std::collections::BTreeSet::new();
    for entry in &lengths {
        if entry.is_empty() || entry.len() > 19 || !entry.bytes().all(|c| c.is_ascii_digit()) {
            return Err(FramingError::BadLength);
        }
        values.insert(entry.parse::<u64>().expect("19 digits fit"));
    }
    if values.len() > 1 {
        return Err(FramingError::BadLength);
    }
    let length = values.into_iter().next();
    let coded = lines.iter().any(|l| matches!(l, Line::Coding(..)));
    if !coded {
        return Ok(match length {
            None | Some(0) => Framing::Empty,
            Some(n) => Framing::Length(n),
        });
    }
    if minor == 0 {
        return Err(FramingError::CodingInHttp10);
    }
    if length.is_some() {
        return Err(FramingError::LengthAndChunked);
    }
    let codings: Vec<String> = lines
        .iter()
        .filter_map(|l| match l {
            Line::Coding(_, v) => Some(
                v.split(',')
                    .map(trim)
                    .filter(|c| !c.is_empty())
                    .collect::<Vec<_>>(),
            ),
            _ => None,
        })
        .flatten()
        .collect();
    let chunked = |c: &String| c.eq_ignore_ascii_case("chunked");
    match codings.as_slice() {
        // Nothing, or chunked not last: the length cannot be told (§6.3 rule 4).
        [] => Err(FramingError::ChunkedNotLast),
        [.., last] if !chunked(last) => Err(FramingError::ChunkedNotLast),
        // Chunked last, after another coding: one not understood (§6.1, 501).
        c if !c.iter().all(chunked) => Err(FramingError::UnsupportedCoding),
        [_] => Ok(Framing::Chunked),
        // Chunked alone, more than once: applied twice.
        _ => Err(FramingError::ChunkedTwice),
    }
}

proptest! {
    #![proptest_config(cases())]

    #[test]
    fn request_framing_follows_the_rule(
        minor in 0u8..2,
        lines in prop::collection::vec(framing_line(), 0..5),
    ) {
        let mut text = format!("POST /v1/orders HTTP/1.{minor}\r\nHost: a\r\n");
        for line in &lines {
            match line {
                Line::Length(n, v) | Line::Coding(n, v) => text.push_str(&format!("{n}: {v}\r\n")),
                Line::Other(l) => text.push_str(&format!("{l}\r\n")),
            }
        }
        text.push_str("\r\n");
        let mut head = RequestHead::default();
        prop_assert_eq!(parse_request(text.as_bytes(), &mut head, 100, 8192), Ok(true));
        prop_assert_eq!(head.len, text.len());
        prop_assert_eq!(
            request_framing(text.as_bytes(), &head),
            reference_rule(minor, &lines),
            "{}",
            text
        );
    }
}

/// The naive decoder itself, on the cases RFC 9112 §7.1 spells out, so the properties above
/// compare against something that reads the grammar.
#[test]
fn the_naive_decoder_reads_the_grammar() {
    let body = b"4;a=\"b c\"\r\nWiki\r\n5 ;x\r\npedia\r\n0\r\nExpires: never\r\n\r\nGET";
    assert_eq!(
        naive(body),
        Naive::Done {
            data: b"Wikipedia".to_vec(),
            trailers: vec![b"Expires: never".to_vec()],
            end: body.len() - 3,
        }
    );
    for bad in [
        &b"0x2\r\nhi\r\n0\r\n\r\n"[..],
        b"2\nhi\r\n0\r\n\r\n",
        b"2\r\nhi\n0\r\n\r\n",
        b"2\r\nhiX\r\n0\r\n\r\n",
        b"00000000000000002\r\nhi\r\n0\r\n\r\n",
        b"0\r\n: v\r\n\r\n",
        b"0\r\nX v\r\n\r\n",
        b"2;\x01\r\nhi\r\n0\r\n\r\n",
    ] {
        assert_eq!(naive(bad), Naive::Bad, "{:?}", String::from_utf8_lossy(bad));
    }
    assert_eq!(naive(b"2\r\nh"), Naive::Short);
    assert_eq!(naive(b"0\r\nX: 1\r\n"), Naive::Short);
}
