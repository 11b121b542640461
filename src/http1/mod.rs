//! The HTTP/1.1 codec of the router's own engine (RFC 9112), on `httparse`: message heads
//! parsed into offsets over the connection's read buffer, body framing decided strictly,
//! chunked bodies checked as they pass (and passed on as they came), heads written into one
//! buffer.
//!
//! It works on bytes and knows nothing of routes, regions or sockets: `crate::relay` moves
//! the bytes (a socket and its buffer, bodies relayed by their framing) for `server::h1` (the
//! listener's side) and `upstream::raw` (the upstream pools' side), and `proxy::h1` applies
//! the proxy's rules. Every function here is pure, so the fuzz target
//! (`fuzz/`) and the conformance tests drive it without a socket.
//!
//! Strictness is the point: what one hop frames differently from the next is how requests are
//! smuggled. Where RFC 9112 lets a recipient choose, this codec refuses: `Transfer-Encoding`
//! with `Content-Length`, two different lengths, a length that is not all digits, a bare LF
//! in a chunked body, a chunk size that is not 1–16 hex digits, `chunked` that is not the last
//! or is applied twice.

/// The fuzz target's invariants, shared with the corpus replay test: not part of the codec.
#[doc(hidden)]
pub mod check;
pub mod chunked;
pub mod framing;
pub mod head;
pub mod write;

pub use chunked::{ChunkError, Chunked};
pub use framing::{request_framing, response_framing, Framing, FramingError};
pub use head::{
    parse_request, parse_response, Field, HeadError, RequestHead, ResponseHead, Seen, Span,
};
