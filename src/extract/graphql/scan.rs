//! A single pass over a GraphQL document that finds its string literals, and the document's
//! *shape*: the text with every string literal's content masked out.
//!
//! Clients send a handful of distinct documents, with ids in variables or in string literals
//! (`node(id: "…")`). Two requests whose documents differ only inside string literals have the
//! same shape, so they share one extraction plan (see `plan.rs`), and the plan names the
//! literals that hold ids by their index. This scan is all a cache hit costs besides the hash
//! lookup: a few hundred nanoseconds for a 2 KiB document, where a full parse costs ~100 µs.
//!
//! The lexical rules are those of the GraphQL spec (October 2021) §2.1: comments run from `#`
//! to the end of the line; a string is `"…"` with backslash escapes and no line break; a block
//! string is `"""…"""` where `\"""` is the only escape.

use std::hash::Hasher;

/// One string literal: where its content is (the bytes between the quotes) and where its
/// opening quote is (how the parser's syntax tree refers to it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Literal {
    /// Byte offset of the opening `"` (or `"""`).
    pub quote: u32,
    /// Byte range of the content, quotes excluded.
    pub start: u32,
    /// End of the content (exclusive).
    pub end: u32,
}

/// Most literals recorded; a document with more is still hashed correctly but its later
/// literals cannot hold ids (a plan refers to at most this many).
pub const MAX_LITERALS: usize = 4096;

/// Scans `doc`; never fails: an unterminated string simply runs to the end (the parser, on a
/// cache miss, reports the error).
pub fn scan(doc: &[u8], literals: &mut Vec<Literal>) -> u64 {
    literals.clear();
    let mut h = rustc_hash::FxHasher::default();
    let mut seg_start = 0;
    let mut i = 0;
    let n = doc.len();
    while i < n {
        match doc[i] {
            b'#' => {
                while i < n && doc[i] != b'\n' && doc[i] != b'\r' {
                    i += 1;
                }
            }
            b'"' => {
                let quote = i;
                let block = doc[i..].starts_with(b"\"\"\"");
                let start = if block { i + 3 } else { i + 1 };
                let mut j = start;
                let end;
                if block {
                    loop {
                        if j >= n {
                            end = n;
                            break;
                        }
                        if doc[j] == b'\\' && doc[j + 1..].starts_with(b"\"\"\"") {
                            j += 4;
                        } else if doc[j..].starts_with(b"\"\"\"") {
                            end = j;
                            j += 3;
                            break;
                        } else {
                            j += 1;
                        }
                    }
                } else {
                    loop {
                        if j >= n || doc[j] == b'\n' || doc[j] == b'\r' {
                            end = j;
                            break;
                        }
                        match doc[j] {
                            b'\\' => j += 2,
                            b'"' => {
                                end = j;
                                j += 1;
                                break;
                            }
                            _ => j += 1,
                        }
                    }
                }
                let end = end.min(n);
                // The shape keeps the quotes and drops the content.
                h.write(&doc[seg_start..start]);
                h.write_u8(0xff);
                seg_start = end;
                if literals.len() < MAX_LITERALS {
                    literals.push(Literal {
                        quote: quote as u32,
                        start: start as u32,
                        end: end as u32,
                    });
                }
                i = j.min(n);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    h.write(&doc[seg_start.min(n)..]);
    h.write_usize(
        n - literals
            .iter()
            .map(|l| (l.end - l.start) as usize)
            .sum::<usize>(),
    );
    h.finish()
}

/// Whether `doc` (with `literals` from [`scan`]) has exactly the shape `shape` — the stored
/// masked text of a cached plan. Guards against hash collisions: a plan is only ever applied
/// to a document of its own shape.
pub fn same_shape(doc: &[u8], literals: &[Literal], shape: &[u8]) -> bool {
    let mut rest = shape;
    let mut seg_start = 0usize;
    for l in literals {
        let seg = &doc[seg_start..l.start as usize];
        match rest.strip_prefix(seg) {
            Some(r) => rest = r,
            None => return false,
        }
        match rest.split_first() {
            Some((0xff, r)) => rest = r,
            _ => return false,
        }
        seg_start = l.end as usize;
    }
    rest == &doc[seg_start..]
}

/// The masked text [`same_shape`] compares against: segments between literal contents,
/// each literal's content replaced by one `0xff` byte (which never occurs in UTF-8 text).
pub fn shape_of(doc: &[u8], literals: &[Literal]) -> Vec<u8> {
    let mut out = Vec::with_capacity(doc.len());
    let mut seg_start = 0usize;
    for l in literals {
        out.extend_from_slice(&doc[seg_start..l.start as usize]);
        out.push(0xff);
        seg_start = l.end as usize;
    }
    out.extend_from_slice(&doc[seg_start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn literals(doc: &str) -> (Vec<String>, u64) {
        let mut lits = Vec::new();
        let h = scan(doc.as_bytes(), &mut lits);
        let texts = lits
            .iter()
            .map(|l| doc[l.start as usize..l.end as usize].to_owned())
            .collect();
        (texts, h)
    }

    #[test]
    fn finds_literals_past_comments_and_escapes() {
        let doc = r#"# a "comment" with quotes
query { a: node(id: "x\"y") { id } b: node(id: """blo"ck""") { id } c(s: "") }"#;
        let (lits, _) = literals(doc);
        assert_eq!(lits, vec![r#"x\"y"#, r#"blo"ck"#, ""]);
    }

    #[test]
    fn shape_ignores_literal_content_only() {
        let (_, a) = literals(r#"{ node(id: "aaa") { id } }"#);
        let (_, b) = literals(r#"{ node(id: "bbbbbb") { id } }"#);
        let (_, c) = literals(r#"{ node(id: "aaa") { id name } }"#);
        assert_eq!(a, b);
        assert_ne!(a, c);
        let doc = r#"{ node(id: "bbbbbb") { id } }"#;
        let mut lits = Vec::new();
        scan(doc.as_bytes(), &mut lits);
        let shape = shape_of(br#"{ node(id: "aaa") { id } }"#, &{
            let mut l = Vec::new();
            scan(br#"{ node(id: "aaa") { id } }"#, &mut l);
            l
        });
        assert!(same_shape(doc.as_bytes(), &lits, &shape));
        assert!(!same_shape(br#"{ node(id: "b") { id x } }"#, &lits, &shape));
    }

    #[test]
    fn unterminated_strings_do_not_panic() {
        for doc in [
            "\"",
            "\"\"\"",
            "\"\\",
            "\"\"\"\\",
            "{ a(s: \"abc",
            "#",
            "\"\"\"\\\"\"\"",
        ] {
            let mut l = Vec::new();
            scan(doc.as_bytes(), &mut l);
            let shape = shape_of(doc.as_bytes(), &l);
            assert!(same_shape(doc.as_bytes(), &l, &shape), "{doc:?}");
        }
    }
}
