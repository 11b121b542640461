//! One HTTP/3 request stream: its head read (within the header read timeout), its 0-RTT
//! admission (`early.rs`), its body fed to [`Proxy::handle`] as the own engine feeds an
//! HTTP/1.x body (an [`OwnBody`]: a body cut midway is never completed upstream), and the
//! answer sent back as the phases hand it over.
//!
//! A response the client takes nothing of for `timeouts.idle_ms` is reset
//! (H3_REQUEST_CANCELLED), as an HTTP/2 stream is; an upstream body that breaks midway
//! resets the stream (H3_INTERNAL_ERROR) rather than end it, so the client never takes a
//! cut answer for a whole one. A stream the client cancels cancels its request.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use ::h3::error::{Code, StreamError};
use bytes::{Buf, Bytes};
use futures_util::future::{select, Either};
use http_body_util::BodyExt;

use super::early::{Admit, Early};
use crate::error::ErrorKind;
use crate::proxy::headers::ClientAddr;
use crate::proxy::{Proxy, ProxyBody};
use crate::upstream::body::{Feed, Inbound, OwnBody};

type Resolver = ::h3::server::RequestResolver<h3_quinn::Connection, Bytes>;
type SendHalf = ::h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;
type RecvHalf = ::h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;

/// The most of a response body handed to the stream at once, in bytes: a client that takes
/// nothing of this much within `idle_ms` has stalled.
const SLICE: usize = 64 << 10;

/// How a stream ended, for its connection's Rapid Reset budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// Answered whole.
    Done,
    /// The client cancelled it (RESET_STREAM or STOP_SENDING) before its answer was sent.
    ClientReset,
    /// Reset by the router: a stalled client, a broken upstream body, a malformed head.
    Reset,
}

/// What each request of a connection is served with.
pub struct Request {
    pub proxy: Arc<Proxy>,
    pub addr: Arc<ClientAddr>,
    pub early: Arc<Early>,
    pub idle: Duration,
    pub header_timeout: Duration,
}

impl Request {
    /// Serves the request stream `resolver` stands for, to its end.
    pub async fn serve(self, resolver: Resolver) -> Ended {
        let resolved = tokio::time::timeout(self.header_timeout, resolver.resolve_request()).await;
        let (req, stream) = match resolved {
            Ok(Ok(resolved)) => resolved,
            Ok(Err(e)) => return ended_by(&e),
            // Dropped: the stream is reset.
            Err(_) => return Ended::Reset,
        };
        let (mut parts, ()) = req.into_parts();
        match self.early.admit(&parts.method) {
            Admit::Complete => {}
            Admit::Early => {
                crate::metrics::http3::early_data(true);
                parts
                    .headers
                    .insert("early-data", http::HeaderValue::from_static("1"));
            }
            Admit::Wait => {
                crate::metrics::http3::early_data(false);
                let completed = self.early.completed();
                if tokio::time::timeout(self.header_timeout, completed)
                    .await
                    .is_err()
                {
                    // Not acted on: the client may send it again (RFC 9114 §4.1.1).
                    let (mut send, _) = stream.split();
                    send.stop_stream(Code::H3_REQUEST_REJECTED);
                    return Ended::Reset;
                }
            }
        }
        let (mut send, mut recv) = stream.split();
        let length = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        // The stream's FIN came with its head (a GET, mostly): no body, and no task to feed one.
        let first = futures_util::poll!(poll_fn(|cx| recv_bytes(&mut recv, cx)));
        if let Poll::Ready(Ok(None)) = first {
            let (_, body) = OwnBody::channel(Some(0), None);
            let req = http::Request::from_parts(parts, Inbound::Own(body));
            let response = self.proxy.handle(req, &self.addr).await;
            return respond(&mut send, response, self.idle).await;
        }
        let (tx, body) = OwnBody::channel(length, None);
        let req = http::Request::from_parts(parts, Inbound::Own(body));
        let feeding = std::pin::pin!(feed(recv, first, tx));
        let responding = std::pin::pin!(async {
            let response = self.proxy.handle(req, &self.addr).await;
            respond(&mut send, response, self.idle).await
        });
        match select(feeding, responding).await {
            // The client cancelled its body: its request is dropped with it.
            Either::Left((Ended::ClientReset, _)) => Ended::ClientReset,
            Either::Left((_, responding)) => responding.await,
            // Answered before the body was read whole: the rest is refused (STOP_SENDING,
            // when the receive half drops).
            Either::Right((ended, _)) => ended,
        }
    }
}

/// Feeds the request body from the stream, `first` (already polled) first, until it ends,
/// the client cancels it, or the phases no longer want it. The phases' own idle timer bounds
/// a client that stops sending.
async fn feed(
    mut recv: RecvHalf,
    first: Poll<Result<Option<Bytes>, StreamError>>,
    tx: tokio::sync::mpsc::Sender<Feed>,
) -> Ended {
    let mut next = first;
    loop {
        let item = match next {
            Poll::Ready(item) => item,
            Poll::Pending => poll_fn(|cx| recv_bytes(&mut recv, cx)).await,
        };
        next = Poll::Pending;
        match item {
            Ok(Some(data)) => {
                if tx.send(Feed::Data(data)).await.is_err() {
                    return Ended::Done;
                }
            }
            Ok(None) => {
                let _ = tx.send(Feed::End).await;
                return Ended::Done;
            }
            Err(e) => {
                let cut = std::io::Error::new(std::io::ErrorKind::ConnectionReset, e.to_string());
                let _ = tx.send(Feed::Failed(cut)).await;
                return ended_by(&e);
            }
        }
    }
}

/// The stream's next bytes of body, `None` at its end.
fn recv_bytes(
    recv: &mut RecvHalf,
    cx: &mut std::task::Context<'_>,
) -> Poll<Result<Option<Bytes>, StreamError>> {
    recv.poll_recv_data(cx)
        .map_ok(|data| data.map(|mut data| data.copy_to_bytes(data.remaining())))
}

/// Sends `response` on the stream: its head, its body as the phases hand it over, its
/// trailers (gRPC's status), then FIN.
async fn respond(
    send: &mut SendHalf,
    response: http::Response<ProxyBody>,
    idle: Duration,
) -> Ended {
    let (parts, body) = response.into_parts();
    if let Err(e) = send
        .send_response(http::Response::from_parts(parts, ()))
        .await
    {
        return ended_by(&e);
    }
    let mut body = std::pin::pin!(body);
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                tracing::debug!(error = %e, "the answer's body broke; HTTP/3 stream reset");
                send.stop_stream(Code::H3_INTERNAL_ERROR);
                return Ended::Reset;
            }
        };
        match frame.into_data() {
            Ok(mut data) => {
                // In slices (no copy): the timer is on the client's progress, and a large
                // frame taken slowly but steadily is progress.
                while !data.is_empty() {
                    let slice = data.split_to(data.len().min(SLICE));
                    match tokio::time::timeout(idle, send.send_data(slice)).await {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => return ended_by(&e),
                        Err(_) => {
                            crate::metrics::client_error(ErrorKind::SendTimeout);
                            tracing::debug!(
                                idle_ms = idle.as_millis() as u64,
                                "the client took nothing of a response; HTTP/3 stream reset"
                            );
                            send.stop_stream(Code::H3_REQUEST_CANCELLED);
                            return Ended::Reset;
                        }
                    }
                }
            }
            Err(frame) => {
                if let Ok(trailers) = frame.into_trailers() {
                    if let Err(e) = send.send_trailers(trailers).await {
                        return ended_by(&e);
                    }
                }
            }
        }
    }
    match send.finish().await {
        Ok(()) => Ended::Done,
        Err(e) => ended_by(&e),
    }
}

/// Who ended a stream that failed: the client's reset, or else the router's.
fn ended_by(e: &StreamError) -> Ended {
    tracing::debug!(error = %e, "HTTP/3 stream ended early");
    match e {
        StreamError::RemoteTerminate { .. } => Ended::ClientReset,
        _ => Ended::Reset,
    }
}
