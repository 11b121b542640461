//! Weighted rendezvous (highest random weight) hashing, fixed by docs/schemes.md so that services in
//! any language place a key where the router does:
//!
//! for each region `r`: `h = xxHash64(seed 0)` of the bytes `r ‖ 0x00 ‖ key`,
//! `u = (h + 0.5) / 2^64`, `score = −weight / ln(u)` (in f64); the highest score wins, a tie
//! goes to the smaller region name.
//!
//! Adding or removing a region moves only the keys it gains or loses (about `weight / total`
//! of them), since every other region's score for a key is unchanged.

use xxhash_rust::xxh64::xxh64;

/// Longest `region ‖ 0 ‖ key` hashed from a stack buffer; longer ones (never with valid
/// names and keys) go through the heap.
const STACK: usize = 320;

/// The score of `region` (with `weight`) for `key`.
#[inline]
pub fn score(region: &[u8], weight: f64, key: &[u8]) -> f64 {
    let len = region.len() + 1 + key.len();
    let h = if len <= STACK {
        let mut buf = [0u8; STACK];
        buf[..region.len()].copy_from_slice(region);
        buf[region.len() + 1..len].copy_from_slice(key);
        xxh64(&buf[..len], 0)
    } else {
        let mut buf = Vec::with_capacity(len);
        buf.extend_from_slice(region);
        buf.push(0);
        buf.extend_from_slice(key);
        xxh64(&buf, 0)
    };
    let u = (h as f64 + 0.5) / 18_446_744_073_709_551_616.0;
    -weight / u.ln()
}

/// The index in `regions` (`(name, weight)`, weights > 0) that `key` is placed in; `None`
/// when `regions` is empty.
pub fn place<N: AsRef<[u8]>>(regions: &[(N, f64)], key: &[u8]) -> Option<usize> {
    let mut best: Option<(usize, f64)> = None;
    for (i, (name, weight)) in regions.iter().enumerate() {
        let s = score(name.as_ref(), *weight, key);
        best = match best {
            None => Some((i, s)),
            Some((b, bs)) => {
                let better = s > bs || (s == bs && name.as_ref() < regions[b].0.as_ref());
                Some(if better { (i, s) } else { (b, bs) })
            }
        };
    }
    best.map(|(i, _)| i)
}

/// [`place`] for a fixed set of regions, made for the data path: each region's `r ‖ 0x00` is
/// kept ready, the hashes read the prefix and the key where they are (`xxh64_short`), and
/// `ln` is computed only for regions that may still win (see [`Placer::place`]). Measured
/// on 3 regions: 107 ns with a buffer filled per region, 36 ns so.
#[derive(Debug, Clone)]
pub struct Placer {
    /// `(r ‖ 0x00, weight)` per region.
    regions: Vec<(Box<[u8]>, f64)>,
    /// `r ‖ 0x00` as a little-endian word, for prefixes of at most 8 bytes.
    words: Vec<Option<u64>>,
}

impl Placer {
    /// A placer over `(name, weight)` regions (weights > 0).
    pub fn new<N: AsRef<[u8]>>(regions: &[(N, f64)]) -> Placer {
        let regions = regions
            .iter()
            .map(|(name, weight)| {
                let mut prefix = name.as_ref().to_vec();
                prefix.push(0);
                (prefix.into_boxed_slice(), *weight)
            })
            .collect::<Vec<(Box<[u8]>, f64)>>();
        let words = regions
            .iter()
            .map(|(prefix, _)| {
                (prefix.len() <= 8).then(|| {
                    prefix
                        .iter()
                        .rev()
                        .fold(0u64, |v, &b| (v << 8) | u64::from(b))
                })
            })
            .collect();
        Placer { regions, words }
    }

    /// The index of the region `key` is placed in, exactly as [`place`] computes it; `None`
    /// when there is no region.
    ///
    /// The hashes are computed first, all of them (independent, so the CPU overlaps them);
    /// then `ln` — the costly part — only where it can matter: since
    /// `1 − u ≤ −ln u ≤ (1 − u) / u`, each score lies in `[w·u / (1 − u), w / (1 − u)]`, and a
    /// region whose upper bound is below another's lower bound (by a margin far above any
    /// rounding) cannot win. Regions that may still win get docs/schemes.md's exact score and
    /// comparison, so the result is the same as [`place`]'s.
    #[inline]
    pub fn place(&self, key: &[u8]) -> Option<usize> {
        let n = self.regions.len();
        if n == 0 {
            return None;
        }
        if n > MAX_REGIONS {
            let named: Vec<(&[u8], f64)> = self
                .regions
                .iter()
                .map(|(p, w)| (&p[..p.len() - 1], *w))
                .collect();
            return place(&named, key);
        }
        let mut u = [0f64; MAX_REGIONS];
        for (i, (prefix, _)) in self.regions.iter().enumerate() {
            let total = prefix.len() + key.len();
            let h = if let (Some(word), true) = (self.words[i], key.len() >= 8 && total < 32) {
                xxh64_prefixed(word, prefix.len(), key)
            } else if total < 32 {
                xxh64_short(prefix, key)
            } else {
                let mut buf = Vec::with_capacity(prefix.len() + key.len());
                buf.extend_from_slice(prefix);
                buf.extend_from_slice(key);
                xxh64(&buf, 0)
            };
            u[i] = (h as f64 + 0.5) / 18_446_744_073_709_551_616.0;
        }
        // Each score's bounds, `[w·u / (1 − u), w / (1 − u)]`; the best lower bound is a
        // floor no winner is below. (`u` is 1.0 only for the top 2^10 hash values, rounded
        // up: its score is −∞.)
        let mut upper = [f64::NEG_INFINITY; MAX_REGIONS];
        let mut floor = f64::NEG_INFINITY;
        for (i, (_, w)) in self.regions.iter().enumerate() {
            if u[i] < 1.0 {
                let r = w / (1.0 - u[i]);
                upper[i] = r;
                floor = floor.max(r * u[i]);
            }
        }
        let mut best: Option<(usize, f64)> = None;
        for (i, (prefix, weight)) in self.regions.iter().enumerate() {
            if floor > 0.0 && upper[i] < floor * (1.0 - 1e-9) {
                continue;
            }
            let s = -weight / u[i].ln();
            best = match best {
                Some((b, bs)) if !(s > bs || (s == bs && **prefix < *self.regions[b].0)) => {
                    Some((b, bs))
                }
                _ => Some((i, s)),
            };
        }
        best.map(|(i, _)| i)
    }
}

// XXH64's primes and the steps of its path for inputs under 32 bytes (seed 0), shared by
// the two readers below.
const P1: u64 = 0x9E37_79B1_85EB_CA87;
const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
const P3: u64 = 0x1656_67B1_9E37_79F9;
const P4: u64 = 0x85EB_CA77_C2B2_AE63;
const P5: u64 = 0x27D4_EB2F_1656_67C5;

/// One 8-byte lane into the hash.
#[inline(always)]
fn lane8(h: u64, lane: u64) -> u64 {
    let k = lane.wrapping_mul(P2).rotate_left(31).wrapping_mul(P1);
    (h ^ k).rotate_left(27).wrapping_mul(P1).wrapping_add(P4)
}

/// One 4-byte word into the hash.
#[inline(always)]
fn word4(h: u64, word: u64) -> u64 {
    (h ^ word.wrapping_mul(P1))
        .rotate_left(23)
        .wrapping_mul(P2)
        .wrapping_add(P3)
}

/// One trailing byte into the hash.
#[inline(always)]
fn byte1(h: u64, b: u64) -> u64 {
    (h ^ b.wrapping_mul(P5)).rotate_left(11).wrapping_mul(P1)
}

/// The final mix.
#[inline(always)]
fn avalanche(mut h: u64) -> u64 {
    h ^= h >> 33;
    h = h.wrapping_mul(P2);
    h ^= h >> 29;
    h = h.wrapping_mul(P3);
    h ^ (h >> 32)
}

/// XXH64 with seed 0 of `a ‖ b`, together shorter than 32 bytes (the algorithm's path
/// without stripes), reading the two slices where they are: writing them into one buffer
/// first made every lane's load wait for the store that had just filled it (perf: a third
/// of the placement stalled on it). Inlined, so that a placement's hashes, which do not
/// depend on one another, overlap in the CPU. `tests` check it against `xxhash-rust` for
/// every length and split.
#[inline(always)]
fn xxh64_short(a: &[u8], b: &[u8]) -> u64 {
    let len = a.len() + b.len();
    let byte = |i: usize| -> u64 {
        match a.get(i) {
            Some(&x) => u64::from(x),
            None => b.get(i - a.len()).map_or(0, |&x| u64::from(x)),
        }
    };
    // `n` little-endian bytes from offset `at` of `a ‖ b`.
    let word = |at: usize, n: usize| -> u64 {
        if at + n <= a.len() {
            (0..n).fold(0, |v, j| v | u64::from(a[at + j]) << (8 * j))
        } else if at >= a.len() {
            let at = at - a.len();
            (0..n).fold(0, |v, j| v | u64::from(b[at + j]) << (8 * j))
        } else {
            (0..n).fold(0, |v, j| v | byte(at + j) << (8 * j))
        }
    };
    let mut h = P5.wrapping_add(len as u64);
    let mut at = 0;
    while at + 8 <= len {
        h = lane8(h, word(at, 8));
        at += 8;
    }
    if at + 4 <= len {
        h = word4(h, word(at, 4));
        at += 4;
    }
    while at < len {
        h = byte1(h, byte(at));
        at += 1;
    }
    avalanche(h)
}

/// [`xxh64_short`] of `p ‖ k` where `p` (1–8 bytes, as the little-endian `word`) is the
/// region prefix and `k` is at least 8 bytes, together shorter than 32: every lane is one
/// load of `k` (the first one shifted under the prefix), which is what most placements are.
#[inline(always)]
fn xxh64_prefixed(word: u64, plen: usize, k: &[u8]) -> u64 {
    let load8 = |at: usize| {
        k.get(at..at + 8)
            .and_then(|s| s.try_into().ok())
            .map_or(0, u64::from_le_bytes)
    };
    let len = plen + k.len();
    let mut h = P5.wrapping_add(len as u64);
    // Lane 0: the prefix, then the key's first bytes (a shift by 64 would overflow).
    let first = if plen == 8 {
        word
    } else {
        word | (load8(0) << (8 * plen))
    };
    let mut lane = first;
    let mut at = 0;
    loop {
        h = lane8(h, lane);
        at += 8;
        if at + 8 > len {
            break;
        }
        lane = load8(at - plen);
    }
    if at + 4 <= len {
        let w = k
            .get(at - plen..at - plen + 4)
            .and_then(|s| s.try_into().ok())
            .map_or(0, u32::from_le_bytes);
        h = word4(h, u64::from(w));
        at += 4;
    }
    for &b in k.get(at - plen..).unwrap_or_default() {
        h = byte1(h, u64::from(b));
    }
    avalanche(h)
}

/// Most regions [`Placer::place`] handles on the stack.
const MAX_REGIONS: usize = 16;

#[cfg(test)]
mod tests {
    use super::*;

    /// xxHash64 written out from its specification (Yann Collet's XXH64), independent of the
    /// crate the router uses, to check the placement against.
    fn reference_xxh64(input: &[u8], seed: u64) -> u64 {
        const P1: u64 = 0x9E37_79B1_85EB_CA87;
        const P2: u64 = 0xC2B2_AE3D_27D4_EB4F;
        const P3: u64 = 0x1656_67B1_9E37_79F9;
        const P4: u64 = 0x85EB_CA77_C2B2_AE63;
        const P5: u64 = 0x27D4_EB2F_1656_67C5;
        let round = |acc: u64, lane: u64| {
            acc.wrapping_add(lane.wrapping_mul(P2))
                .rotate_left(31)
                .wrapping_mul(P1)
        };
        let merge = |acc: u64, v: u64| (acc ^ round(0, v)).wrapping_mul(P1).wrapping_add(P4);
        let word = |b: &[u8]| u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let mut p = input;
        let mut h = if input.len() >= 32 {
            let mut v = [
                seed.wrapping_add(P1).wrapping_add(P2),
                seed.wrapping_add(P2),
                seed,
                seed.wrapping_sub(P1),
            ];
            while p.len() >= 32 {
                for (i, lane) in v.iter_mut().enumerate() {
                    *lane = round(*lane, word(&p[i * 8..]));
                }
                p = &p[32..];
            }
            let mut h = v[0]
                .rotate_left(1)
                .wrapping_add(v[1].rotate_left(7))
                .wrapping_add(v[2].rotate_left(12))
                .wrapping_add(v[3].rotate_left(18));
            for lane in v {
                h = merge(h, lane);
            }
            h
        } else {
            seed.wrapping_add(P5)
        };
        h = h.wrapping_add(input.len() as u64);
        while p.len() >= 8 {
            h = (h ^ round(0, word(p)))
                .rotate_left(27)
                .wrapping_mul(P1)
                .wrapping_add(P4);
            p = &p[8..];
        }
        if p.len() >= 4 {
            let w = u64::from(u32::from_le_bytes(p[..4].try_into().expect("4 bytes")));
            h = (h ^ w.wrapping_mul(P1))
                .rotate_left(23)
                .wrapping_mul(P2)
                .wrapping_add(P3);
            p = &p[4..];
        }
        for &b in p {
            h = (h ^ u64::from(b).wrapping_mul(P5))
                .rotate_left(11)
                .wrapping_mul(P1);
        }
        h ^= h >> 33;
        h = h.wrapping_mul(P2);
        h ^= h >> 29;
        h = h.wrapping_mul(P3);
        h ^ (h >> 32)
    }

    /// docs/schemes.md's function, written with the reference hash.
    fn reference_place(regions: &[(&str, f64)], key: &str) -> &'static str {
        let mut best: Option<(&str, f64)> = None;
        for (name, weight) in regions {
            let mut bytes = name.as_bytes().to_vec();
            bytes.push(0);
            bytes.extend_from_slice(key.as_bytes());
            let u = (reference_xxh64(&bytes, 0) as f64 + 0.5) / 2f64.powi(64);
            let s = -weight / u.ln();
            let better = match best {
                None => true,
                Some((b, bs)) => s > bs || (s == bs && *name < b),
            };
            if better {
                best = Some((name, s));
            }
        }
        match best.map(|(n, _)| n) {
            Some("eu") => "eu",
            Some("us") => "us",
            Some("ap") => "ap",
            Some("sa") => "sa",
            _ => "?",
        }
    }

    #[test]
    fn the_prefixed_hash_is_the_crates_for_every_prefix_and_key_length() {
        let text: Vec<u8> = (0u8..=255).rev().collect();
        for plen in 1..=8 {
            let prefix = &text[100..100 + plen];
            let word = prefix
                .iter()
                .rev()
                .fold(0u64, |v, &b| (v << 8) | u64::from(b));
            for klen in 8..(32 - plen) {
                let key = &text[3..3 + klen];
                let whole: Vec<u8> = prefix.iter().chain(key).copied().collect();
                assert_eq!(
                    xxh64_prefixed(word, plen, key),
                    xxh64(&whole, 0),
                    "prefix {plen} key {klen}"
                );
            }
        }
    }

    #[test]
    fn the_short_input_hash_is_the_crates_for_every_length_and_split_below_32() {
        let text: Vec<u8> = (0u8..=255).rev().collect();
        for start in 0..8 {
            for n in 0..32 {
                let input = &text[start..start + n];
                for split in 0..=n {
                    let (a, b) = input.split_at(split);
                    assert_eq!(xxh64_short(a, b), xxh64(input, 0), "{n} split {split}");
                }
            }
        }
    }

    proptest::proptest! {
        /// The data path's placer and docs/schemes.md's function as written agree on any key and
        /// weights, bounds and all.
        #[test]
        fn the_placer_agrees_with_the_function(
            key in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
            weights in proptest::collection::vec(0.01f64..100.0, 1..6),
        ) {
            let names = ["eu", "us", "ap", "sa", "af", "me-central-1"];
            let regions: Vec<(&str, f64)> = names.iter().copied().zip(weights).collect();
            proptest::prop_assert_eq!(Placer::new(&regions).place(&key), place(&regions, &key));
        }
    }

    #[test]
    fn the_reference_hash_has_the_published_empty_input_value() {
        assert_eq!(reference_xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
        assert_eq!(xxh64(b"", 0), 0xEF46_DB37_51D8_E999);
        // Inputs of every tail length and over the 32-byte stripe agree with the crate.
        let text: Vec<u8> = (0u8..100).collect();
        for n in 0..text.len() {
            assert_eq!(reference_xxh64(&text[..n], 0), xxh64(&text[..n], 0), "{n}");
        }
    }

    #[test]
    fn placement_matches_an_independent_implementation_for_1000_keys() {
        let regions = [("eu", 2.0), ("us", 1.0), ("ap", 1.0)];
        let mut counts = [0usize; 3];
        for k in 0..1000 {
            let key = format!("device-{k:04}");
            let got = place(&regions, key.as_bytes()).expect("a region");
            assert_eq!(regions[got].0, reference_place(&regions, &key), "{key}");
            counts[got] += 1;
        }
        let placer = Placer::new(&regions);
        for k in 0..1000 {
            let key = format!("device-{k:04}");
            assert_eq!(
                placer.place(key.as_bytes()),
                place(&regions, key.as_bytes())
            );
        }
        // Weights 2:1:1 → about 500/250/250.
        assert!((430..570).contains(&counts[0]), "{counts:?}");
        assert!((190..310).contains(&counts[1]), "{counts:?}");
    }

    #[test]
    fn adding_a_region_moves_only_keys_to_it() {
        let before = [("eu", 2.0), ("us", 1.0), ("ap", 1.0)];
        let after = [("eu", 2.0), ("us", 1.0), ("ap", 1.0), ("sa", 1.0)];
        let mut moved = 0;
        for k in 0..1000 {
            let key = format!("device-{k:04}");
            let (a, b) = (
                place(&before, key.as_bytes()).expect("a region"),
                place(&after, key.as_bytes()).expect("a region"),
            );
            if before[a].0 != after[b].0 {
                assert_eq!(after[b].0, "sa", "{key} moved between old regions");
                moved += 1;
            }
        }
        // sa's share is 1/5 of the weight: about 200 keys.
        assert!((140..260).contains(&moved), "{moved}");
    }
}
