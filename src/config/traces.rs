//! `tracing:` of the router config (docs/traces.md): where spans are exported, the
//! service's name, the sampling ratio, and whether a caller's `traceparent` is adopted.
//! Absent: no tracing, and no cost on any request.
//!
//! What the file leaves out, the standard variables give, as every OpenTelemetry SDK reads
//! them (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_PROTOCOL`, `OTEL_SERVICE_NAME`,
//! `OTEL_TRACES_SAMPLER`, `OTEL_TRACES_SAMPLER_ARG`): they are read at start by
//! `crate::trace`, so that the file stays a pure function of its text here.

use serde::Deserialize;

use crate::source::{Seg, Source, SourceError};

/// The OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum OtlpProtocol {
    /// OTLP/gRPC, the collector's port 4317.
    #[serde(rename = "grpc")]
    Grpc,
    /// OTLP/HTTP with protobuf bodies, posted to `{endpoint}/v1/traces` (port 4318).
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
}

/// `tracing.otlp` as written.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OtlpSpec {
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default)]
    protocol: Option<OtlpProtocol>,
}

/// `tracing:` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct TracingSpec {
    #[serde(default)]
    otlp: OtlpSpec,
    #[serde(default)]
    service_name: Option<String>,
    #[serde(default)]
    sample_ratio: Option<f64>,
    #[serde(default = "yes")]
    trust_incoming: bool,
    #[serde(default = "default_queue")]
    max_queue_spans: usize,
}

fn yes() -> bool {
    true
}

fn default_queue() -> usize {
    DEFAULT_MAX_QUEUE_SPANS
}

/// The default `tracing.max_queue_spans`: the OpenTelemetry SDKs' default batch queue.
pub const DEFAULT_MAX_QUEUE_SPANS: usize = 2048;

/// The tracing settings (docs/traces.md). `None` fields are the standard variables' or the
/// defaults, resolved at start by `crate::trace`.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingSettings {
    /// `otlp.endpoint`: the collector's base URL (`http://host:4317`); with `http/protobuf`,
    /// spans are posted to `{endpoint}/v1/traces`.
    pub endpoint: Option<String>,
    /// `otlp.protocol`: `grpc` or `http/protobuf`.
    pub protocol: Option<OtlpProtocol>,
    /// `service_name`: the resource attribute `service.name`.
    pub service_name: Option<String>,
    /// `sample_ratio`, 0 to 1: the share of traces this edge starts that are sampled; a
    /// caller's decision is always followed (parent-based).
    pub sample_ratio: Option<f64>,
    /// `trust_incoming` (default true): a valid incoming `traceparent` becomes the parent;
    /// false at a public edge, where a client must not choose the trace.
    pub trust_incoming: bool,
    /// `max_queue_spans` (default 2048): finished spans waiting for export; beyond, spans are
    /// dropped and counted (`iuid_router_trace_spans_dropped_total`).
    pub max_queue_spans: usize,
}

/// Validates `tracing:`; each error at its key.
pub(super) fn settings(
    spec: &TracingSpec,
    source: &Source,
    errors: &mut Vec<SourceError>,
) -> TracingSettings {
    let at = |keys: &[&str]| -> Vec<Seg> {
        std::iter::once("tracing")
            .chain(keys.iter().copied())
            .map(|k| Seg::Key(k.to_owned()))
            .collect()
    };
    if let Some(endpoint) = &spec.otlp.endpoint {
        if let Err(why) = check_endpoint(endpoint) {
            errors.push(source.error_at(&at(&["otlp", "endpoint"]), why));
        }
    }
    if let Some(ratio) = spec.sample_ratio {
        if !(0.0..=1.0).contains(&ratio) {
            errors.push(source.error_at(
                &at(&["sample_ratio"]),
                format!("sample_ratio is a share of traces: 0 to 1, not {ratio}"),
            ));
        }
    }
    if spec.service_name.as_deref() == Some("") {
        errors.push(source.error_at(
            &at(&["service_name"]),
            "service_name must not be empty (or left out: iuid-router)",
        ));
    }
    if spec.max_queue_spans == 0 {
        errors.push(source.error_at(
            &at(&["max_queue_spans"]),
            "max_queue_spans must be at least 1",
        ));
    }
    TracingSettings {
        endpoint: spec.otlp.endpoint.clone(),
        protocol: spec.otlp.protocol,
        service_name: spec.service_name.clone(),
        sample_ratio: spec.sample_ratio,
        trust_incoming: spec.trust_incoming,
        max_queue_spans: spec.max_queue_spans,
    }
}

/// An OTLP endpoint is an `http` or `https` URL with a host (`OTEL_EXPORTER_OTLP_ENDPOINT`'s
/// form). Errors: why it is not.
pub fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let uri: http::Uri = endpoint
        .parse()
        .map_err(|e| format!("`{endpoint}` is not a URL: {e}"))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(_)) => Ok(()),
        _ => Err(format!(
            "`{endpoint}` must be an http:// or https:// URL with a host, such as http://127.0.0.1:4317"
        )),
    }
}
