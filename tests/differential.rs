//! Issue 61's differential test (docs/data-path.md, "One reading of a request"): the router's
//! path normaliser and query reader against the readings of the frameworks behind it, on
//! generated input. Every input either reads as every reference reads it, or is refused.
//!
//! - Property tests (proptest) against the references in `iuid_router::checks::reading`:
//!   Go's `path.Clean(url.PathUnescape(path))`, Go's query reading (`&` and `;`), PHP's
//!   (`name[]`, `.` for `_`, maps), each first-wins and last-wins.
//! - A generated corpus read by Python's own `urllib.parse` (`tests/differential/readings.py`,
//!   `#[ignore]`d: it needs python3, which `.ci/run` has).
//!
//! Inputs are built from the spellings the issue found: escapes of unreserved and reserved
//! bytes (`%61`, `%2E`, `%2F`, `%5C`, `%25`, a bad `%`), dot segments, repeated and trailing
//! slashes; `&`, `;`, `[]`, `[k]`, `.`, `+` and repeated names in queries.

use iuid_router::checks::reading::{
    check_path, check_query, check_query_against, path_reading, query_readings, Read, NAME,
};
use proptest::prelude::*;

/// Path segments, in the spellings the issue found (and a few that are plain).
const SEGMENTS: &[&str] = &[
    "v1",
    "orders",
    "rl",
    "ip",
    "p%61yments",
    "%69p",
    ".",
    "..",
    "",
    "%2E",
    "%2e%2E",
    "%2F",
    "%2f",
    "%5C",
    "%25",
    "%zz",
    "%4",
    "%",
    "%7B",
    "%7d",
    "a%20b",
    "x",
    ".well-known",
    "...",
    "%7E",
    "017f22e2-79b0-802a-8144-dc0c0c07398f",
    "%30%31",
    "a+b",
    ";x=1",
];

/// Query pieces: names (in PHP's spellings too), values, separators.
const NAMES: &[&str] = &[
    "order_id",
    "order_id[]",
    "order.id",
    "order+id",
    "order%5Fid",
    "order_id[k]",
    "order_idx",
    "x",
    "order_id%5B%5D",
    "",
];
const VALUES: &[&str] = &[
    "u",
    "a",
    "",
    "u;x=1",
    "a+b",
    "%2B",
    "%75",
    "%zz",
    "u%3Bv",
    "017f22e2-79b0-802a-8144-dc0c0c07398f",
];
const SEPARATORS: &[&str] = &["&", ";", "&&", ";&"];

fn path_strategy() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(prop::sample::select(SEGMENTS), 0..7),
        any::<bool>(),
    )
        .prop_map(|(segments, trailing)| {
            let mut path = format!("/{}", segments.join("/"));
            if trailing {
                path.push('/');
            }
            path
        })
}

fn query_strategy() -> impl Strategy<Value = String> {
    prop::collection::vec(
        (
            prop::sample::select(NAMES),
            prop::sample::select(VALUES),
            prop::sample::select(SEPARATORS),
            any::<bool>(),
        ),
        0..5,
    )
    .prop_map(|pairs| {
        let mut query = String::new();
        for (i, (name, value, sep, with_eq)) in pairs.into_iter().enumerate() {
            if i > 0 {
                query.push_str(sep);
            }
            query.push_str(name);
            if with_eq {
                query.push('=');
                query.push_str(value);
            }
        }
        query
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    #[test]
    fn a_path_reads_as_go_reads_it_or_is_refused(path in path_strategy()) {
        check_path(&path);
    }

    #[test]
    fn a_query_parameter_reads_as_go_and_php_read_it_or_is_refused(query in query_strategy()) {
        check_query(&query);
    }
}

/// The corpus for Python: `n` paths and queries from the strategies, with a fixed seed.
fn corpus(n: usize) -> (Vec<String>, Vec<String>) {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &[61; 32]);
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let mut draw = |s: &dyn Fn(&mut TestRunner) -> String| (0..n).map(|_| s(&mut runner)).collect();
    let paths = draw(&|r| path_strategy().new_tree(r).expect("tree").current());
    let queries = draw(&|r| query_strategy().new_tree(r).expect("tree").current());
    (paths, queries)
}

/// A string Python printed from latin-1 text, as the bytes it stands for.
fn latin1(text: &str) -> Vec<u8> {
    text.chars().map(|c| c as u32 as u8).collect()
}

#[test]
#[ignore = "needs python3 (bash .ci/run has it and runs this)"]
fn paths_and_queries_read_as_pythons_urllib_reads_them_or_are_refused() {
    let (paths, queries) = corpus(3000);
    let input = serde_json::json!({"paths": paths, "queries": queries, "name": NAME});
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/differential/readings.py"
    );
    let mut child = std::process::Command::new("python3")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    std::io::Write::write_all(
        child.stdin.as_mut().expect("stdin"),
        input.to_string().as_bytes(),
    )
    .expect("corpus written");
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("python3 finished");
    assert!(out.status.success(), "readings.py failed");
    let read: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");

    let (mut agreed, mut refused) = (0, 0);
    for (path, python) in paths.iter().zip(read["paths"].as_array().expect("paths")) {
        let python = latin1(python.as_str().expect("a path"));
        match path_reading(path) {
            Some(router) => {
                assert_eq!(
                    String::from_utf8_lossy(&router),
                    String::from_utf8_lossy(&python),
                    "path {path:?}: router vs Python"
                );
                agreed += 1;
            }
            None => refused += 1,
        }
        check_path(path);
    }
    for (query, python) in queries
        .iter()
        .zip(read["queries"].as_array().expect("queries"))
    {
        let value = |i: usize| match latin1(python[i].as_str().expect("a value")) {
            v if v.is_empty() => Read::Absent,
            v => Read::Value(v),
        };
        let mut readings = query_readings(query);
        readings.push(("python first", value(0)));
        readings.push(("python last", value(1)));
        check_query_against(query, &readings);
    }
    // The corpus exercises both outcomes.
    assert!(
        agreed > 300 && refused > 300,
        "agreed {agreed}, refused {refused}"
    );
    let routed = queries
        .iter()
        .filter(|q| matches!(iuid_router::extract::query::param(q, NAME), Ok(Some(_))))
        .count();
    let refused_queries = queries
        .iter()
        .filter(|q| iuid_router::extract::query::param(q, NAME).is_err())
        .count();
    assert!(
        routed > 300 && refused_queries > 300,
        "routed {routed}, refused {refused_queries}"
    );
}
