//! `iuid_router::checks::reading` on arbitrary bytes: the router's reading of a path and a
//! query equals Go's and PHP's, or is refused (replayed over `fuzz/corpus/reading/` by
//! `tests/fuzz_corpus.rs` on stable).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| iuid_router::checks::reading::check(data));
