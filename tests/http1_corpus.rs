//! The fuzz target's corpus (`fuzz/corpus/http1/`: its seeds and every input that once broke
//! it) replayed on stable through the very checks the target runs
//! (`iuid_router::http1::check`), and what each named seed must come to: the request
//! smuggling classics refused by the step that should refuse them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use iuid_router::http1::check::{check, MAX_FIELDS, MAX_HEAD};
use iuid_router::http1::{
    parse_request, parse_response, request_framing, response_framing, Chunked, Framing,
    FramingError, RequestHead, ResponseHead,
};

fn corpus() -> BTreeMap<String, Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/http1");
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("fuzz/corpus/http1") {
        let path: PathBuf = entry.expect("entry").path();
        let name = path
            .file_name()
            .expect("a name")
            .to_string_lossy()
            .into_owned();
        files.insert(name, std::fs::read(&path).expect("read a corpus file"));
    }
    files
}

#[test]
fn every_corpus_file_passes_the_fuzz_targets_checks() {
    let files = corpus();
    assert!(files.len() >= 24, "the corpus has {} files", files.len());
    let broken: Vec<&String> = files
        .iter()
        .filter(|(_, data)| std::panic::catch_unwind(|| check(data)).is_err())
        .map(|(name, _)| name)
        .collect();
    assert!(broken.is_empty(), "invariants broken by {broken:?}");
}

/// What a body's framing comes to, and a chunked body's scan.
fn body(stream: &[u8], len: usize, framing: Result<(Framing, bool), FramingError>) -> String {
    let reuse = |exact: bool| if exact { "" } else { ", not reused" };
    match framing {
        Ok((Framing::Chunked, exact)) => {
            let rest = &stream[len..];
            let scanned = match Chunked::new().scan(rest) {
                Ok(p) if p.done => format!("ends {} bytes before the end", rest.len() - p.used),
                Ok(_) => "more to come".to_owned(),
                Err(e) => format!("{e:?}"),
            };
            format!("Chunked{}: {scanned}", reuse(exact))
        }
        Ok((framing, exact)) => format!("{framing:?}{}", reuse(exact)),
        Err(e) => format!("{e:?}"),
    }
}

fn as_request(stream: &[u8]) -> String {
    let mut head = RequestHead::default();
    match parse_request(stream, &mut head, MAX_FIELDS, MAX_HEAD) {
        Ok(true) => body(
            stream,
            head.len,
            request_framing(stream, &head).map(|f| (f, true)),
        ),
        other => format!("head {other:?}"),
    }
}

fn as_response(stream: &[u8]) -> String {
    let mut head = ResponseHead::default();
    match parse_response(stream, &mut head, MAX_FIELDS, MAX_HEAD) {
        Ok(true) => body(stream, head.len, response_framing(stream, &head, false)),
        other => format!("head {other:?}"),
    }
}

#[test]
fn the_named_seeds_come_to_what_rfc_9112_and_the_codec_say() {
    let files = corpus();
    let requests = [
        ("get", "Empty"),
        ("post-length", "Length(5)"),
        ("post-length-list", "Length(5)"),
        ("post-chunked", "Chunked: ends 0 bytes before the end"),
        // The next request's 22 bytes are left for it.
        (
            "chunked-ext-trailers",
            "Chunked: ends 22 bytes before the end",
        ),
        (
            "te-list-leading-comma",
            "Chunked: ends 0 bytes before the end",
        ),
        ("chunked-max-size", "Chunked: more to come"),
        ("pipelined", "Empty"),
        ("http10", "Empty"),
        // A bare LF ends a head's lines (RFC 9112 §2.2 lets a recipient accept it).
        ("head-bare-lf", "Empty"),
        ("cl-te", "LengthAndChunked"),
        ("te-cl", "LengthAndChunked"),
        ("te-twice", "ChunkedTwice"),
        ("te-chunked-chunked", "ChunkedTwice"),
        ("te-chunked-identity", "ChunkedNotLast"),
        ("te-gzip-chunked", "UnsupportedCoding"),
        ("te-xchunked", "ChunkedNotLast"),
        ("te-http10", "CodingInHttp10"),
        ("cl-differ", "BadLength"),
        ("cl-plus", "BadLength"),
        ("cl-hex", "BadLength"),
        ("cl-huge", "BadLength"),
        (
            "te-space-before-colon",
            "head Err(Invalid(\"invalid header name\"))",
        ),
        ("te-obs-fold", "head Err(Invalid(\"invalid header name\"))"),
        (
            "head-obs-fold",
            "head Err(Invalid(\"invalid header name\"))",
        ),
        (
            "head-nul-value",
            "head Err(Invalid(\"invalid header value\"))",
        ),
        ("head-non-ascii-target", "head Err(NonAsciiTarget)"),
        ("size-0x", "Chunked: BadSize"),
        ("size-too-long", "Chunked: BadSize"),
        ("size-space", "Chunked: BadSize"),
        ("chunk-bare-lf", "Chunked: BadLineEnd"),
        ("chunk-bare-cr", "Chunked: BadLineEnd"),
        ("chunk-data-too-long", "Chunked: BadLineEnd"),
        ("chunk-ext-lf", "Chunked: BadLineEnd"),
        ("trailer-no-name", "Chunked: BadByte"),
        ("trailer-obs-fold", "Chunked: BadByte"),
        ("trailer-space-in-name", "Chunked: BadByte"),
        ("chunk-ext-control", "Chunked: BadByte"),
        // RFC 9112 §7.1.1's extension grammar (issue 37: llhttp refuses these).
        ("chunk-ext-bare-semicolon", "Chunked: BadByte"),
        ("chunk-ext-open-quote", "Chunked: BadByte"),
        ("chunk-ext-no-value", "Chunked: BadByte"),
        ("chunk-ext-trailing-space", "Chunked: BadByte"),
        (
            "chunk-ext-quoted-pair",
            "Chunked: ends 0 bytes before the end",
        ),
        // Trailers the router drops from a request (RFC 9110 §6.5.1) are valid framing.
        (
            "chunked-forbidden-trailers",
            "Chunked: ends 0 bytes before the end",
        ),
    ];
    let responses = [
        ("resp-length", "Length(3)"),
        ("resp-chunked", "Chunked: ends 0 bytes before the end"),
        // Chunked wins over the length (RFC 9112 §6.3 rule 3), and the connection goes.
        (
            "resp-te-cl",
            "Chunked, not reused: ends 0 bytes before the end",
        ),
        ("resp-204-length", "Empty, not reused"),
        ("resp-close", "Close, not reused"),
        (
            "resp-obs-fold",
            "head Err(Invalid(\"invalid header name\"))",
        ),
        // Found by the fuzz target: status 000 passed for a bodiless 1xx.
        (
            "found-status-000",
            "head Err(Invalid(\"status code below 100\"))",
        ),
    ];
    let mut wrong = Vec::new();
    for (names, read) in [
        (&requests[..], as_request as fn(&[u8]) -> String),
        (&responses[..], as_response),
    ] {
        for &(name, expected) in names {
            let data = files.get(name).unwrap_or_else(|| panic!("no seed {name}"));
            let got = read(&data[1..]);
            if got != expected {
                wrong.push(format!("{name}: {got} (expected {expected})"));
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}

/// The fuzz target compiles `src/http1/` from its source with `httparse` alone: the codec
/// must keep using nothing else of the router.
#[test]
fn the_codec_uses_nothing_of_the_router() {
    let mut dirs = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http1")];
    let mut paths = Vec::new();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("src/http1") {
            let path = entry.expect("entry").path();
            match path.is_dir() {
                true => dirs.push(path),
                false => paths.push(path),
            }
        }
    }
    let mut files = 0;
    for path in paths {
        let text = std::fs::read_to_string(&path).expect("read");
        files += 1;
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            assert!(
                !code.contains("crate::") && !code.contains("iuid"),
                "{}: {line}",
                path.display()
            );
        }
    }
    assert!(files >= 5, "read {files} files of src/http1");
}
