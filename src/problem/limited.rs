//! The bodies the router reads whole before routing, and the limits their 413 names
//! (docs/config.md `limits`).

/// A body the router reads whole before routing, named in its 413.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitedBody {
    /// A GraphQL request body (`limits.graphql_body_bytes`).
    GraphqlBody,
    /// A gRPC call's first message (`limits.grpc_message_bytes`).
    GrpcMessage,
    /// A `json:` route's request body (`limits.json_body_bytes`).
    JsonBody,
}

impl LimitedBody {
    /// As the problem's detail names it.
    pub fn as_str(self) -> &'static str {
        match self {
            LimitedBody::GraphqlBody => "the GraphQL body",
            LimitedBody::GrpcMessage => "the gRPC call's first message",
            LimitedBody::JsonBody => "the JSON body",
        }
    }

    pub(super) fn title(self) -> &'static str {
        match self {
            LimitedBody::GraphqlBody => "GraphQL body too large",
            LimitedBody::GrpcMessage => "gRPC message too large",
            LimitedBody::JsonBody => "JSON body too large",
        }
    }
}
