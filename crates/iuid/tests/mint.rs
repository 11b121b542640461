//! Minting: strictly increasing ids per generator (docs/iuid.md, RFC 9562 §6.2).

use std::sync::Arc;

use iuid::{Generator, Iuid};

#[test]
fn ten_thousand_ids_strictly_increase_and_keep_their_fields() {
    let g = Generator::new(42, 5);
    let ids: Vec<Iuid> = (0..10_000).map(|_| g.mint()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    assert!(ids
        .iter()
        .all(|i| i.country() == 42 && i.service_entity() == 5));
    let texts: Vec<String> = ids.iter().map(Iuid::to_string).collect();
    assert!(
        texts.windows(2).all(|w| w[0] < w[1]),
        "text order is id order"
    );
}

#[test]
fn a_clock_that_steps_back_still_gives_increasing_ids() {
    let g = Generator::new(7, 9);
    let now = 1_800_000_000_000;
    let mut last = g.mint_at(now);
    for step in 0..2_000u64 {
        // Five seconds back, then creeping forward again.
        let clock = now - 5_000 + step;
        let id = g.mint_at(clock);
        assert!(id > last, "step {step}");
        assert_eq!(
            id.unix_ts_ms(),
            now,
            "the timestamp holds while the clock is behind"
        );
        assert_eq!((id.country(), id.service_entity()), (7, 9));
        last = id;
    }
    let later = g.mint_at(now + 1);
    assert!(later > last);
    assert_eq!(later.unix_ts_ms(), now + 1);
}

#[test]
fn threads_sharing_a_generator_get_distinct_increasing_ids() {
    let g = Arc::new(Generator::new(3, 4));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let g = g.clone();
            std::thread::spawn(move || (0..5_000).map(|_| g.mint()).collect::<Vec<_>>())
        })
        .collect();
    let mut all = Vec::new();
    for h in handles {
        let ids = h.join().expect("thread");
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "each thread sees increasing ids"
        );
        all.extend(ids);
    }
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n, "no id minted twice");
}

proptest::proptest! {
    /// Whatever the clock does (forward, still, back), each id is greater than the last.
    #[test]
    fn any_clock_sequence_gives_increasing_ids(
        clock in proptest::collection::vec(1_700_000_000_000u64..1_700_000_010_000, 1..500)
    ) {
        let g = Generator::new(2, 1);
        let ids: Vec<Iuid> = clock.iter().map(|&t| g.mint_at(t)).collect();
        proptest::prop_assert!(ids.windows(2).all(|w| w[0] < w[1]));
    }
}
