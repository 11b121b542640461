//! The sampling decision, made before any span object exists (so that a request that is not
//! sampled never calls the SDK), and the per-thread random bits it and the unsampled ids come
//! from.

use super::Parent;

/// How traces are sampled: the OpenTelemetry samplers `parentbased_traceidratio` (a caller's
/// decision followed, a new trace sampled at `ratio`) and `traceidratio` (`ratio` for every
/// trace), decided here before any span object is made, so that a request that is not
/// sampled costs no call into the SDK (measured: 500 instructions of the SDK's span
/// builder, sampler and non-recording span per request, 2.5 % of the REST path).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Sampling {
    /// The ratio (0 to 1) times 2⁶³: a trace whose id's low 63 bits are below it is sampled.
    threshold: u64,
    parent_based: bool,
}

impl Sampling {
    /// `sample_ratio` (parent-based) when the file has it, else `OTEL_TRACES_SAMPLER` and
    /// `OTEL_TRACES_SAMPLER_ARG` as the SDKs read them (default `parentbased_always_on`).
    pub(super) fn of(sample_ratio: Option<f64>) -> Sampling {
        if let Some(ratio) = sample_ratio {
            return Sampling::new(ratio, true);
        }
        let arg = std::env::var("OTEL_TRACES_SAMPLER_ARG")
            .ok()
            .and_then(|a| a.trim().parse::<f64>().ok())
            .filter(|r| (0.0..=1.0).contains(r))
            .unwrap_or(1.0);
        let (ratio, parent_based) = match std::env::var("OTEL_TRACES_SAMPLER").as_deref() {
            Ok("always_on") => (1.0, false),
            Ok("always_off") => (0.0, false),
            Ok("traceidratio") => (arg, false),
            Ok("parentbased_always_off") => (0.0, true),
            Ok("parentbased_traceidratio") => (arg, true),
            _ => (1.0, true),
        };
        Sampling::new(ratio, parent_based)
    }

    fn new(ratio: f64, parent_based: bool) -> Sampling {
        Sampling {
            // 1.0 gives 2⁶³, above every 63-bit value: every trace sampled.
            threshold: (ratio * (1u64 << 63) as f64) as u64,
            parent_based,
        }
    }

    /// Whether a request with `parent` (adopted) is sampled; `random`: 64 random bits.
    pub(super) fn sampled(&self, parent: Option<&Parent>, random: u64) -> bool {
        match parent {
            Some(p) if self.parent_based => p.flags.is_sampled(),
            // As the SDK's `TraceIdRatioBased` compares the trace id's low 63 bits.
            _ => (random >> 1) < self.threshold,
        }
    }
}

/// 3 × 64 random bits from this thread's SplitMix64 sequence (seeded from std's per-process
/// random keys and the time), in one visit to the thread's state: a new trace's sampling
/// bits and the ids of a request that is not sampled.
pub(super) fn random3() -> [u64; 3] {
    use std::cell::Cell;
    use std::hash::BuildHasher;
    thread_local! {
        static STATE: Cell<u64> = Cell::new(
            std::collections::hash_map::RandomState::new().hash_one(std::time::SystemTime::now()),
        );
    }
    STATE.with(|state| {
        let mut x = state.get();
        let out = [(); 3].map(|()| {
            x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let z = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            let z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        });
        state.set(x);
        out
    })
}
