//! `grpc:` routes (docs/tls-h2-grpc.md): a gRPC method's path, matched exactly; the id is a
//! field of the call's first request message (`field: 1`, or `2.1` inside field 2).
//!
//! Phase 2 reads the call's first message, bounded, finds the id field in it (the protobuf
//! reader is `crate::extract::grpc`'s), and puts what was read back in front of the rest of
//! the stream. Only the first message is buffered: a client-streaming or bidirectional call
//! streams on after it, so the upstream sees the first message as soon as it is routed.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use http_body::Body as _;
use http_body_util::{BodyExt, Either};
use serde::Deserialize;

use super::{scheme_or_default, Extraction, Kind, Route, RouteError, Token};
use crate::extract::graphql::plan::ParseLimits;
use crate::extract::grpc::{self, FieldSpec};
use crate::extract::{Access, RouteKind};
use crate::problem::Problem;
use crate::proxy::ClientBody;
use crate::upstream::body::{Inbound, Prefixed};

/// A `grpc:` route's keys.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Spec {
    /// The method's path, `/package.Service/Method`.
    grpc: String,
    /// The scheme of the route's ids (docs/schemes.md); default `iuid`.
    #[serde(default)]
    scheme: Option<String>,
    /// The field holding the id (`1`, or `2.1` inside field 2).
    #[serde(default)]
    field: Option<FieldSpec>,
    /// The method only reads (docs/data-path.md "Reads and writes"): its calls may fail
    /// over (docs/failover.md). Default `false`: a gRPC call is a write.
    #[serde(default)]
    reads: bool,
}

impl Kind for Spec {
    fn scheme(&self) -> Option<&str> {
        self.scheme.as_deref()
    }

    fn compile(self, routes: &mut Vec<Route>, _: ParseLimits) -> Result<(), RouteError> {
        let Some(field) = self.field else {
            return Err(RouteError::new(
                "grpc",
                "a grpc route needs `field:`, the field holding the id",
            ));
        };
        let field = field.path().map_err(|e| RouteError::new("field", e))?;
        if !self.grpc.starts_with('/') {
            return Err(RouteError::new(
                "grpc",
                format!(
                    "grpc method `{}` must start with /, as /package.Service/Method",
                    self.grpc
                ),
            ));
        }
        crate::extract::normalize::check_template(&self.grpc)
            .map_err(|e| RouteError::new("grpc", e))?;
        let scheme = scheme_or_default(self.scheme)?;
        routes.push(Route::Grpc(Arc::new(GrpcRoute {
            path: self.grpc,
            field,
            scheme,
            reads: self.reads,
        })));
        Ok(())
    }
}

impl super::Routes {
    /// What `found` says of whether the request reads, over its method: a GraphQL
    /// request's operations, or a `grpc:` route of method `path` with `reads: true` (its
    /// calls are reads, docs/failover.md; any other call is a write).
    pub fn said(&self, found: &Extraction<'_, '_>, path: &str) -> Option<Access> {
        match found {
            Extraction::Ids(_, access, _) => Some(*access),
            Extraction::Id(_, RouteKind::Grpc) => self
                .routes
                .iter()
                .any(|r| matches!(r, Route::Grpc(g) if g.reads && g.path == path))
                .then_some(Access::Read),
            _ => None,
        }
    }
}

/// A compiled `grpc:` route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcRoute {
    /// The method's path, matched exactly (`/orders.v1.Orders/GetOrder`).
    pub path: String,
    /// Field numbers from the outer message inwards.
    pub field: Vec<u32>,
    /// The scheme of the id.
    pub scheme: String,
    /// The method only reads (`reads: true`): its calls may fail over.
    pub reads: bool,
}

/// The id the route names, as an extraction, and the body to forward. The first message may
/// be at most `limit` bytes (413, `RESOURCE_EXHAUSTED` for a gRPC client); each wait for more
/// of it at most `idle` (408).
pub(super) async fn read_id<'r, 'q>(
    route: &'r GrpcRoute,
    mut body: Inbound,
    limit: usize,
    idle: Duration,
) -> Result<(Extraction<'r, 'q>, ClientBody), Problem> {
    let mut buf = BytesMut::new();
    let mut ended = false;
    while grpc::first_message(&buf).is_none() {
        if grpc::declared_len(&buf).is_some_and(|len| len > limit) {
            return Err(Problem::PayloadTooLarge {
                what: crate::problem::LimitedBody::GrpcMessage,
                limit,
            });
        }
        match tokio::time::timeout(idle, body.frame()).await {
            Err(_) => {
                let kind = crate::error::ErrorKind::BodyTimeout;
                crate::metrics::client_error(kind);
                let detail = format!("no request bytes for {} ms", idle.as_millis());
                return Err(Problem::Client(crate::error::Error::new(kind, detail)));
            }
            Ok(None) => {
                ended = true;
                break;
            }
            Ok(Some(Err(e))) => return Err(crate::proxy::client_body_problem(&*e)),
            Ok(Some(Ok(frame))) => {
                if let Ok(data) = frame.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
        }
    }
    // A message that arrived whole in one frame is checked here.
    if grpc::declared_len(&buf).is_some_and(|len| len > limit) {
        return Err(Problem::PayloadTooLarge {
            what: crate::problem::LimitedBody::GrpcMessage,
            limit,
        });
    }
    let read = buf.freeze();
    let id = match grpc::first_message(&read) {
        None => Err("the request has no complete first message".to_owned()),
        Some((true, _)) => Err("the first message is compressed; its id cannot be read".to_owned()),
        Some((false, message)) => grpc::field(message, &route.field)
            .map(<[u8]>::to_vec)
            .map_err(|e| {
                format!(
                    "the first message has no id at field {}: {e}",
                    grpc::path_text(&route.field)
                )
            }),
    }
    .map_err(Problem::GrpcInvalid)?;
    let body = if ended || body.is_end_stream() {
        Either::Right(read)
    } else {
        Either::Left(Prefixed::with_prefix(read, body))
    };
    let token = Token {
        text: Cow::Owned(id),
        scheme: &route.scheme,
    };
    Ok((Extraction::Id(token, RouteKind::Grpc), body))
}
