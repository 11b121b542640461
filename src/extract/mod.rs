//! The pure readers route kinds use to find ids in a request, and the names of the kinds.
//!
//! Each route kind lives in one file of `crate::proxy::route`, which owns its config keys,
//! their validation, its match on the request head and its phase. What it reads with is
//! here, free of I/O and of the data path, so that it can be tested and benchmarked alone:
//! percent-decoding of path segments ([`path`]), the GraphQL scan, plan and plan cache
//! ([`graphql`]), the protobuf field reader ([`grpc`]), the page a `fanout:` request asks
//! for ([`fanout`]), a query parameter ([`query`]) and the string at a JSON pointer in a
//! body ([`json`]).
//!
//! Extraction is scheme-neutral: a route yields the id's raw token and the scheme the route
//! names (`crate::scheme`); the live routing table parses and resolves it.

pub mod fanout;
pub mod graphql;
pub mod grpc;
pub mod json;
pub mod normalize;
pub mod path;
pub mod query;

/// Whether a request reads or writes (docs/data-path.md "Reads and writes"): what decides
/// whether it may be sent twice, and, for moves between regions, whether it is mirrored
/// (a read) or held (a write).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// A safe method (`GET`, `HEAD`, `OPTIONS`, `TRACE`, RFC 9110 §9.2.1) or GraphQL
    /// queries only.
    Read,
    /// Any other method, a GraphQL mutation, a gRPC call.
    Write,
}

impl Access {
    /// The access a method implies alone (RFC 9110 §9.2.1's safe methods are reads).
    pub fn of_method(method: &[u8]) -> Access {
        match method {
            b"GET" | b"HEAD" | b"OPTIONS" | b"TRACE" => Access::Read,
            _ => Access::Write,
        }
    }

    /// Whether a request its upstream may have acted on (a reset before the answer) may be
    /// sent again: RFC 9110 §9.2.2's idempotent methods, unless the body says otherwise
    /// (`said`: what a GraphQL body's operations are; a query may, a mutation never, whatever
    /// the method).
    pub fn resendable(method: &[u8], said: Option<Access>) -> bool {
        match said {
            Some(Access::Read) => true,
            Some(Access::Write) => false,
            None => matches!(
                method,
                b"GET" | b"HEAD" | b"OPTIONS" | b"PUT" | b"DELETE" | b"TRACE"
            ),
        }
    }

    /// Both together: a write if either writes (a batch with one mutation writes).
    pub fn and(self, other: Access) -> Access {
        match (self, other) {
            (Access::Read, Access::Read) => Access::Read,
            _ => Access::Write,
        }
    }
}

/// The kind of route an id was read from: the config key that names the kind, the `route`
/// label of metrics, and what problems and the access log say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    /// A `path:` template.
    Path,
    /// A `header:` route.
    Header,
    /// A `graphql:` route.
    Graphql,
    /// A `fanout:` route (every region asked).
    Fanout,
    /// A `grpc:` route (the id in the first message).
    Grpc,
    /// A `query:` route (the id in a query parameter).
    Query,
    /// A `json:` route (the id at a JSON pointer in the body).
    Json,
}

impl RouteKind {
    /// Every kind, in declaration order: a kind's index here is `kind as usize` (metrics
    /// index their counters so).
    pub const ALL: [RouteKind; 7] = [
        RouteKind::Path,
        RouteKind::Header,
        RouteKind::Graphql,
        RouteKind::Fanout,
        RouteKind::Grpc,
        RouteKind::Query,
        RouteKind::Json,
    ];

    /// Lowercase name, as in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteKind::Path => "path",
            RouteKind::Header => "header",
            RouteKind::Graphql => "graphql",
            RouteKind::Fanout => "fanout",
            RouteKind::Grpc => "grpc",
            RouteKind::Query => "query",
            RouteKind::Json => "json",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::RouteKind;

    #[test]
    fn all_is_in_declaration_order() {
        for (i, kind) in RouteKind::ALL.into_iter().enumerate() {
            assert_eq!(kind as usize, i, "{kind:?}");
        }
    }
}
