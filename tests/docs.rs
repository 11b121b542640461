//! `docs/` is the behaviour reference the code cites; these tests keep it from drifting.
//!
//! - Every key documented in `docs/config.md` and `docs/routing-table.md` is accepted: its
//!   row's example, added to a minimal valid file, passes the real `iuid-router check`.
//! - Every key `check` accepts is documented: each section of both files (every prefix of a
//!   documented key) is probed with an unknown key, and the keys serde lists in its
//!   `unknown field …, expected one of …` error must be the documented ones.
//! - Where a key's type is a choice (`` `a` \| `b` ``), another value is refused and the
//!   error lists exactly the documented values.
//! - Every problem type of `src/problem/mod.rs` is in `docs/errors.md`, every metric of
//!   every file of `src/metrics/` in `docs/metrics.md`, and every docs file in
//!   `docs/README.md`.
//!
//! A failure names the missing key, slug or metric, and the docs line to fix.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_yaml::{Mapping, Value};

/// The key a probe adds where it looks for the accepted ones.
const PROBE: &str = "zz_undocumented";

/// The config every `docs/config.md` example is added to.
const BASE_CONFIG: &str = "listen: 127.0.0.1:8080\nregion: eu\nrouting_table: routing-table.yaml\n";

/// The table every `docs/routing-table.md` example is added to, and the config's table.
const BASE_TABLE: &str = r#"version: docs-test
regions:
  eu: { upstreams: ["http://127.0.0.1:1"] }
  us: { upstreams: ["http://127.0.0.1:2"] }
  ap: { upstreams: ["http://127.0.0.1:3"] }
schemes:
  posts: { kind: snowflake, layout: instagram, route_by: { field: shard }, map: { "0-8191": eu } }
default_region: eu
"#;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// One row of a key table: the key's dotted path and its example, with the line.
#[derive(Debug)]
struct Row {
    key: String,
    /// The type column (the second).
    kind: String,
    example: String,
    line: usize,
}

/// A Markdown table row's cells, split at `|` but not at `\|`.
fn cells(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cell = String::new();
    let mut escaped = false;
    for c in line.chars() {
        match c {
            '|' if !escaped => out.push(std::mem::take(&mut cell).trim().to_owned()),
            _ => cell.push(c),
        }
        escaped = c == '\\';
    }
    out.push(cell.trim().to_owned());
    // The text before the first `|` and after the last.
    out.remove(0);
    out.pop();
    out
}

fn unquote(cell: &str) -> &str {
    cell.strip_prefix('`')
        .and_then(|c| c.strip_suffix('`'))
        .unwrap_or(cell)
}

/// The key rows of `docs/<file>`: lines whose first cell is a key in backticks, in tables
/// whose fourth column is the example.
fn key_rows(file: &str) -> Vec<Row> {
    let text = read(&format!("docs/{file}"));
    let mut rows = Vec::new();
    let mut example_column = None;
    for (i, line) in text.lines().enumerate() {
        if !line.starts_with('|') {
            example_column = None;
            continue;
        }
        let cells = cells(line);
        if example_column.is_none() {
            example_column = cells.iter().position(|c| c == "example");
            continue;
        }
        let (Some(col), Some(first)) = (example_column, cells.first()) else {
            continue;
        };
        if !first.starts_with('`') {
            continue;
        }
        rows.push(Row {
            key: unquote(first).to_owned(),
            kind: cells.get(1).cloned().unwrap_or_default(),
            example: unquote(cells.get(col).map_or("", String::as_str)).to_owned(),
            line: i + 1,
        });
    }
    assert!(!rows.is_empty(), "docs/{file} has no key table");
    rows
}

/// One step of a dotted key path: a key (`None`: one the operator chooses, `<name>`) and
/// whether its value is a list (`[]`).
fn steps(key: &str) -> Vec<(Option<&str>, bool)> {
    key.split('.')
        .map(|part| {
            let (name, list) = match part.strip_suffix("[]") {
                Some(name) => (name, true),
                None => (part, false),
            };
            ((!name.starts_with('<')).then_some(name), list)
        })
        .collect()
}

/// Whether `value` has the dotted `key` (any list item, any operator-chosen key).
fn has_key(value: &Value, key: &str) -> bool {
    let mut here = vec![value];
    for (name, list) in steps(key) {
        let mut next: Vec<&Value> = Vec::new();
        for v in here {
            let Some(map) = v.as_mapping() else { continue };
            match name {
                Some(name) => next.extend(map.get(name)),
                None => next.extend(map.values()),
            }
        }
        if list {
            next = next
                .into_iter()
                .filter_map(Value::as_sequence)
                .flatten()
                .collect();
        }
        here = next;
    }
    !here.is_empty()
}

/// `base` with the top-level entries of `extra` set (replacing the base's).
fn merged(base: &str, extra: &Value) -> String {
    let mut map: Mapping = serde_yaml::from_str(base).expect("base yaml");
    for (k, v) in extra.as_mapping().expect("a mapping") {
        map.insert(k.clone(), v.clone());
    }
    serde_yaml::to_string(&map).expect("yaml")
}

/// A directory holding the files the examples name: certificates (a CA, `edge` for the
/// listener, `edge-client` for mTLS to upstreams) and an admin token.
fn fixtures() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = dir.path().join("certs");
    for args in [&["edge"][..], &["--client", "edge-client"][..]] {
        let out = Command::new("bash")
            .arg(repo().join("config/make-certs.sh"))
            .args(&args[..args.len() - 1])
            .arg(&certs)
            .arg(args[args.len() - 1])
            .output()
            .expect("bash");
        assert!(
            out.status.success(),
            "config/make-certs.sh (needs openssl): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::create_dir_all(dir.path().join("secrets")).expect("mkdir");
    std::fs::write(
        dir.path().join("secrets/admin-token"),
        "0123456789abcdef".repeat(4),
    )
    .expect("token");
    dir
}

/// Runs `iuid-router check` on `config` and `table` written into `dir`: success and output.
fn check(dir: &Path, config: &str, table: &str) -> (bool, String) {
    let config_path: PathBuf = dir.join("router.yaml");
    std::fs::write(&config_path, config).expect("write config");
    std::fs::write(dir.join("routing-table.yaml"), table).expect("write table");
    let out = Command::new(env!("CARGO_BIN_EXE_iuid-router"))
        .arg("check")
        .arg("--config")
        .arg(&config_path)
        .output()
        .expect("run iuid-router check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Which file a docs page describes.
#[derive(Clone, Copy)]
enum File {
    Config,
    Table,
}

impl File {
    fn doc(self) -> &'static str {
        match self {
            File::Config => "config.md",
            File::Table => "routing-table.md",
        }
    }

    fn name(self) -> &'static str {
        match self {
            File::Config => "router.yaml",
            File::Table => "routing-table.yaml",
        }
    }

    /// `check` on the base files with `extra` set in this one.
    fn check(self, dir: &Path, extra: &Value) -> (bool, String) {
        match self {
            File::Config => check(dir, &merged(BASE_CONFIG, extra), BASE_TABLE),
            File::Table => check(dir, BASE_CONFIG, &merged(BASE_TABLE, extra)),
        }
    }
}

/// Every documented key's example uses the key and passes `check`.
fn documented_keys_are_accepted(file: File) {
    let dir = fixtures();
    let mut failures = Vec::new();
    for row in key_rows(file.doc()) {
        let at = format!("docs/{}:{}: `{}`", file.doc(), row.line, row.key);
        let example: Value = match serde_yaml::from_str(&row.example) {
            Ok(v @ Value::Mapping(_)) => v,
            _ => {
                failures.push(format!(
                    "{at}: the example `{}` is no YAML mapping",
                    row.example
                ));
                continue;
            }
        };
        if !has_key(&example, &row.key) {
            failures.push(format!(
                "{at}: the example `{}` does not use the key",
                row.example
            ));
            continue;
        }
        let (ok, output) = file.check(dir.path(), &example);
        if !ok {
            failures.push(format!(
                "{at}: check refuses the example `{}`:\n{output}",
                row.example
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The documented keys right under `prefix` (`""`: the top level), with `<…>` for keys the
/// operator chooses.
fn children(keys: &BTreeSet<String>, prefix: &str) -> BTreeSet<String> {
    keys.iter()
        .filter_map(|k| match prefix {
            "" => Some(k.as_str()),
            p => k.strip_prefix(p)?.strip_prefix('.'),
        })
        .map(|rest| {
            let end = rest.find(['.', '[']).unwrap_or(rest.len());
            rest[..end].to_owned()
        })
        .collect()
}

/// Every section of the documented keys (`""`, `limits`, `routes[]`, `regions.<name>.tls`, …)
/// whose keys are fixed names, not ones the operator chooses.
fn sections(keys: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::from([String::new()]);
    for key in keys {
        let mut at = 0;
        while let Some(dot) = key[at..].find('.') {
            out.insert(key[..at + dot].to_owned());
            at += dot + 1;
        }
    }
    out.retain(|s| children(keys, s).iter().any(|c| !c.starts_with('<')));
    out
}

/// A file fragment with the unknown key [`PROBE`] in `section`; operator-chosen keys are
/// given as `1` (`<id>`) or `eu`.
fn probe(section: &str) -> Value {
    let mut value = Value::Mapping(Mapping::from_iter([(Value::from(PROBE), Value::from(1))]));
    if section.is_empty() {
        return value;
    }
    for (name, list) in steps(section).into_iter().rev() {
        if list {
            value = Value::Sequence(vec![value]);
        }
        let key = match name {
            Some(name) => Value::from(name),
            None if section.contains("<id>") => Value::from(1),
            None => Value::from("eu"),
        };
        value = Value::Mapping(Mapping::from_iter([(key, value)]));
    }
    value
}

/// The keys serde lists after `unknown field `zz_undocumented`, expected …`.
fn listed_keys(output: &str) -> Option<BTreeSet<String>> {
    let line = output
        .lines()
        .find(|l| l.contains(&format!("unknown field `{PROBE}`")))?;
    let rest = line.split_once(", expected")?.1;
    Some(
        rest.split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// The fields of `OverrideSpec` (it has flattened field predicates, so serde cannot list its
/// keys): `pub name:` lines, the flattened matchers (`MatchSpec`) read the same way, their
/// flattened field predicates as `<field>`.
fn override_keys() -> BTreeSet<String> {
    struct_keys("OverrideSpec")
}

/// The keys of the struct `name` of src/table/model.rs, a flattened struct's keys among them.
fn struct_keys(name: &str) -> BTreeSet<String> {
    let model = read("src/table/model.rs");
    let body = model
        .split_once(&format!("pub struct {name} {{"))
        .and_then(|(_, rest)| rest.split_once("\n}"))
        .unwrap_or_else(|| panic!("{name} in src/table/model.rs"))
        .0;
    let mut out = BTreeSet::new();
    let mut flatten = false;
    for line in body.lines().map(str::trim) {
        if line.contains("flatten") {
            flatten = true;
        }
        if let Some((field, ty)) = line.strip_prefix("pub ").and_then(|l| l.split_once(':')) {
            let ty = ty.trim().trim_end_matches(',');
            match (flatten, ty) {
                (true, "MatchSpec") => out.extend(struct_keys(ty)),
                (true, _) => {
                    out.insert("<field>".to_owned());
                }
                (false, _) => {
                    out.insert(field.to_owned());
                }
            }
            flatten = false;
        }
    }
    out
}

/// Every key `check` accepts in every documented section is documented, and no other.
fn accepted_keys_are_documented(file: File) {
    let dir = fixtures();
    let keys: BTreeSet<String> = key_rows(file.doc()).into_iter().map(|r| r.key).collect();
    let mut failures = Vec::new();
    for section in sections(&keys) {
        let documented = children(&keys, &section);
        let accepted = if section == "overrides[]" {
            override_keys()
        } else {
            let (_, output) = file.check(dir.path(), &probe(&section));
            match listed_keys(&output) {
                Some(keys) => keys,
                None => {
                    failures.push(format!(
                        "probing `{section}` of {} with `{PROBE}` did not list the keys it \
                         accepts:\n{output}",
                        file.name()
                    ));
                    continue;
                }
            }
        };
        let full = |k: &String| match section.as_str() {
            "" => k.clone(),
            s => format!("{s}.{k}"),
        };
        for k in accepted.difference(&documented) {
            failures.push(format!(
                "{} accepts `{}`, which docs/{} does not document",
                file.name(),
                full(k),
                file.doc()
            ));
        }
        for k in documented.difference(&accepted) {
            failures.push(format!(
                "docs/{} documents `{}`, which {} does not accept",
                file.doc(),
                full(k),
                file.name()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The values a row's type column lists, when it is a choice: `` `a` \| `b` `` (quotes
/// around a value dropped).
fn choices(kind: &str) -> Option<BTreeSet<String>> {
    if !kind.contains("\\|") {
        return None;
    }
    kind.split("\\|")
        .map(|v| {
            let v = v.trim();
            let inner = v.strip_prefix('`')?.strip_suffix('`')?;
            (!inner.contains('`')).then(|| inner.trim_matches('"').to_owned())
        })
        .collect()
}

/// Sets every place of the dotted `key` in `value` to `to`; whether there was one.
fn set_key(value: &mut Value, key: &str, to: &Value) -> bool {
    fn walk(v: &mut Value, steps: &[(Option<&str>, bool)], to: &Value) -> bool {
        let Some(((name, list), rest)) = steps.split_first() else {
            *v = to.clone();
            return true;
        };
        let Some(map) = v.as_mapping_mut() else {
            return false;
        };
        let mut found = false;
        for (k, child) in map.iter_mut() {
            if name.is_some_and(|n| k.as_str() != Some(n)) {
                continue;
            }
            if *list {
                for item in child.as_sequence_mut().into_iter().flatten() {
                    found |= walk(item, rest, to);
                }
            } else {
                found |= walk(child, rest, to);
            }
        }
        found
    }
    walk(value, &steps(key), to)
}

/// For every key whose type is a choice of values, `check` refuses another value, and its
/// error lists exactly the documented values (serde's `unknown variant …, expected …`), or
/// at least names each of them (the table's own messages for `kind` and `layout`).
fn documented_choices_are_the_accepted_ones(file: File) {
    let dir = fixtures();
    let mut failures = Vec::new();
    for row in key_rows(file.doc()) {
        let Some(documented) = choices(&row.kind) else {
            continue;
        };
        let at = format!("docs/{}:{}: `{}`", file.doc(), row.line, row.key);
        let mut example: Value = serde_yaml::from_str(&row.example).expect("example");
        assert!(set_key(&mut example, &row.key, &Value::from(PROBE)), "{at}");
        let (ok, output) = file.check(dir.path(), &example);
        if ok {
            failures.push(format!("{at}: check accepts the value `{PROBE}`"));
            continue;
        }
        let listed = output
            .lines()
            .find(|l| l.contains(&format!("unknown variant `{PROBE}`")))
            .and_then(|l| l.split_once(", expected"))
            .map(|(_, rest)| -> BTreeSet<String> {
                rest.split('`')
                    .skip(1)
                    .step_by(2)
                    .map(str::to_owned)
                    .collect()
            });
        match listed {
            Some(accepted) if accepted != documented => failures.push(format!(
                "{at}: documented values {documented:?}, but check accepts {accepted:?}"
            )),
            Some(_) => {}
            None => {
                for value in documented.iter().filter(|v| !output.contains(v.as_str())) {
                    failures.push(format!(
                        "{at}: refusing `{PROBE}`, check does not name the documented value \
                         `{value}`:\n{output}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn documented_config_choices_are_the_accepted_ones() {
    documented_choices_are_the_accepted_ones(File::Config);
}

#[test]
fn documented_table_choices_are_the_accepted_ones() {
    documented_choices_are_the_accepted_ones(File::Table);
}

#[test]
fn documented_config_keys_are_accepted() {
    documented_keys_are_accepted(File::Config);
}

#[test]
fn accepted_config_keys_are_documented() {
    accepted_keys_are_documented(File::Config);
}

#[test]
fn documented_table_keys_are_accepted() {
    documented_keys_are_accepted(File::Table);
}

#[test]
fn accepted_table_keys_are_documented() {
    accepted_keys_are_documented(File::Table);
}

/// The first cells in backticks of every table row of `docs/<file>`.
fn first_cells(file: &str) -> BTreeSet<String> {
    read(&format!("docs/{file}"))
        .lines()
        .filter(|l| l.starts_with('|'))
        .filter_map(|l| cells(l).into_iter().next())
        .filter(|c| c.starts_with('`'))
        .map(|c| unquote(&c).to_owned())
        .collect()
}

/// The string literals of `text`.
fn literals(text: &str) -> Vec<&str> {
    text.split('"').skip(1).step_by(2).collect()
}

#[test]
fn every_problem_type_is_documented() {
    let source = read("src/problem/mod.rs");
    let body = source
        .split_once("fn slug_and_title")
        .and_then(|(_, rest)| rest.split_once("\n    fn "))
        .expect("slug_and_title in src/problem/mod.rs")
        .0;
    // The slugs: the literals in lowercase words joined by `-` (titles have capitals).
    let slugs: BTreeSet<&str> = literals(body)
        .into_iter()
        .filter(|s| {
            !s.is_empty()
                && s.split('-')
                    .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase()))
        })
        .collect();
    assert!(
        slugs.len() > 10,
        "few slugs found in src/problem/mod.rs: {slugs:?}"
    );
    let documented = first_cells("errors.md");
    let missing: Vec<_> = slugs.iter().filter(|s| !documented.contains(**s)).collect();
    assert!(
        missing.is_empty(),
        "problem types of src/problem/mod.rs not in a table of docs/errors.md (first column, \
         `slug`): {missing:?}"
    );
}

#[test]
fn every_metric_is_documented() {
    // Every file of `src/metrics/` declares metrics (`mod.rs`, `moves.rs`, …).
    let mut files = Vec::new();
    files_under(&repo().join("src/metrics"), &[".rs"], &mut files);
    files.sort();
    let mut names: Vec<(String, String)> = Vec::new();
    for path in &files {
        let shown = path
            .strip_prefix(repo())
            .unwrap_or(path)
            .display()
            .to_string();
        let source = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{shown}: {e}"));
        names.extend(
            source
                .lines()
                .filter(|l| l.starts_with("pub const ") && l.contains(": &str = \""))
                .flat_map(literals)
                .map(|n| (n.to_owned(), shown.clone())),
        );
    }
    assert!(
        names.len() > 10,
        "few metrics found in src/metrics/: {names:?}"
    );
    assert!(
        files.iter().any(|f| f.ends_with("moves.rs")),
        "src/metrics/moves.rs is read: {files:?}"
    );
    let documented = first_cells("metrics.md");
    let missing: Vec<_> = names
        .iter()
        .filter(|(n, _)| !documented.contains(n))
        .map(|(n, file)| format!("{n} ({file})"))
        .collect();
    assert!(
        missing.is_empty(),
        "metrics of src/metrics/ not in a table of docs/metrics.md (first column, `name`): \
         {missing:?}"
    );
}

#[test]
fn every_docs_file_is_in_the_index() {
    let index = read("docs/README.md");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(repo().join("docs")).expect("docs/") {
        let name = entry
            .expect("entry")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".md") && name != "README.md" && !index.contains(&format!("({name})")) {
            missing.push(name);
        }
    }
    assert!(
        missing.is_empty(),
        "docs/README.md does not link {missing:?}"
    );
}

/// GitHub's anchor of a Markdown heading: lowercase, punctuation but `-` and `_` dropped,
/// spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of `docs/<file>`'s headings, or `None` if there is no such file.
fn anchors(file: &str) -> Option<BTreeSet<String>> {
    let text = std::fs::read_to_string(repo().join("docs").join(file)).ok()?;
    Some(
        text.lines()
            .filter_map(|l| l.strip_prefix('#'))
            .map(|l| anchor(l.trim_start_matches('#')))
            .collect(),
    )
}

/// Every `docs/<name>.md` or `docs/<name>.md#<anchor>` in `text`, with its line.
fn doc_references(text: &str) -> Vec<(usize, String, Option<String>)> {
    let word = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_');
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for (at, _) in line.match_indices("docs/") {
            let rest = &line[at + 5..];
            let name_len = rest.find(|c: char| !word(c)).unwrap_or(rest.len());
            let Some(after) = rest[name_len..].strip_prefix(".md") else {
                continue;
            };
            let file = format!("{}.md", &rest[..name_len]);
            let anchor = after
                .strip_prefix('#')
                .map(|a| a[..a.find(|c: char| !word(c)).unwrap_or(a.len())].to_owned());
            out.push((i + 1, file, anchor));
        }
    }
    out
}

/// The files under `dir` (recursively) whose names end in one of `exts`.
fn files_under(dir: &Path, exts: &[&str], out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, exts, out);
        } else if exts.iter().any(|e| path.to_string_lossy().ends_with(e)) {
            out.push(path);
        }
    }
}

/// Links between docs files, and citations of `docs/…md#…` in the code, tests and guides,
/// lead to a file and a heading that exist.
#[test]
fn references_into_docs_resolve() {
    let mut failures = Vec::new();
    let mut check = |at: String, file: &str, anchor: Option<&str>| match anchors(file) {
        None => failures.push(format!("{at}: no file docs/{file}")),
        Some(found) => {
            if let Some(a) = anchor.filter(|a| !found.contains(*a)) {
                failures.push(format!("{at}: docs/{file} has no heading #{a}"));
            }
        }
    };
    // Links inside docs/: `](file.md)` and `](file.md#anchor)`.
    let mut docs = Vec::new();
    files_under(&repo().join("docs"), &[".md"], &mut docs);
    for path in &docs {
        let text = std::fs::read_to_string(path).expect("read docs");
        let name = path
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        for (i, line) in text.lines().enumerate() {
            for (at, _) in line.match_indices("](") {
                let target = &line[at + 2..];
                let target = &target[..target.find(')').unwrap_or(target.len())];
                if target.contains("://") || target.starts_with("../") {
                    continue;
                }
                let (file, anchor) = match target.split_once('#') {
                    Some(("", a)) => (name.as_str(), Some(a)),
                    Some((f, a)) => (f, Some(a)),
                    None => (target, None),
                };
                if file.ends_with(".md") {
                    check(format!("docs/{name}:{}", i + 1), file, anchor);
                }
            }
        }
    }
    // Citations elsewhere: `docs/<file>.md#<anchor>` in source, tests and the guides.
    let mut cited = Vec::new();
    for dir in [
        "src", "crates", "tests", "benches", "deploy", "config", "bench",
    ] {
        files_under(
            &repo().join(dir),
            &[".rs", ".md", ".yaml", ".sh", ".js", ".html"],
            &mut cited,
        );
    }
    cited.extend(["README.md", "ARCHITECTURE.md"].map(|f| repo().join(f)));
    for path in cited {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let shown = path
            .strip_prefix(repo())
            .unwrap_or(&path)
            .display()
            .to_string();
        for (line, file, anchor) in doc_references(&text) {
            check(format!("{shown}:{line}"), &file, anchor.as_deref());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The code and the guides cite `docs/`, which is in the repository, not a contract kept
/// elsewhere: no `SPEC §N` citation is left for a reader who cannot follow it.
#[test]
fn no_citation_of_a_document_outside_the_repository() {
    let mut files = Vec::new();
    for dir in [
        "src", "crates", "tests", "benches", "deploy", "config", "bench",
    ] {
        files_under(
            &repo().join(dir),
            &[".rs", ".md", ".yaml", ".sh", ".js", ".html", ".py"],
            &mut files,
        );
    }
    files.extend(["README.md", "ARCHITECTURE.md", "Cargo.toml"].map(|f| repo().join(f)));
    let this = repo().join("tests/docs.rs");
    let mut found = Vec::new();
    for path in files.iter().filter(|p| **p != this) {
        let Ok(text) = std::fs::read_to_string(path) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            if line.contains("SPEC §") || line.contains("SPEC.md") {
                let shown = path
                    .strip_prefix(repo())
                    .unwrap_or(path)
                    .display()
                    .to_string();
                found.push(format!("{shown}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite docs/ instead:\n{}",
        found.join("\n")
    );
}
