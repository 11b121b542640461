//! A real OTLP trace receiver on loopback, as an OpenTelemetry Collector's `otlp` receiver
//! serves it: `opentelemetry.proto.collector.trace.v1.TraceService/Export` over gRPC (HTTP/2
//! prior knowledge) and `POST /v1/traces` with a protobuf body (HTTP/1.1), one port for
//! both. Each request is decoded with the OTLP messages (`opentelemetry-proto`) and its spans
//! kept, flattened with their service's name.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use prost::Message;
use tokio::net::TcpListener;

/// `SpanKind` numbers of the OTLP protocol.
pub const SERVER: i32 = 2;
pub const CLIENT: i32 = 3;
/// `Status.code` of an error.
pub const STATUS_ERROR: i32 = 2;

/// One exported span.
#[derive(Debug, Clone)]
pub struct Span {
    /// `service.name` of its resource.
    pub service: String,
    pub name: String,
    pub kind: i32,
    /// Lowercase hex, as `traceparent` writes them.
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent: String,
    pub attributes: BTreeMap<String, String>,
    pub status_code: i32,
    pub status_message: String,
    /// How it came: `grpc` or `http/protobuf`.
    pub via: &'static str,
}

impl Span {
    /// An attribute's value as text, `""` when absent.
    pub fn attr(&self, key: &str) -> &str {
        self.attributes.get(key).map_or("", String::as_str)
    }
}

/// The receiver: its address and what it received.
#[derive(Clone)]
pub struct Receiver {
    pub addr: SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
}

impl Receiver {
    /// Starts one on a free loopback port.
    pub async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
        let kept = spans.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let kept = kept.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let kept = kept.clone();
                        async move { Ok::<_, Infallible>(export(req, &kept).await) }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Receiver { addr, spans }
    }

    /// `http://127.0.0.1:port`: the `otlp.endpoint` of either protocol.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.spans.lock().expect("spans").clone()
    }

    /// The spans of trace `trace_id`, once at least `n` came (within 10 s; the batch
    /// processor sends every 500 ms), then a moment more so that an extra one would show.
    pub async fn trace(&self, trace_id: &str, n: usize) -> Vec<Span> {
        let of_trace = || -> Vec<Span> {
            self.spans()
                .into_iter()
                .filter(|s| s.trace_id == trace_id)
                .collect()
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while of_trace().len() < n && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
        of_trace()
    }
}

/// Answers one export: decodes its spans and keeps them.
async fn export(
    req: hyper::Request<hyper::body::Incoming>,
    kept: &Mutex<Vec<Span>>,
) -> hyper::Response<http_body_util::Either<Full<Bytes>, StreamBody<GrpcFrames>>> {
    let grpc = req
        .headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    let path = req.uri().path().to_owned();
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let (message, via) = match grpc {
        // One message: flag, 4-byte length, the bytes.
        true => (body.get(5..).unwrap_or_default(), "grpc"),
        false => (&body[..], "http/protobuf"),
    };
    let expected = match grpc {
        true => "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        false => "/v1/traces",
    };
    let decoded = ExportTraceServiceRequest::decode(message);
    if let (true, Ok(request)) = (path == expected, &decoded) {
        kept.lock().expect("spans").extend(flatten(request, via));
    }
    let ok = path == expected && decoded.is_ok();
    match grpc {
        true => {
            // An empty ExportTraceServiceResponse, then `grpc-status`.
            let mut trailers = http::HeaderMap::new();
            let status = if ok { "0" } else { "3" };
            trailers.insert("grpc-status", http::HeaderValue::from_static(status));
            let frames: GrpcFrames = futures_util::stream::iter(vec![
                Ok(Frame::data(Bytes::from_static(&[0, 0, 0, 0, 0]))),
                Ok(Frame::trailers(trailers)),
            ]);
            let mut resp =
                hyper::Response::new(http_body_util::Either::Right(StreamBody::new(frames)));
            resp.headers_mut().insert(
                "content-type",
                http::HeaderValue::from_static("application/grpc"),
            );
            resp
        }
        false => {
            let mut resp =
                hyper::Response::new(http_body_util::Either::Left(Full::new(Bytes::new())));
            *resp.status_mut() = if ok {
                http::StatusCode::OK
            } else {
                http::StatusCode::BAD_REQUEST
            };
            resp.headers_mut().insert(
                "content-type",
                http::HeaderValue::from_static("application/x-protobuf"),
            );
            resp
        }
    }
}

type GrpcFrames = futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn text(value: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

fn flatten(request: &ExportTraceServiceRequest, via: &'static str) -> Vec<Span> {
    let mut out = Vec::new();
    for resource_spans in &request.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
            .map(|kv| text(&kv.value))
            .unwrap_or_default();
        for scope in &resource_spans.scope_spans {
            for span in &scope.spans {
                out.push(Span {
                    service: service.clone(),
                    name: span.name.clone(),
                    kind: span.kind,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent: hex(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), text(&kv.value)))
                        .collect(),
                    status_code: span.status.as_ref().map_or(0, |s| s.code),
                    status_message: span
                        .status
                        .as_ref()
                        .map_or(String::new(), |s| s.message.clone()),
                    via,
                });
            }
        }
    }
    out
}
