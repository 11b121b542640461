//! The HTTP/1.1 codec (`src/http1/`) on arbitrary bytes: heads, framing and chunked bodies,
//! with the invariants of `src/http1/check.rs` (also replayed over `fuzz/corpus/http1/` by
//! `tests/http1_corpus.rs` on stable).
//!
//! The codec is compiled here from its source rather than through the `iuid-router` crate:
//! it uses nothing of the router but `httparse`, and the sanitizer build of the router's
//! whole dependency tree (tokio, hyper, rustls…) would cost minutes for code never run.
#![no_main]

#[allow(dead_code, unused_imports)]
#[path = "../../src/http1/mod.rs"]
mod http1;

libfuzzer_sys::fuzz_target!(|data: &[u8]| http1::check::check(data));
