//! Traces (docs/traces.md): one OpenTelemetry `SERVER` span per request and one
//! `CLIENT` span per upstream attempt, exported over OTLP, with W3C Trace Context in and out.
//!
//! The spans are made with the OpenTelemetry API directly, from the two places every request
//! passes whatever carries it: the request's life (`proxy/life.rs`: [`Tracing::begin`] when
//! it begins, [`Traced::finish`] when it ends) and the attempt loop's per-attempt hook
//! (`upstream/attempts.rs`: [`Traced::attempt`]). A `tracing`-to-OpenTelemetry bridge would
//! make every request's `tracing` span a real one (a registry slot, an SDK span builder) to
//! export the 1 % sampled: 69 times the cost (`benches/trace_span.rs`); here a request that
//! is not sampled makes no call into the SDK: it costs its ids and one `traceparent` written
//! with its head.
//!
//! - Sampling (`Sampling`) is decided as the OpenTelemetry samplers decide it (a caller's
//!   decision followed, a trace this edge starts sampled at `sample_ratio`), before any span
//!   object is made; the SDK records every span it is then asked for.
//! - The request going upstream carries exactly one `traceparent` (the client's, if any, is
//!   replaced) whose parent id is the attempt's `CLIENT` span, or this edge's `SERVER` span
//!   id when the request is not sampled; `tracestate` goes on only with an adopted parent.
//! - Export never waits on a request's path: `export.rs`.

mod context;
mod export;
mod sampling;

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
use sampling::{random3, Sampling};

pub use context::{
    format, parse, tracestate_within_limits, Parent, Traceparent, TRACEPARENT_LINE_LEN,
};

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
    sampling: Sampling,
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
        // The decision is `Sampling`'s, made before a span is asked for: the SDK records
        // every span it is asked for.
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_sampler(Sampler::AlwaysOn)
            .with_resource(Resource::builder().with_service_name(name).build())
            .build();
        let scope = InstrumentationScope::builder("iuid-router")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        let tracer = provider.tracer_with_scope(scope);
        Ok(Tracing {
            provider,
            tracer,
            sampling: Sampling::of(settings.sample_ratio),
            trust_incoming: settings.trust_incoming,
        })
    }

    /// Exports what is queued and stops the export thread (waits at most 5 s).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(error = %e, "trace export shutdown");
        }
    }

    /// Begins a request's `SERVER` span. `incoming`: the request's trace fields, its
    /// `traceparent` adopted as the parent when `trust_incoming` and exactly one valid one
    /// came, with its `tracestate` lines (asked only then); `describe`: the request's method,
    /// path and attributes, asked only when it is sampled.
    pub fn begin<'v, S: Iterator<Item = &'v [u8]>>(
        &self,
        incoming: Incoming<'_>,
        tracestate: impl FnOnce() -> S,
        describe: impl FnOnce() -> Described,
    ) -> Box<Traced> {
        let adopted = match (self.trust_incoming, incoming.traceparent) {
            // Two `traceparent` lines are no valid one (§3.2).
            (true, Some(value)) if incoming.traceparents == 1 => parse(value),
            _ => None,
        };
        let adopted_state = match (adopted, incoming.tracestate) {
            (Some(_), true) => joined(tracestate()),
            _ => None,
        };
        // A client's `tracestate` that goes on with no adopted parent is removed.
        let strip_tracestate = incoming.tracestate && adopted_state.is_none();
        let client_fields = incoming.traceparents > 0 || incoming.tracestate;
        // A new trace's low 64 bits: what the ratio sampler compares, as the SDK's does.
        let [random, high_bits, span_bits] = random3();
        // Ids of zeros are invalid.
        let (high_bits, span_bits) = (high_bits.max(1), span_bits.max(1));
        if !self.sampling.sampled(adopted.as_ref(), random) {
            // Not sampled: the trace goes on, flagged so, with this edge's span id.
            let (high, low) = match (adopted, incoming.traceparent) {
                (Some(p), Some(value)) => (
                    context::trace_high_digits(value)
                        .unwrap_or_else(|| context::random_digits(high_bits)),
                    u128::from_be_bytes(p.trace_id.to_bytes()) as u64,
                ),
                _ => (context::random_digits(high_bits), random),
            };
            // Made in its box and written there: no 120-byte moves (callgrind: 30 a request).
            let fresh = Traced {
                server: None,
                traceparent: Traceparent::BLANK,
                tracestate: adopted_state,
                strip_tracestate,
                client_fields,
            };
            let spare = SPARES.with(|spares| spares.borrow_mut().pop());
            let mut traced = match spare {
                Some(mut spare) => {
                    *spare = fresh;
                    spare
                }
                None => Box::new(fresh),
            };
            traced.traceparent.set_unsampled(&high, low, span_bits);
            return traced;
        }
        let parent = match adopted {
            Some(p) => {
                let sc = SpanContext::new(p.trace_id, p.span_id, p.flags, true, TraceState::NONE);
                Context::new().with_remote_span_context(sc)
            }
            None => Context::new(),
        };
        let Described {
            method,
            path,
            attributes,
        } = describe();
        let builder = self
            .tracer
            .span_builder("request")
            .with_kind(SpanKind::Server)
            .with_attributes(attributes);
        let span = self.tracer.build_with_context(builder, &parent);
        let sc = span.span_context();
        let traceparent = format(sc.trace_id(), sc.span_id(), sc.is_sampled());
        Box::new(Traced {
            server: Some(Box::new(Server {
                cx: Context::new().with_span(span),
                method,
                path,
                refused: AtomicBool::new(false),
                tracer: self.tracer.clone(),
            })),
            traceparent,
            tracestate: adopted_state,
            strip_tracestate,
            client_fields,
        })
    }
}

/// Boxes kept per thread for the requests in flight on it (8 KiB at most).
const SPARES_KEPT: usize = 64;

thread_local! {
    /// The boxes of this thread's finished requests that were not sampled, for its next
    /// ones: one allocation a request less.
    // The boxes are what is kept: each is the allocation a request takes.
    #[allow(clippy::vec_box)]
    static SPARES: std::cell::RefCell<Vec<Box<Traced>>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Traced {
    /// Ends a request's use of its trace, handing the box of one that was not sampled to
    /// this thread's next request.
    pub fn done(traced: Box<Traced>) {
        if traced.server.is_none() {
            SPARES.with(|spares| {
                let mut spares = spares.borrow_mut();
                if spares.len() < SPARES_KEPT {
                    spares.push(traced);
                }
            });
        }
    }
}

/// What a sampled request's `SERVER` span is told of it when it begins.
#[derive(Debug)]
pub struct Described {
    /// Its method: the spans' names.
    pub method: String,
    /// Its path without the query, in origin form: matched to its route template.
    pub path: String,
    /// The span's attributes (OpenTelemetry HTTP semantic conventions).
    pub attributes: Vec<KeyValue>,
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
/// dropped whole, one over §3.3.1.5's limits truncated by whole list members
/// ([`tracestate_within_limits`]). One line within them is copied once, into the value.
fn joined<'v>(mut lines: impl Iterator<Item = &'v [u8]>) -> Option<http::HeaderValue> {
    let first = lines.next()?;
    let Some(second) = lines.next() else {
        return http::HeaderValue::from_bytes(&tracestate_within_limits(first)?).ok();
    };
    let mut value = first.to_vec();
    for line in std::iter::once(second).chain(lines) {
        value.push(b',');
        value.extend_from_slice(line);
    }
    http::HeaderValue::from_bytes(&tracestate_within_limits(&value)?).ok()
}

/// One request's trace: its `SERVER` span when sampled, and what its attempts send upstream.
#[derive(Debug)]
pub struct Traced {
    /// Sampled: the recording `SERVER` span. `None`: not sampled, nothing recorded. Boxed:
    /// the 99 % that are not sampled move and drop a small `Traced` (callgrind: 30
    /// instructions a request).
    server: Option<Box<Server>>,
    /// The `SERVER` span's own `traceparent`: sent upstream when the request is not sampled.
    traceparent: Traceparent,
    /// The caller's `tracestate`, sent on with its adopted parent.
    tracestate: Option<http::HeaderValue>,
    /// The request has `tracestate` lines that do not go on.
    strip_tracestate: bool,
    /// The request came with trace fields of its own (to leave out of what goes upstream).
    client_fields: bool,
}

/// A sampled request's `SERVER` span.
#[derive(Debug)]
struct Server {
    /// The context holding the span: the parent of the attempts' `CLIENT` spans.
    cx: Context,
    /// The request's method, which names the spans.
    method: String,
    /// The request's path, whose route template names the `SERVER` span.
    path: String,
    /// A refusal's problem type is its status already.
    refused: AtomicBool,
    /// The tracer its `CLIENT` spans are made with.
    tracer: SdkTracer,
}

impl Traced {
    /// The trace id and this edge's span id, as the access log writes them (lowercase hex).
    pub fn ids(&self) -> (&str, &str) {
        // `traceparent` is ASCII by construction.
        let text = std::str::from_utf8(self.traceparent.value()).unwrap_or("");
        (
            text.get(3..35).unwrap_or(""),
            text.get(36..52).unwrap_or(""),
        )
    }

    /// Whether the request came with `traceparent` or `tracestate` fields of its own, which
    /// must not go upstream beside the router's.
    pub fn client_fields(&self) -> bool {
        self.client_fields
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

    /// The trace fields of a request that is not sampled, the same for each of its attempts
    /// (`traceparent`, and `tracestate` when adopted), written once with its other fields:
    /// `None` when it is sampled, as each attempt then sends its own ([`Traced::attempt`]).
    pub fn fields(&self) -> Option<(&Traceparent, Option<&http::HeaderValue>)> {
        match self.server {
            Some(_) => None,
            None => Some((&self.traceparent, self.tracestate.as_ref())),
        }
    }

    /// Writes [`Traced::fields`] into `headers`, in place of the client's, when the request
    /// is not sampled (a request in `http` form, before its phases).
    pub fn write_fields(&self, headers: &mut http::HeaderMap) {
        let Some((traceparent, tracestate)) = self.fields() else {
            return;
        };
        if let Ok(value) = http::HeaderValue::from_bytes(traceparent.value()) {
            headers.insert(TRACEPARENT.clone(), value);
        }
        match tracestate {
            Some(state) => {
                headers.insert(TRACESTATE.clone(), state.clone());
            }
            None if self.strip_tracestate => {
                headers.remove(&TRACESTATE);
            }
            None => {}
        }
    }

    /// The per-attempt hook: a `CLIENT` span for one attempt (the `resend`th retry) at
    /// `upstream` of `region`, a child of the `SERVER` span, and the trace fields the attempt
    /// sends; a request that is not sampled has neither (its fields went with its head:
    /// [`Traced::fields`]).
    #[inline]
    pub fn attempt(&self, region: &str, upstream: &str, resend: u32) -> Option<(Attempt, Stamp)> {
        // The 99 % that are not sampled return here, without the sampled path's frame.
        let server = self.server.as_deref()?;
        Some(self.sampled_attempt(server, region, upstream, resend))
    }

    fn sampled_attempt(
        &self,
        server: &Server,
        region: &str,
        upstream: &str,
        resend: u32,
    ) -> (Attempt, Stamp) {
        let Server {
            cx, method, tracer, ..
        } = server;
        let (host, port) = host_and_port(upstream);
        // Room for those `Attempt::answered` and `Attempt::failed` add.
        let mut attributes = Vec::with_capacity(8);
        attributes.extend([
            KeyValue::new("http.request.method", method.clone()),
            KeyValue::new("server.address", host.to_owned()),
            KeyValue::new("iuid_router.region", region.to_owned()),
        ]);
        if let Some(port) = port {
            attributes.push(KeyValue::new("server.port", port));
        }
        if resend > 0 {
            attributes.push(KeyValue::new(
                "http.request.resend_count",
                i64::from(resend),
            ));
        }
        let builder = tracer
            .span_builder(method.clone())
            .with_kind(SpanKind::Client)
            .with_attributes(attributes);
        let span = tracer.build_with_context(builder, cx);
        let sc = span.span_context();
        let stamp = Stamp {
            traceparent: format(sc.trace_id(), sc.span_id(), sc.is_sampled()),
            tracestate: self.tracestate.clone(),
            strip_tracestate: self.strip_tracestate,
        };
        (
            Attempt {
                span: Some(Box::new(span)),
            },
            stamp,
        )
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
            ..
        }) = self.server.as_deref()
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
    /// The request carries `tracestate` lines that must not go on (no parent was adopted):
    /// a wire that passes the client's fields through removes them.
    pub strip_tracestate: bool,
}

/// What a request carries of W3C Trace Context, read in one pass over its fields
/// (`proxy::phases::RequestView::trace_fields`).
#[derive(Debug, Clone, Copy, Default)]
pub struct Incoming<'a> {
    /// The first `traceparent` value.
    pub traceparent: Option<&'a [u8]>,
    /// How many `traceparent` lines came (only one makes a parent).
    pub traceparents: u8,
    /// Whether a `tracestate` line came.
    pub tracestate: bool,
}

impl<'a> Incoming<'a> {
    /// Notes one field: `name` (any case) and its value.
    pub fn note(&mut self, name: &[u8], value: &'a [u8]) {
        if name.len() == 11 && name.eq_ignore_ascii_case(b"traceparent") {
            self.traceparent.get_or_insert(value);
            self.traceparents = self.traceparents.saturating_add(1);
        } else if name.len() == 10 && name.eq_ignore_ascii_case(b"tracestate") {
            self.tracestate = true;
        }
    }
}

/// One attempt's `CLIENT` span, when the request is sampled. Ended by
/// [`Attempt::answered`] or [`Attempt::failed`]; dropped unended (the request went away), it
/// ends then.
pub struct Attempt {
    /// Boxed: the attempt loop's future holds it across the attempt, and the SDK's span is
    /// 288 bytes, aligned to 16, which every request's future would carry.
    span: Option<Box<opentelemetry_sdk::trace::Span>>,
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
