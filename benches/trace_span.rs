//! One request's trace at `sample_ratio: 0.01`, made two ways (docs/traces.md, "Spans"):
//!
//! - `direct`: the OpenTelemetry API called from the request's life and the attempt hook, as
//!   the router does (`iuid_router::trace`: `Tracing::begin`, one attempt's `traceparent`,
//!   `Traced::finish`), with its export processor;
//! - `tracing-opentelemetry`: the `tracing` crate's spans (`request`, an `attempt` under it)
//!   bridged to OpenTelemetry by `tracing-opentelemetry`, the attempt's `traceparent` taken
//!   from its span's context, with no processor at all (the bridge's floor).
//!
//! Both use the SDK's parent-based ratio sampler at 0.01, so nearly every iteration is a
//! request that is not sampled: the case that sets the cost of tracing on the REST path.
//! `cargo bench --bench trace_span`.

use criterion::{criterion_group, criterion_main, Criterion};
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use std::hint::black_box;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;

use iuid_router::config::{OtlpProtocol, TracingSettings};
use iuid_router::trace::{format, Described, Incoming, Tracing};

const RATIO: f64 = 0.01;

fn direct(c: &mut Criterion) {
    let settings = TracingSettings {
        // Nothing listens: the 1 % sampled are offered to the queue and fail to export on
        // the export thread, as with a collector away.
        endpoint: Some("http://127.0.0.1:9".to_owned()),
        protocol: Some(OtlpProtocol::HttpProtobuf),
        service_name: None,
        sample_ratio: Some(RATIO),
        trust_incoming: true,
        max_queue_spans: 2048,
    };
    let Ok(tracing) = Tracing::start(&settings) else {
        panic!("the tracer starts");
    };
    c.bench_function("trace/direct", |b| {
        b.iter(|| {
            let traced = tracing.begin(Incoming::default(), std::iter::empty, || Described {
                method: "GET".to_owned(),
                path: "/v1/orders/0190b4d2-3c4e-8a76-9276-0b1c2d3e4f50".to_owned(),
                attributes: Vec::new(),
            });
            // A request not sampled writes its fields once; a sampled one, per attempt.
            match traced.attempt("eu", "127.0.0.1:8080", 0) {
                Some((attempt, stamp)) => {
                    black_box(&stamp.traceparent);
                    attempt.answered(200);
                }
                None => {
                    black_box(traced.fields());
                }
            }
            traced.finish(|_| Some("/v1/orders/{id}"), Some("eu"), 200);
        })
    });
}

fn bridged(c: &mut Criterion) {
    let sampler = Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(RATIO)));
    let provider = SdkTracerProvider::builder().with_sampler(sampler).build();
    let tracer = provider.tracer("bench");
    let subscriber =
        tracing_subscriber::registry().with(tracing_opentelemetry::layer().with_tracer(tracer));
    tracing::subscriber::with_default(subscriber, || {
        c.bench_function("trace/tracing-opentelemetry", |b| {
            b.iter(|| {
                let request = tracing::info_span!(
                    "request",
                    method = "GET",
                    path = "/v1/orders/0190b4d2-3c4e-8a76-9276-0b1c2d3e4f50",
                    region = tracing::field::Empty,
                    status = tracing::field::Empty,
                );
                let _inside = request.enter();
                let attempt =
                    tracing::info_span!("attempt", region = "eu", upstream = "127.0.0.1:8080");
                let cx = attempt.context();
                let span = cx.span();
                let sc = span.span_context();
                black_box(format(sc.trace_id(), sc.span_id(), sc.is_sampled()));
                drop(attempt);
                request.record("region", "eu");
                request.record("status", 200);
            })
        });
    });
}

criterion_group!(benches, direct, bridged);
criterion_main!(benches);
