//! Export: finished spans go to the OpenTelemetry SDK's batch processor (its own thread, a
//! bounded queue), which hands each batch to `opentelemetry-otlp`'s exporter (gRPC over tonic
//! or HTTP/protobuf over hyper). A request only ever offers a span to the queue: a slow or
//! absent collector never delays one.
//!
//! Two thin wrappers add what the SDK does not expose: [`Bounded`] counts the spans a full
//! queue drops in `iuid_router_trace_spans_dropped_total{reason="queue_full"}` (the SDK only
//! logs its count at shutdown), and [`OnRuntime`] runs each export on a current-thread tokio
//! runtime of the exporter's own, driven by the processor's thread (the OTLP exporters need a
//! tokio reactor; the processor's thread has none), counting a batch the collector did not
//! take as `export_failed`. The export's CPU is that one thread, never a data-path worker.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Span, SpanData, SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;

use crate::config::OtlpProtocol;

/// Spans the batch processor sends at once (the SDKs' default).
const BATCH_SPANS: usize = 512;

/// How long a batch may wait before it is sent, unless `OTEL_BSP_SCHEDULE_DELAY` (ms) says:
/// shorter than the SDKs' 5 s, so that a trace is there to look at while the request is
/// still on the operator's mind, and a batch stays small.
const SCHEDULED_DELAY: Duration = Duration::from_millis(500);

/// `OTEL_BSP_SCHEDULE_DELAY` in ms, or [`SCHEDULED_DELAY`].
fn scheduled_delay() -> Duration {
    std::env::var("OTEL_BSP_SCHEDULE_DELAY")
        .ok()
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map_or(SCHEDULED_DELAY, Duration::from_millis)
}

/// The longest one export may take before it counts as failed.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The batch processor for `endpoint` (`None`: the standard variables' or the default),
/// over `protocol`, holding at most `max_queue` spans. Errors: the exporter could not be
/// built (the message says why).
pub(super) fn processor(
    endpoint: Option<&str>,
    protocol: OtlpProtocol,
    max_queue: usize,
) -> Result<Bounded, String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("iuid-router-trace-export")
        .build()
        .map_err(|e| format!("the export runtime could not start: {e}"))?;
    // The exporters' clients spawn their connection tasks where they are made.
    let exporter = {
        let _inside = runtime.enter();
        let built = match protocol {
            OtlpProtocol::Grpc => {
                let mut builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_tonic()
                    .with_timeout(EXPORT_TIMEOUT);
                if let Some(endpoint) = endpoint {
                    builder = builder.with_endpoint(endpoint);
                }
                builder.build()
            }
            OtlpProtocol::HttpProtobuf => {
                let mut builder = opentelemetry_otlp::SpanExporter::builder()
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_timeout(EXPORT_TIMEOUT);
                if let Some(endpoint) = endpoint {
                    let base = endpoint.trim_end_matches('/');
                    builder = builder.with_endpoint(format!("{base}/v1/traces"));
                }
                builder.build()
            }
        };
        built.map_err(|e| format!("the OTLP exporter could not be made: {e}"))?
    };
    let queued = Arc::new(AtomicUsize::new(0));
    let exporter = OnRuntime {
        exporter,
        runtime,
        queued: Arc::clone(&queued),
    };
    // The SDK's own queue has room for what `Bounded` lets through and a batch being
    // gathered, so that every drop is `Bounded`'s, and counted.
    let config = BatchConfigBuilder::default()
        .with_max_queue_size(max_queue + BATCH_SPANS)
        .with_max_export_batch_size(BATCH_SPANS)
        .with_scheduled_delay(scheduled_delay())
        .build();
    Ok(Bounded {
        batch: BatchSpanProcessor::new(exporter, config),
        queued,
        max: max_queue,
    })
}

/// The SDK's batch processor behind a count of the spans waiting in it: past `max`, a span
/// is dropped and counted instead of offered.
#[derive(Debug)]
pub(super) struct Bounded {
    batch: BatchSpanProcessor,
    /// Spans offered to `batch` and not yet taken by an export.
    queued: Arc<AtomicUsize>,
    max: usize,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if self.queued.fetch_add(1, Ordering::Relaxed) >= self.max {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            crate::metrics::trace_spans_dropped("queue_full", 1);
            return;
        }
        self.batch.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.batch.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.batch.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.batch.set_resource(resource);
    }
}

/// The OTLP exporter, each export run to its end on the exporter's own runtime by the
/// calling thread (the batch processor's).
#[derive(Debug)]
struct OnRuntime {
    exporter: opentelemetry_otlp::SpanExporter,
    runtime: tokio::runtime::Runtime,
    queued: Arc<AtomicUsize>,
}

impl SpanExporter for OnRuntime {
    fn export(
        &self,
        batch: Vec<SpanData>,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        let spans = batch.len();
        self.queued.fetch_sub(spans, Ordering::Relaxed);
        let exported = self.runtime.block_on(self.exporter.export(batch));
        if let Err(e) = &exported {
            crate::metrics::trace_spans_dropped("export_failed", spans as u64);
            tracing::debug!(spans, error = %e, "trace export failed");
        }
        std::future::ready(exported)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let _inside = self.runtime.enter();
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.exporter.set_resource(resource);
    }
}
