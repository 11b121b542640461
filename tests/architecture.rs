//! The module layout ARCHITECTURE.md describes, checked against the code: which top-level
//! module of `src/` uses which (`crate::<module>` paths in code, comments left out), no import
//! cycle between them, and the routing table and the config never reaching into upstream
//! runtime (issue 13: routing yields a name; backend state lives elsewhere). Inside a
//! module, its files (`upstream::budget`, `upstream::health`, …) have no cycle either.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file of `src/` belongs to (`src/table/live.rs` → `table`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).expect("under src");
    let first = rel.components().next().expect("a component");
    let name = first.as_os_str().to_string_lossy();
    name.trim_end_matches(".rs").to_owned()
}

/// Module → the other top-level modules its code names as `crate::<module>`.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let from = module_of(&src, &file);
        if from == "main" || from == "lib" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read file");
        let uses = graph.entry(from.clone()).or_default();
        for line in text.lines() {
            // Comments (doc comments too) may name any module; only code counts.
            let code = line.split("//").next().unwrap_or_default();
            for (at, _) in code.match_indices("crate::") {
                let rest = &code[at + "crate::".len()..];
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() && name != from {
                    uses.insert(name);
                }
            }
        }
    }
    graph
}

/// A cycle through `start`, if there is one (depth-first search).
fn cycle_from(
    graph: &BTreeMap<String, BTreeSet<String>>,
    start: &str,
    path: &mut Vec<String>,
) -> Option<Vec<String>> {
    for next in graph
        .get(path.last().expect("non-empty"))
        .into_iter()
        .flatten()
    {
        if next == start {
            let mut cycle = path.clone();
            cycle.push(start.to_owned());
            return Some(cycle);
        }
        if !path.contains(next) {
            path.push(next.clone());
            if let Some(c) = cycle_from(graph, start, path) {
                return Some(c);
            }
            path.pop();
        }
    }
    None
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    let graph = graph();
    assert!(graph.len() > 10, "found the modules: {graph:?}");
    for module in graph.keys() {
        let cycle = cycle_from(&graph, module, &mut vec![module.clone()]);
        assert!(
            cycle.is_none(),
            "import cycle: {}",
            cycle.unwrap_or_default().join(" → ")
        );
    }
}

#[test]
fn the_table_and_the_config_use_nothing_of_upstream_runtime() {
    let graph = graph();
    // `fanout` is the pure half of asking several regions: it merges, `proxy` sends.
    for policy in ["table", "config", "scheme", "extract", "fanout"] {
        let uses = &graph[policy];
        assert!(
            !uses.contains("upstream"),
            "{policy} uses upstream: {uses:?}"
        );
        assert!(!uses.contains("proxy"), "{policy} uses proxy: {uses:?}");
    }
    // The data path reads upstream runtime; upstream reads the table, not the other way.
    assert!(graph["upstream"].contains("table"));
    assert!(graph["proxy"].contains("upstream"));
}

/// The module path of a file of `src/`: `src/upstream/budget.rs` → `upstream::budget`,
/// `src/extract/graphql/mod.rs` → `extract::graphql`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("under src");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned()
        })
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Submodule → the sibling submodules (same parent) its code names, through `super::x`,
/// `self::x` or `crate::parent::x`. Parent and child are left out: a parent declares its
/// children, and children use what their parent defines.
fn inner_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| module_path(&src, f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let me = module_path(&src, file);
        if me.len() < 2 {
            continue;
        }
        let parent = &me[..me.len() - 1];
        let is_mod_rs = file.ends_with("mod.rs");
        let text = std::fs::read_to_string(file).expect("read file");
        let uses = graph.entry(me.join("::")).or_default();
        // A file's unit tests (a `#[cfg(test)]` item, wherever it stands) may use any
        // sibling: the lines of that item are skipped, and only them.
        for line in code_lines(&text) {
            let code = line.split("//").next().unwrap_or_default();
            for (prefix, base) in [
                ("super::", parent.to_vec()),
                (
                    "self::",
                    if is_mod_rs {
                        me.clone()
                    } else {
                        parent.to_vec()
                    },
                ),
                ("crate::", Vec::new()),
            ] {
                for (at, _) in code.match_indices(prefix) {
                    // `super::` inside `crate::x::super::` and the like do not occur; a
                    // `self::` after `super::` is the same module.
                    if at > 0 && code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_') {
                        continue;
                    }
                    let rest = &code[at + prefix.len()..];
                    let mut path = base.clone();
                    for seg in rest.split("::") {
                        let seg: String = seg
                            .chars()
                            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                            .collect();
                        if seg.is_empty() {
                            break;
                        }
                        path.push(seg);
                        if !modules.contains(&path) {
                            path.pop();
                            break;
                        }
                    }
                    // A sibling: same parent, another module.
                    if path.len() == me.len() && path[..path.len() - 1] == *parent && path != me {
                        uses.insert(path.join("::"));
                    }
                }
            }
        }
    }
    graph
}

/// The lines of `text` outside its `#[cfg(test)]` items (a `mod tests { … }` counted by its
/// braces, or a `mod tests;` line).
fn code_lines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut skipping, mut depth, mut opened) = (false, 0usize, false);
    for line in text.lines() {
        if !skipping && line.trim() == "#[cfg(test)]" {
            (skipping, depth, opened) = (true, 0, false);
            continue;
        }
        if !skipping {
            out.push(line);
            continue;
        }
        let code = line.split("//").next().unwrap_or_default();
        for c in code.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
        }
        if (opened && depth == 0) || (!opened && code.trim_end().ends_with(';')) {
            skipping = false;
        }
    }
    out
}

#[test]
fn no_import_cycle_between_the_files_of_a_module() {
    let graph = inner_graph();
    assert!(
        graph
            .get("upstream::regions")
            .is_some_and(|u| u.contains("upstream::budget")),
        "the sibling graph is read: {graph:?}"
    );
    for module in graph.keys() {
        let cycle = cycle_from(&graph, module, &mut vec![module.clone()]);
        assert!(
            cycle.is_none(),
            "import cycle: {}",
            cycle.unwrap_or_default().join(" → ")
        );
    }
}

/// Issue 37: every HTTP/1.x client connection is the own engine's (`server/h1.rs`,
/// `proxy/h1/`); hyper serves HTTP/2 only. No code of `src/` may bring back a hyper (or
/// hyper-util) HTTP/1.1 server: its connection builder, or the auto server that speaks both.
#[test]
fn no_hyper_http1_server_serves_a_client_connection() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let forbidden = [
        "server::conn::http1",
        "server::conn::{http1",
        "hyper_util::server::conn::auto",
        "conn::auto::Builder",
    ];
    let mut found = Vec::new();
    let mut h2_servers = 0;
    for file in files {
        let text = std::fs::read_to_string(&file).expect("read file");
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if forbidden.iter().any(|f| code.contains(f)) {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
            if code.contains("use hyper::server::conn::http2;") {
                h2_servers += 1;
            }
        }
    }
    assert!(
        found.is_empty(),
        "a hyper HTTP/1.1 server:\n{}",
        found.join("\n")
    );
    // The scan looks where the server is made: if that line moved, this test must too.
    assert_eq!(
        h2_servers, 1,
        "hyper's HTTP/2 server is imported in one place"
    );
}

/// Every file of `src/` reads in one sitting: at most 600 lines (a module grows into a
/// folder of files, each one concern, before it passes that).
#[test]
fn no_file_in_src_is_over_600_lines() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f)
                .expect("read file")
                .lines()
                .count();
            (lines > 600).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    assert!(files.len() > 100, "read {} files", files.len());
    assert!(long.is_empty(), "files over 600 lines: {long:?}");
}

/// Where each call of `needle` is in `src/` outside tests and comments: `file:line`.
fn call_sites(needle: &str) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut sites = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read file");
        for (n, line) in code_lines(&text).iter().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            if code.contains(needle) && !code.contains("fn ") {
                let name = file.strip_prefix(&src).unwrap_or(file).display();
                sites.push(format!("{name}:{}", n + 1));
            }
        }
    }
    sites
}

/// A request's life and its exchanges with a region are each begun at one place, whatever
/// the protocol (ARCHITECTURE.md, "Where a feature goes"): a second call site of the
/// attempt loop, the request id, the access log or the in-flight gauge is a second copy
/// of what every edge feature hooks into, which a feature would then miss on one path.
#[test]
fn the_life_and_the_attempt_loop_each_have_one_call_site() {
    for (what, needle) in [
        ("the attempt loop", "attempts("),
        ("the request id", "RequestId::of("),
        ("the access log", "access::log("),
        ("the in-flight gauge", "InFlight::start("),
        ("the request counter", ".request("),
        ("the server span", "\"request\","),
        ("the trace's SERVER span", "tracing.begin("),
        ("the trace's CLIENT span", ".attempt(&at.name"),
        ("the trace's end", "trace.finish("),
    ] {
        let sites = call_sites(needle);
        assert_eq!(sites.len(), 1, "{what} ({needle}) is called at {sites:?}");
    }
}
