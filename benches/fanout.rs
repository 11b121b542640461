//! The CPU cost of a fan-out page once the regions' bytes are in (docs/fanout.md): three regions'
//! answers of 500 items each read (JSON validated, ids parsed), merged by (creation time,
//! canonical id) and rendered as the page. `cargo bench --bench fanout`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use iuid::Iuid;
use iuid_router::extract::fanout::Order;
use iuid_router::fanout::merge::{items, merge, Item};
use iuid_router::fanout::page::{render, RegionReport};
use iuid_router::scheme::Kind;

/// One region's answer: 500 orders of its country, a millisecond apart with shared
/// milliseconds across regions, newest first, as a list endpoint would send them.
fn answer(country: u8) -> String {
    let list: Vec<String> = (0..500u64)
        .map(|k| {
            let id = Iuid::from_fields(1_800_000_000_000 - k, country, 1, k * 7 + u64::from(country));
            format!(
                r#"{{"id":"{id}","user":"u-1842","status":"delivered","total":{{"amount":"12.50","currency":"EUR"}},"created_at":"2027-01-15T08:00:00Z"}}"#
            )
        })
        .collect();
    format!(r#"{{"items":[{}],"total":500}}"#, list.join(","))
}

fn read(body: &str) -> Vec<Item<'_>> {
    items(body, "/items", "id", &Kind::Iuid, Order::Desc, 500).expect("items")
}

fn bench(c: &mut Criterion) {
    let bodies = [answer(1), answer(2), answer(3)];
    let mut g = c.benchmark_group("fanout");
    g.bench_function("read_merge_render_3x500", |b| {
        b.iter(|| {
            let lists: Vec<_> = bodies.iter().map(|body| read(black_box(body))).collect();
            let page = merge(lists, Order::Desc, None, 500);
            let reports = [
                (
                    "eu",
                    RegionReport::Answered {
                        status: 200,
                        items: 500,
                        served_by: None,
                        failover: false,
                    },
                ),
                (
                    "us",
                    RegionReport::Answered {
                        status: 200,
                        items: 500,
                        served_by: None,
                        failover: false,
                    },
                ),
                (
                    "ap",
                    RegionReport::Answered {
                        status: 200,
                        items: 500,
                        served_by: None,
                        failover: false,
                    },
                ),
            ];
            black_box(render(&page.items, page.more, &reports))
        })
    });
    let lists: Vec<_> = bodies.iter().map(|body| read(body)).collect();
    g.bench_function("merge_3x500", |b| {
        b.iter_batched(
            || lists.clone(),
            |lists| black_box(merge(lists, Order::Desc, None, 500)),
            criterion::BatchSize::SmallInput,
        )
    });
    g.bench_function("read_1x500", |b| {
        b.iter(|| black_box(read(black_box(&bodies[0]))))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
