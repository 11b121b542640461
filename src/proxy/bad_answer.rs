//! Upstream answers the router does not relay as they came: while nothing of them has gone
//! to the client, they are 502 `bad-gateway`, counted against the upstream
//! (docs/data-path.md).
//!
//! - A `101 Switching Protocols` to a request that asked for no upgrade.
//! - A chunked answer whose body fails in what arrived with its head: a chunk size that is not
//!   hex (`2zz`, `0x2`, `+2`), `Transfer-Encoding: chunked` over a `Content-Length` body.
//!   An answer is handed over at its head, before its body is decoded (by hyper's client or
//!   `upstream::h1`), so unless the first frame is looked at first, the head is relayed and
//!   the client's connection is then closed with no answer.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;

use bytes::Bytes;
use http::header::TRANSFER_ENCODING;
use http::Response;
use http_body::{Body as _, Frame};

use super::{Life, Target};
use crate::error::ErrorKind;
use crate::problem::Problem;
use crate::upstream::body::{BoxError, Inbound};
use crate::upstream::forward::Answered;

/// How often a request lets its worker run its other tasks while it looks for the first
/// frame. What came in the same read as the head, hyper's connection task has decoded
/// already; it runs on the same event loop, so a turn lets it read and decode a segment that
/// was right behind the head (on loopback, an upstream's second write was caught about 95 %
/// of the time with 4 turns, 97 % with 8: more buy little). Never a timed wait: a stream
/// whose first chunk comes later (server-sent events) has its head relayed at once.
const TURNS: usize = 4;

/// A `101` to a request that asked for no upgrade (RFC 9110 §15.2.2: a server switches
/// only to a protocol the client listed in `Upgrade`): relayed, it would hand the client's
/// connection to a protocol it never asked for. The upstream answered wrongly: 502,
/// counted against it.
pub(super) fn unsolicited_switch(target: &Target, answered: &Answered) -> Problem {
    let region = target.region();
    region.state.metrics.upstream_error(ErrorKind::Reset);
    tracing::warn!(region = %region.name, upstream = %answered.upstream, "upstream switched protocols unasked");
    Problem::BadGateway {
        region: region.name.clone(),
        detail: "the upstream answered 101 Switching Protocols to a request that asked \
                 for no upgrade"
            .to_owned(),
    }
}

/// The first frame of an answer with `Transfer-Encoding` (chunked, or read to the
/// connection's end), if it has already arrived: to be put back in front of the body. Its
/// error instead is the 502, counted against the upstream (`trail` names the region and
/// upstream that answered); hyper has closed that connection, so it is not used again.
///
/// Any other answer (its length known, or no body) is not looked at: the REST path pays a
/// header lookup.
pub(super) async fn first_frame(
    resp: &mut Response<Inbound>,
    trail: &Life,
) -> Result<Option<Frame<Bytes>>, Problem> {
    if !resp.headers().contains_key(TRANSFER_ENCODING) || resp.body().is_end_stream() {
        return Ok(None);
    }
    let body = resp.body_mut();
    for turn in 0..=TURNS {
        match poll_fn(|cx| Poll::Ready(Pin::new(&mut *body).poll_frame(cx))).await {
            Poll::Ready(Some(Ok(frame))) => return Ok(Some(frame)),
            Poll::Ready(Some(Err(e))) => return Err(broken(&e, trail)),
            Poll::Ready(None) => return Ok(None),
            Poll::Pending if turn < TURNS => tokio::task::yield_now().await,
            Poll::Pending => {}
        }
    }
    Ok(None)
}

/// The 502 for an answer whose body failed before any of it was relayed.
fn broken(e: &BoxError, trail: &Life) -> Problem {
    let mut cause: &(dyn std::error::Error + 'static) = &**e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    let detail = format!("the answer's body failed before any of it was relayed: {cause}");
    let region = trail.region.as_ref().map_or("-", |r| &*r.label);
    if let Some(metrics) = &trail.region {
        metrics.upstream_error(ErrorKind::Reset);
    }
    let upstream = trail.upstream.as_ref().map_or("-", |a| a.as_str());
    tracing::warn!(region, upstream, detail, "upstream answer unusable");
    Problem::BadGateway {
        region: region.to_owned(),
        detail,
    }
}
