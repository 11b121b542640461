//! Every fuzz target's committed corpus (`fuzz/corpus/<target>/`: its seeds, and every input
//! that once broke it) replayed on stable through the checks the target runs
//! (`iuid_router::checks`, README "Fuzzing"). The HTTP/1.1 codec's corpus has its own test
//! (`tests/http1_corpus.rs`).

use std::path::Path;

/// A target's name, its check, and how many seeds its corpus has at least.
type Target = (&'static str, fn(&[u8]), usize);

const TARGETS: &[Target] = &[
    ("iuid", iuid_router::checks::iuid::check, 10),
    ("schemes", iuid_router::checks::schemes::check, 20),
    ("route", iuid_router::checks::route::check, 10),
    ("graphql", iuid_router::checks::graphql::check, 8),
    ("grpc", iuid_router::checks::grpc::check, 5),
    ("headers", iuid_router::checks::headers::check, 4),
    ("cursor", iuid_router::checks::cursor::check, 7),
    ("config", iuid_router::checks::config::check, 5),
    ("reading", iuid_router::checks::reading::check, 10),
];

#[test]
fn every_corpus_file_passes_its_targets_checks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    let mut broken = Vec::new();
    for (target, check, seeds) in TARGETS {
        let dir = root.join(target);
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|entry| entry.expect("entry").path())
            .collect();
        assert!(
            files.len() >= *seeds,
            "fuzz/corpus/{target} has {} files",
            files.len()
        );
        for file in files {
            let data = std::fs::read(&file).expect("read a corpus file");
            if std::panic::catch_unwind(|| check(&data)).is_err() {
                broken.push(format!("{target}/{}", file.display()));
            }
        }
    }
    assert!(broken.is_empty(), "invariants broken by {broken:?}");
}

/// Every fuzz target under `fuzz/fuzz_targets/` is replayed here or in `http1_corpus.rs`.
#[test]
fn every_fuzz_target_has_a_corpus_replayed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/fuzz_targets");
    for entry in std::fs::read_dir(dir).expect("fuzz/fuzz_targets") {
        let name = entry.expect("entry").path();
        let stem = name
            .file_stem()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        assert!(
            stem == "http1" || TARGETS.iter().any(|(t, _, _)| *t == stem),
            "fuzz target {stem} has no corpus replay"
        );
    }
}
