//! Codec speed: parsing each text form, formatting, minting. `cargo bench -p iuid`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use iuid::{Generator, Iuid, Uuid};

fn bench(c: &mut Criterion) {
    let hyphenated = "017f22e2-79b0-802a-8144-dc0c0c07398f";
    let simple = "017f22e279b0802a8144dc0c0c07398f";
    let relay = "T3JkZXI6MDE3ZjIyZTItNzliMC04MDJhLTgxNDQtZGMwYzBjMDczOThm";
    c.bench_function("parse/hyphenated", |b| {
        b.iter(|| Uuid::parse(black_box(hyphenated.as_bytes())))
    });
    c.bench_function("parse/simple", |b| {
        b.iter(|| Uuid::parse(black_box(simple.as_bytes())))
    });
    c.bench_function("parse/relay", |b| {
        b.iter(|| Uuid::parse(black_box(relay.as_bytes())))
    });
    let id = Iuid::parse(hyphenated.as_bytes()).expect("vector");
    c.bench_function("format/encode_lower", |b| {
        let mut buf = [0u8; 36];
        b.iter(|| {
            black_box(id).encode_lower(&mut buf);
            black_box(buf[0])
        })
    });
    let g = Generator::new(42, 5);
    c.bench_function("mint", |b| b.iter(|| g.mint()));
}

criterion_group!(benches, bench);
criterion_main!(benches);
