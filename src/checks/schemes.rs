//! Each id scheme the shipped table declares (docs/schemes.md), on arbitrary text: an id
//! that parses resolves to a declared region or to a reasoned refusal, and reads the same
//! twice.

use super::{declared, shipped};
use crate::scheme::IUID;

/// The first byte picks the scheme (`iuid` and each of the table's), the rest is the text.
pub fn check(data: &[u8]) {
    let Some((&pick, text)) = data.split_first() else {
        return;
    };
    let (_, table) = shipped();
    let mut names = table.scheme_names();
    names.push(IUID);
    let scheme = names[usize::from(pick) % names.len()];
    let first = table.resolve_text(scheme, text);
    if let Ok((key, decision)) = &first {
        declared(table, decision.region, &(scheme, text));
        if let Some((_, kind)) = table.scheme(scheme) {
            let _ = kind.created_ms(key);
            for i in 0..kind.fields().len() {
                let _ = kind.field(key, i);
            }
        }
    }
    let second = table.resolve_text(scheme, text);
    assert_eq!(
        first.as_ref().map(|(_, d)| d.region),
        second.as_ref().map(|(_, d)| d.region),
        "{scheme} {text:?} resolved twice differently"
    );
}
