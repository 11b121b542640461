//! An HTTP/1.1 upstream's answer body on the own engine's socket (`upstream::h1`'s answers,
//! carried to the client as `body::Inbound::Raw`): read from its connection as it is
//! polled, its framing followed to the end (RFC 9112 §6.3), the connection given back to the
//! calling worker's pool only then. Apart from `h1.rs` so that `body.rs`, which names it,
//! and `h1.rs`, which uses `body.rs`, import no circle.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use super::raw::RawConn;
use super::UpstreamState;
use crate::http1::{Chunked, Framing};

/// `body::BoxError`, named here without importing `body.rs` (which names this body).
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What is left of an answer's body.
#[derive(Debug)]
enum Left {
    Length(u64),
    Chunked(Box<Chunked>),
    Close,
    Done,
}

/// An upstream answer's body, read from its connection as it is polled (the data of a
/// chunked body decoded, its trailers dropped). At its framed end the connection goes back
/// to the calling worker's pool when it can be used again; dropped before, it is closed.
///
/// Errors: the connection closed or failed before the body's end, or a chunked framing
/// that is invalid (`io::Error`, the upstream's).
#[derive(Debug)]
pub struct RawBody {
    conn: Option<RawConn>,
    left: Left,
    reusable: bool,
    state: Arc<UpstreamState>,
}

impl RawBody {
    pub(super) fn new(
        state: Arc<UpstreamState>,
        conn: RawConn,
        framing: Framing,
        reusable: bool,
    ) -> RawBody {
        let left = match framing {
            Framing::Empty | Framing::Length(0) => Left::Done,
            Framing::Length(n) => Left::Length(n),
            Framing::Chunked => Left::Chunked(Box::new(Chunked::decoding())),
            Framing::Close => Left::Close,
        };
        let mut body = RawBody {
            conn: Some(conn),
            left,
            reusable,
            state,
        };
        if matches!(body.left, Left::Done) {
            body.finish();
        }
        body
    }

    /// The body's end: its connection pooled when nothing else came on it.
    fn finish(&mut self) {
        self.left = Left::Done;
        if let Some(conn) = self.conn.take() {
            if self.reusable && conn.pending().is_empty() {
                self.state.raw_pool().checkin(conn);
            }
        }
    }
}

fn cut() -> BoxError {
    Box::new(io::Error::new(
        io::ErrorKind::UnexpectedEof,
        "the upstream closed the connection before the body's end",
    ))
}

impl Body for RawBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        loop {
            let Some(up) = this.conn.as_mut() else {
                return Poll::Ready(None);
            };
            if up.pending().is_empty() && !matches!(this.left, Left::Done) {
                let n = ready!(up.poll_fill(cx)).map_err(|e| Box::new(e) as BoxError)?;
                if n == 0 {
                    if matches!(this.left, Left::Close) {
                        this.left = Left::Done;
                        this.conn = None;
                        return Poll::Ready(None);
                    }
                    this.conn = None;
                    return Poll::Ready(Some(Err(cut())));
                }
            }
            match &mut this.left {
                Left::Done => {
                    this.finish();
                    return Poll::Ready(None);
                }
                Left::Length(left) => {
                    let take = up
                        .pending()
                        .len()
                        .min(usize::try_from(*left).unwrap_or(usize::MAX));
                    let data = Bytes::copy_from_slice(&up.pending()[..take]);
                    up.consume(take);
                    *left -= take as u64;
                    if *left == 0 {
                        this.finish();
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Left::Close => {
                    let data = Bytes::copy_from_slice(up.pending());
                    up.consume(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Left::Chunked(chunked) => {
                    let in_data = chunked.in_data();
                    let progress = chunked.scan(up.pending()).map_err(|e| {
                        Box::new(io::Error::new(io::ErrorKind::InvalidData, format!("{e}")))
                            as BoxError
                    })?;
                    let data = (in_data && progress.used > 0)
                        .then(|| Bytes::copy_from_slice(&up.pending()[..progress.used]));
                    up.consume(progress.used);
                    if progress.done {
                        this.finish();
                    }
                    if let Some(data) = data {
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.left, Left::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.left {
            Left::Done => SizeHint::with_exact(0),
            Left::Length(n) => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}
