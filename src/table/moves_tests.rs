//! `moves:` (docs/routing-table.md `moves`): how moves resolve, and every validation error at
//! its line and column. Also field ranges in overrides.

use std::path::PathBuf;

use serde_json::json;

use crate::scheme::snowflake::Layout;
use crate::source::Source;
use crate::table::{load_source, MovePhase, ResolveError, RoutingTable, Rule};

/// Lines 1–11; what follows starts at line 12.
const HEAD: &str = "version: t
regions:
  eu: { upstreams: [\"http://127.0.0.1:1\"] }
  us: { upstreams: [\"http://127.0.0.1:2\"] }
  ap: { upstreams: [\"http://127.0.0.1:3\"] }
countries: { 1: ap, 2: eu }
services: { 1: Orders }
schemes:
  posts: { kind: snowflake, layout: instagram, route_by: { field: shard }, map: { \"0-8191\": eu } }
  tw: { kind: snowflake, fields: [{ name: node, bits: 63 }], map: { \"0-9\": eu } }
default_region: eu
";

/// The line `moves:` is on.
const MOVES_LINE: usize = 12;

fn source(rest: &str) -> Source {
    Source {
        path: PathBuf::from("t.yaml"),
        text: format!("{HEAD}{rest}"),
    }
}

fn table(rest: &str) -> RoutingTable {
    load_source(&source(rest)).unwrap_or_else(|e| panic!("valid table: {e}\n{rest}"))
}

/// Every error of the table with `rest` after the head, as `line:column: message`.
fn errors(rest: &str) -> Vec<String> {
    match load_source(&source(rest)) {
        Ok(_) => Vec::new(),
        Err(e) => {
            e.0.iter()
                .map(|e| e.to_string().trim_start_matches("t.yaml:").to_owned())
                .collect()
        }
    }
}

/// 2026-06-01T00:00:00Z in ms.
const JUNE: u64 = 1_780_272_000_000;

/// Region name and rule of an iUID of `country`/`service` minted at `ms`.
fn iuid(
    t: &RoutingTable,
    country: u8,
    service: u8,
    ms: u64,
) -> Result<(String, Rule), ResolveError> {
    let id = iuid::Iuid::from_fields(ms, country, service, 7).to_string();
    t.resolve_text("iuid", id.as_bytes())
        .map(|(_, d)| (t.region(d.region).name.clone(), d.rule))
}

/// Region name and rule of a `posts` id of `shard`.
fn post(t: &RoutingTable, shard: u64) -> (String, Rule) {
    let layout = Layout::preset("instagram").expect("preset");
    let id = layout
        .compose(&[("time", 200_000_000_000), ("shard", shard)])
        .expect("id");
    let (_, d) = t
        .resolve_text("posts", id.to_string().as_bytes())
        .expect("resolves");
    (t.region(d.region).name.clone(), d.rule)
}

fn at(region: &str, rule: Rule) -> Result<(String, Rule), ResolveError> {
    Ok((region.to_owned(), rule))
}

#[test]
fn a_country_move_resolves_by_its_phase() {
    for (phase, region) in [("mirror", "ap"), ("fence", "ap"), ("flip", "us")] {
        let t = table(&format!(
            "moves:\n  - {{ name: kz-to-us, match: {{ country: 1 }}, from: ap, to: us, phase: {phase} }}\noverrides:\n  - {{ country: 2, service: Orders, region: us }}\n"
        ));
        let moved = Rule::Move { index: 0 };
        assert_eq!(iuid(&t, 1, 1, JUNE), at(region, moved), "{phase}");
        assert_eq!(iuid(&t, 1, 9, 5), at(region, moved), "{phase}");
        // Ids outside the move resolve as before.
        assert_eq!(iuid(&t, 2, 1, JUNE), at("us", Rule::Override { index: 0 }));
        assert_eq!(iuid(&t, 2, 2, JUNE), at("eu", Rule::Country { country: 2 }));
        assert!(matches!(
            iuid(&t, 3, 1, JUNE),
            Err(ResolveError::UnownedCountry { country: 3, .. })
        ));
        let m = &t.moves[0];
        assert_eq!(m.phase.as_str(), phase);
        assert_eq!((m.mirror_ratio, m.hold_ms), (0.1, 5000));
        assert_eq!(
            serde_json::to_value(m).expect("json"),
            json!({ "name": "kz-to-us", "match": { "country": 1, "region": region },
                    "from": "ap", "to": "us", "phase": phase, "mirror_ratio": 0.1,
                    "hold_ms": 5000 })
        );
    }
    assert_eq!(
        serde_json::to_value(Rule::Move { index: 0 }).expect("json"),
        json!({ "kind": "move", "index": 0 })
    );
    assert_eq!(Rule::Move { index: 0 }.label().as_str(), "move");
}

#[test]
fn a_move_wins_over_an_override_of_the_same_id() {
    let t = table(
        "moves:\n  - { name: a, match: { country: 9 }, from: eu, to: us, phase: flip, hold_ms: 100 }\n  - { name: b-2, match: { country: 1, service: Orders }, from: ap, to: eu, phase: flip, mirror_ratio: 0.5 }\noverrides:\n  - { country: 1, region: us }\n",
    );
    assert_eq!(iuid(&t, 1, 1, JUNE), at("eu", Rule::Move { index: 1 }));
    assert_eq!(iuid(&t, 1, 2, JUNE), at("us", Rule::Override { index: 0 }));
    assert_eq!(iuid(&t, 9, 2, JUNE), at("us", Rule::Move { index: 0 }));
    assert_eq!((t.moves[0].hold_ms, t.moves[1].mirror_ratio), (100, 0.5));
    assert_eq!(t.moves[1].phase, MovePhase::Flip);
}

#[test]
fn a_move_created_before_matches_older_ids_only() {
    let t = table(
        "moves:\n  - { name: old, match: { country: 1, created_before: \"2026-06-01T00:00:00Z\" }, from: ap, to: us, phase: flip }\n",
    );
    assert_eq!(iuid(&t, 1, 1, JUNE - 1), at("us", Rule::Move { index: 0 }));
    assert_eq!(iuid(&t, 1, 1, JUNE), at("ap", Rule::Country { country: 1 }));
}

#[test]
fn scheme_moves_and_overrides_take_field_ranges() {
    let t = table(
        "moves:\n  - { name: posts-2-5, match: { scheme: posts, shard: \"2-5\" }, from: eu, to: us, phase: flip }\noverrides:\n  - { scheme: posts, shard: 3, region: ap }\n  - { scheme: posts, shard: \"6-7\", region: ap }\n",
    );
    for shard in 2..=5 {
        assert_eq!(post(&t, shard), ("us".into(), Rule::Move { index: 0 }));
    }
    assert_eq!(post(&t, 1), ("eu".into(), Rule::Map { value: 1 }));
    assert_eq!(post(&t, 6), ("ap".into(), Rule::Override { index: 1 }));
    assert_eq!(post(&t, 7), ("ap".into(), Rule::Override { index: 1 }));
    assert_eq!(post(&t, 8), ("eu".into(), Rule::Map { value: 8 }));
    assert_eq!(
        serde_json::to_value(&t.overrides).expect("json"),
        json!([{ "scheme": "posts", "fields": [["shard", 3]], "region": "ap" },
               { "scheme": "posts", "fields": [["shard", "6-7"]], "region": "ap" }])
    );
    assert_eq!(
        serde_json::to_value(&t.moves[0].matcher).expect("json"),
        json!({ "scheme": "posts", "fields": [["shard", "2-5"]], "region": "us" })
    );
    // The same move in mirror resolves to `from`.
    let t = table(
        "moves:\n  - { name: p, match: { scheme: posts, shard: \"2-5\" }, from: eu, to: us, phase: mirror }\n",
    );
    assert_eq!(post(&t, 5), ("eu".into(), Rule::Move { index: 0 }));
    assert_eq!(post(&t, 6), ("eu".into(), Rule::Map { value: 6 }));
}

#[test]
fn no_moves_is_the_table_it_was() {
    let rest =
        "overrides:\n  - { country: 1, created_before: \"2026-06-01T00:00:00Z\", region: us }\n";
    let (a, b) = (table(rest), table(&format!("moves: []\n{rest}")));
    assert!(a.moves.is_empty());
    assert_eq!(a.plans, b.plans);
    assert_eq!(a.plan_index, b.plan_index);
}

#[test]
fn each_bad_move_is_reported_where_it_is() {
    let ok = "match: { country: 1 }, from: ap, to: us, phase: mirror";
    // (the move, a needle, an offset): the error is at the needle's column plus the offset.
    let cases: Vec<(String, &str, usize, &str)> = vec![
        (format!("{{ name: KZ_us, {ok} }}"), "KZ_us", 0, "[a-z0-9-]+"),
        ("{ name: a, match: { country: 1 }, from: mars, to: us, phase: fence }".into(), "mars", 0, "region `mars` is not defined"),
        ("{ name: a, match: { country: 1 }, from: ap, to: venus, phase: fence }".into(), "venus", 0, "region `venus` is not defined"),
        ("{ name: a, match: { country: 1 }, from: ap, to: ap, phase: flip }".into(), "to: ap", 4, "a move goes to another region"),
        (format!("{{ name: a, {ok}, mirror_ratio: 1.5 }}"), "1.5", 0, "mirror_ratio 1.5"),
        (format!("{{ name: a, {ok}, mirror_ratio: -0.1 }}"), "-0.1", 0, "mirror_ratio -0.1"),
        (format!("{{ name: a, {ok}, hold_ms: 0 }}"), "hold_ms: 0", 9, "hold_ms 0: 1 to 600000"),
        (format!("{{ name: a, {ok}, hold_ms: 600001 }}"), "600001", 0, "hold_ms 600001"),
        ("{ name: a, match: {}, from: ap, to: us, phase: mirror }".into(), "{}", 0, "move has no condition"),
        ("{ name: a, match: { scheme: nope, shard: 1 }, from: ap, to: us, phase: mirror }".into(), "nope", 0, "scheme `nope` is not defined"),
        ("{ name: a, match: { scheme: posts, shrad: 1 }, from: ap, to: us, phase: mirror }".into(), "1 }", 0, "unknown key `shrad`: not a field of scheme `posts`"),
        ("{ name: a, match: { scheme: posts, country: 1 }, from: ap, to: us, phase: mirror }".into(), "1 }", 0, "`country` is an iUID field"),
        ("{ name: a, match: { country: 1, shard: 2 }, from: ap, to: us, phase: mirror }".into(), "2 }", 0, "unknown key `shard` (an iUID move has"),
        ("{ name: a, match: { scheme: posts, shard: \"5-2\" }, from: ap, to: us, phase: mirror }".into(), "\"5-2\"", 0, "not a value or an inclusive range"),
        ("{ name: a, match: { scheme: posts, shard: -3 }, from: ap, to: us, phase: mirror }".into(), "-3", 0, "shard -3 is negative"),
        ("{ name: a, match: { scheme: tw, created_after: \"2026-06-01T00:00:00Z\" }, from: ap, to: us, phase: mirror }".into(), "tw", 0, "has no `time` field"),
        ("{ name: a, match: { country: 1, created_before: yesterday }, from: ap, to: us, phase: mirror }".into(), "yesterday", 0, "not an RFC 3339 timestamp"),
        ("{ name: a, match: { country: 1, created_before: \"2026-01-01T00:00:00Z\", created_after: \"2026-02-01T00:00:00Z\" }, from: ap, to: us, phase: mirror }".into(), "\"2026-02", 0, "the move can never match"),
        ("{ name: a, match: { service: Nope }, from: ap, to: us, phase: mirror }".into(), "Nope", 0, "service `Nope` is not named"),
        ("{ name: a, match: { country: 300 }, from: ap, to: us, phase: mirror }".into(), "300", 0, "country id 300 is out of range"),
    ];
    for (line, needle, offset, words) in &cases {
        let text = format!("  - {line}");
        let column = text.find(needle).expect("needle") + offset + 1;
        let want = format!("{}:{column}:", MOVES_LINE + 1);
        let got = errors(&format!("moves:\n{text}\n"));
        assert!(
            got.iter()
                .any(|e| e.starts_with(&want) && e.contains(words)),
            "{words:?} at {want} not in {got:?}\n{text}"
        );
    }
}

#[test]
fn a_name_used_twice_names_the_first() {
    let got = errors(
        "moves:\n  - { name: kz, match: { country: 1 }, from: ap, to: us, phase: mirror }\n  - { name: kz, match: { country: 2 }, from: eu, to: us, phase: mirror }\n",
    );
    assert_eq!(got.len(), 1, "{got:?}");
    let want = format!(
        "{}:13: move name `kz` is already used by moves[0] (line {})",
        MOVES_LINE + 2,
        MOVES_LINE + 1
    );
    assert!(got[0].starts_with(&want), "{got:?}");
}

#[test]
fn shapes_serde_refuses_stop_the_reading() {
    let cases: [(&str, &str); 3] = [
        (
            "{ name: a, match: { country: 1 }, from: ap, to: us, phase: move }",
            "unknown variant `move`, expected one of `mirror`, `fence`, `flip`",
        ),
        (
            "{ name: a, match: { country: 1 }, from: ap, to: us, phase: flip, colour: red }",
            "unknown field `colour`",
        ),
        (
            "{ name: a, match: { country: 1 }, from: ap, phase: flip }",
            "missing field `to`",
        ),
    ];
    for (line, words) in cases {
        let got = errors(&format!("moves:\n  - {line}\n"));
        assert!(
            got.iter()
                .any(|e| e.starts_with(&format!("{}:", MOVES_LINE + 1)) && e.contains(words)),
            "{words:?} not in {got:?}"
        );
    }
}

#[test]
fn an_override_range_is_checked_like_a_moves() {
    let text = "  - { scheme: posts, shard: \"9-3\", region: us }";
    let column = text.find("\"9-3\"").expect("needle") + 1;
    let got = errors(&format!("overrides:\n{text}\n"));
    assert!(
        got.iter()
            .any(|e| e.starts_with(&format!("{}:{column}:", MOVES_LINE + 1))
                && e.contains("not a value or an inclusive range")),
        "{got:?}"
    );
}
