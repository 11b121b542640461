//! Traces (docs/traces.md): one OpenTelemetry `SERVER` span per request and one
//! `CLIENT` span per upstream attempt, exported over OTLP, with W3C Trace Context in and out.
//!
//! The spans are made with the OpenTelemetry API directly, from the two places every request
//! passes whatever carries it: the request's life (`proxy/life.rs`: [`Tracing::begin`] when
//! it begins, [`Traced::finish`] when it ends) and the attempt loop's per-attempt hook
//! (`upstream/attempts.rs`: [`Traced::attempt`]). A `tracing`-to-OpenTelemetry bridge would
//! make every request's `tracing` span a real one (a registry slot, its fields formatted) to
//! export the 1 % sampled; here a request that is not sampled costs its ids and one
//! `traceparent` written per attempt, and no span object outlives [`Tracing::begin`].
//!
//! - Sampling is the SDK's parent-based sampler: a caller's decision is followed, a trace
//!   this edge starts is sampled at `sample_ratio` by its trace id.
//! - The request going upstream carries exactly one `traceparent` (the client's, if any, is
//!   replaced) whose parent id is the attempt's `CLIENT` span, or this edge's `SERVER` span
//!   id when the request is not sampled; `tracestate` goes on only with an adopted parent.
//! - Export never waits on a request's path: `export.rs`.

mod context;
mod export;

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::trace::{Sampler, SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;

use crate::config::{OtlpProtocol, TracingSettings};
use crate::error::Error;

pub use context::{format, parse, tracestate_ok, Parent, Traceparent, TRACEPARENT_LEN};

/// The `traceparent` field name (W3C Trace Context §3.2).
pub static TRACEPARENT: http::HeaderName = http::HeaderName::from_static("traceparent");
/// The `tracestate` field name (W3C Trace Context §3.3).
pub static TRACESTATE: http::HeaderName = http::HeaderName::from_static("tracestate");

/// The service name when neither the file nor `OTEL_SERVICE_NAME` gives one.
pub const DEFAULT_SERVICE_NAME: &str = "iuid-router";

/// The router's tracer: the SDK's provider (sampler, batch export) and the settings a
/// request reads. Made once at start from `tracing:`; `None` in the proxy when it is absent.
#[derive(Debug)]
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    trust_incoming: bool,
}

impl Tracing {
    /// Starts the export (its thread, its queue) for `settings`, completed by the standard
    /// variables where the file is silent. Errors: the exporter could not be made.
    pub fn start(settings: &TracingSettings) -> Result<Tracing, String> {
        let protocol = match settings.protocol {
            Some(protocol) => protocol,
            None => env_protocol()?,
        };
        let processor = export::processor(
            settings.endpoint.as_deref(),
            protocol,
            settings.max_queue_spans,
        )?;
        let name = settings
            .service_name
            .clone()
            .or_else(|| {
                std::env::var("OTEL_SERVICE_NAME")
                    .ok()
                    .filter(|n| !n.is_empty())
            })
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
        let mut builder = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(Resource::builder().with_service_name(name).build());
        // The file wins; without `sample_ratio`, the SDK reads `OTEL_TRACES_SAMPLER` and its
        // argument (default: parent-based, always on).
        if let Some(ratio) = settings.sample_ratio {
            let ratio = Sampler::TraceIdRatioBased(ratio);
            builder = builder.with_sampler(Sampler::ParentBased(Box::new(ratio)));
        }
        let provider = builder.build();
        let scope = InstrumentationScope::builder("iuid-router")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer = provider.tracer_with_scope(scope);
        Ok(Tracing {
            provider,
            tracer,
            trust_incoming: settings.trust_incoming,
        })
    }

    /// Exports what is queued and stops the export thread (waits at most 5 s).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(error = %e, "trace export shutdown");
        }
    }

    /// Begins a request's `SERVER` span. `traceparent`, `tracestate`: the request's values of
    /// those fields, adopted as its parent when `trust_incoming` and exactly one valid
    /// `traceparent` came; `method`, `path` (without the query) and `attributes`: the
    /// request's, asked only when it is sampled.
    pub fn begin<'v>(
        &self,
        method: &str,
        path: &str,
        mut traceparent: impl Iterator<Item = &'v [u8]>,
        tracestate: impl Iterator<Item = &'v [u8]>,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Traced {
        let incoming = match (self.trust_incoming, traceparent.next()) {
            // Two `traceparent` lines are no valid one (§3.2).
            (true, Some(value)) if traceparent.next().is_none() => parse(value),
            _ => None,
        };
        let mut adopted_state = None;
        let parent = match incoming {
            Some(p) => {
                adopted_state = joined(tracestate);
                let sc = SpanContext::new(p.trace_id, p.span_id, p.flags, true, TraceState::NONE);
                Context::new().with_remote_span_context(sc)
            }
            None => Context::new(),
        };
        let builder = self
            .tracer
            .span_builder("request")
            .with_kind(SpanKind::Server);
        let span = self.tracer.build_with_context(builder, &parent);
        let sc = span.span_context();
        let traceparent = format(sc.trace_id(), sc.span_id(), sc.is_sampled());
        let server = match span.is_recording() {
            true => {
                let mut span = span;
                span.set_attributes(attributes());
                Some(Server {
                    cx: Context::new().with_span(span),
                    method: method.to_owned(),
                    path: path.to_owned(),
                    refused: AtomicBool::new(false),
                })
            }
            false => None,
        };
        Traced {
            server,
            traceparent,
            tracestate: adopted_state,
            tracer: self.tracer.clone(),
        }
    }
}

/// `OTEL_EXPORTER_OTLP_PROTOCOL`, when the file names no protocol: `grpc` (the default) or
/// `http/protobuf`. Errors: another value.
fn env_protocol() -> Result<OtlpProtocol, String> {
    match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL").as_deref() {
        Err(_) | Ok("") | Ok("grpc") => Ok(OtlpProtocol::Grpc),
        Ok("http/protobuf") => Ok(OtlpProtocol::HttpProtobuf),
        Ok(other) => Err(format!(
            "OTEL_EXPORTER_OTLP_PROTOCOL={other}: the router exports over grpc or http/protobuf"
        )),
    }
}

/// An authority's host and port: `host:port`, `[v6]:port`, or a host alone.
pub fn host_and_port(authority: &str) -> (&str, Option<i64>) {
    if authority.starts_with('[') {
        return match authority.find(']') {
            Some(end) => {
                let port = authority[end + 1..].strip_prefix(':');
                (&authority[..=end], port.and_then(|p| p.parse().ok()))
            }
            None => (authority, None),
        };
    }
    match authority.rsplit_once(':') {
        Some((host, port)) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            (host, port.parse().ok())
        }
        _ => (authority, None),
    }
}

/// Several `tracestate` lines are one list (W3C Trace Context §3.3.1.1); an invalid one is
/// dropped whole.
fn joined<'v>(mut lines: impl Iterator<Item = &'v [u8]>) -> Option<http::HeaderValue> {
    let first = lines.next()?;
    let mut value = first.to_vec();
    for line in lines {
        value.push(b',');
        value.extend_from_slice(line);
    }
    if !tracestate_ok(&value) {
        return None;
    }
    http::HeaderValue::from_bytes(&value).ok()
}

/// One request's trace: its `SERVER` span when sampled, and what its attempts send upstream.
pub struct Traced {
    /// Sampled: the recording `SERVER` span. `None`: not sampled, nothing recorded.
    server: Option<Server>,
    /// The `SERVER` span's own `traceparent`: sent upstream when the request is not sampled.
    traceparent: Traceparent,
    /// The caller's `tracestate`, sent on with its adopted parent.
    tracestate: Option<http::HeaderValue>,
    tracer: SdkTracer,
}

/// A sampled request's `SERVER` span.
struct Server {
    /// The context holding the span: the parent of the attempts' `CLIENT` spans.
    cx: Context,
    /// The request's method, which names the spans.
    method: String,
    /// The request's path, whose route template names the `SERVER` span.
    path: String,
    /// A refusal's problem type is its status already.
    refused: AtomicBool,
}

impl Traced {
    /// The trace id and this edge's span id, as the access log writes them (lowercase hex).
    pub fn ids(&self) -> (&str, &str) {
        // `traceparent` is ASCII by construction.
        let text = std::str::from_utf8(&self.traceparent).unwrap_or("");
        (
            text.get(3..35).unwrap_or(""),
            text.get(36..52).unwrap_or(""),
        )
    }

    /// Whether the request is sampled (its spans are recorded and exported).
    pub fn sampled(&self) -> bool {
        self.server.is_some()
    }

    /// Records attributes on the `SERVER` span, when it is recorded.
    pub fn record(&self, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if let Some(server) = &self.server {
            server.cx.span().set_attributes(attributes());
        }
    }

    /// The per-attempt hook: a `CLIENT` span for one attempt (the `resend`th retry) at
    /// `upstream` of `region`, a child of the `SERVER` span, and the trace fields the attempt
    /// sends.
    pub fn attempt(&self, region: &str, upstream: &str, resend: u32) -> (Attempt, Stamp) {
        let Some(Server { cx, method, .. }) = &self.server else {
            let stamp = Stamp {
                traceparent: self.traceparent,
                tracestate: self.tracestate.clone(),
            };
            return (Attempt { span: None }, stamp);
        };
        let (host, port) = host_and_port(upstream);
        let mut attributes = vec![
            KeyValue::new("http.request.method", method.clone()),
            KeyValue::new("server.address", host.to_owned()),
            KeyValue::new("iuid_router.region", region.to_owned()),
        ];
        if let Some(port) = port {
            attributes.push(KeyValue::new("server.port", port));
        }
        if resend > 0 {
            attributes.push(KeyValue::new(
                "http.request.resend_count",
                i64::from(resend),
            ));
        }
        let builder = self
            .tracer
            .span_builder(method.clone())
            .with_kind(SpanKind::Client)
            .with_attributes(attributes);
        let span = self.tracer.build_with_context(builder, cx);
        let sc = span.span_context();
        let stamp = Stamp {
            traceparent: format(sc.trace_id(), sc.span_id(), sc.is_sampled()),
            tracestate: self.tracestate.clone(),
        };
        (Attempt { span: Some(span) }, stamp)
    }

    /// Records the refusal the router answers with (`slug`: its problem type) as the
    /// `SERVER` span's error.
    pub fn refused(&self, slug: &str) {
        if let Some(server) = &self.server {
            server.refused.store(true, Ordering::Relaxed);
            let span = server.cx.span();
            span.set_attribute(KeyValue::new("error.type", slug.to_owned()));
            span.set_status(Status::error(format!("urn:iuid-router:problem:{slug}")));
        }
    }

    /// Ends the `SERVER` span with the answer's `status`: named `{method} {route}` (`route`:
    /// the template matching the request's path; the method alone without one), the route,
    /// the `region` that answered and the status recorded, an error status for a 5xx that
    /// is no refusal of the router's ([`Traced::refused`]).
    pub fn finish<'r>(
        &self,
        route: impl FnOnce(&str) -> Option<&'r str>,
        region: Option<&str>,
        status: u16,
    ) {
        let Some(Server {
            cx,
            method,
            path,
            refused,
        }) = &self.server
        else {
            return;
        };
        let span = cx.span();
        if let Some(region) = region {
            span.set_attribute(KeyValue::new("iuid_router.region", region.to_owned()));
        }
        let name = match route(path) {
            Some(route) => {
                span.set_attribute(KeyValue::new("http.route", route.to_owned()));
                format!("{method} {route}")
            }
            None => method.clone(),
        };
        span.update_name(name);
        span.set_attribute(KeyValue::new(
            "http.response.status_code",
            i64::from(status),
        ));
        if status >= 500 && !refused.load(Ordering::Relaxed) {
            span.set_attribute(KeyValue::new("error.type", status.to_string()));
            span.set_status(Status::error(Cow::Owned(status.to_string())));
        }
        span.end();
    }
}

/// What an attempt sends upstream of the trace: its `traceparent` (and the adopted
/// `tracestate`), replacing the client's.
#[derive(Debug, Clone)]
pub struct Stamp {
    /// The `traceparent` value.
    pub traceparent: Traceparent,
    /// The `tracestate` value, when a caller's was adopted; otherwise none is sent.
    pub tracestate: Option<http::HeaderValue>,
}

/// One attempt's `CLIENT` span, when the request is sampled. Ended by
/// [`Attempt::answered`] or [`Attempt::failed`]; dropped unended (the request went away), it
/// ends then.
pub struct Attempt {
    span: Option<opentelemetry_sdk::trace::Span>,
}

impl Attempt {
    /// The upstream answered `status`.
    pub fn answered(mut self, status: u16) {
        if let Some(span) = &mut self.span {
            span.set_attribute(KeyValue::new(
                "http.response.status_code",
                i64::from(status),
            ));
            if status >= 500 {
                span.set_attribute(KeyValue::new("error.type", status.to_string()));
                span.set_status(Status::error(status.to_string()));
            }
            span.end();
        }
    }

    /// The attempt failed with `error` (whoever is to blame).
    pub fn failed(mut self, error: &Error) {
        if let Some(span) = &mut self.span {
            span.set_attribute(KeyValue::new("error.type", error.kind.as_str()));
            span.set_status(Status::error(error.detail.clone()));
            span.end();
        }
    }
}
