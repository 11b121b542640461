//! `iuid_router::checks::iuid` on arbitrary bytes: its invariants, beyond "no panic", are in
//! that module (replayed over `fuzz/corpus/iuid/` by `tests/fuzz_corpus.rs` on stable).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| iuid_router::checks::iuid::check(data));
