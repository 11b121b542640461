//! A gRPC-style upstream for the tests of every protocol that carries gRPC.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

use super::url;

/// One gRPC message frame: flag 0, 4-byte big-endian length, the bytes.
pub fn frame(message: &[u8]) -> Bytes {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    Bytes::from(out)
}

/// A gRPC-style upstream over HTTP/2 prior knowledge: each request is answered with `n`
/// messages (`n` from the `x-messages` metadata, default 1), then trailers `grpc-status: 0`
/// and `x-served-by: <name>`. Records the `te` each request carried.
pub async fn upstream(name: &'static str) -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let te: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let log = te.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let log = log.clone();
            tokio::spawn(async move {
                let service = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let log = log.clone();
                    async move {
                        let te = req
                            .headers()
                            .get("te")
                            .and_then(|v| v.to_str().ok())
                            .map(str::to_owned);
                        log.lock().expect("log").push(te);
                        let n: usize = req
                            .headers()
                            .get("x-messages")
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(1);
                        let got = req
                            .into_body()
                            .collect()
                            .await
                            .map(|b| b.to_bytes())
                            .unwrap_or_default();
                        log.lock()
                            .expect("log")
                            .push(Some(format!("body {}", got.len())));
                        let mut frames: Vec<Result<Frame<Bytes>, Infallible>> = (0..n)
                            .map(|i| {
                                Ok(Frame::data(frame(
                                    format!("message {i} from {name}").as_bytes(),
                                )))
                            })
                            .collect();
                        let mut trailers = http::HeaderMap::new();
                        trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                        trailers.insert("x-served-by", http::HeaderValue::from_static(name));
                        frames.push(Ok(Frame::trailers(trailers)));
                        let body = StreamBody::new(futures_util::stream::iter(frames));
                        let mut resp = hyper::Response::new(body);
                        resp.headers_mut().insert(
                            "content-type",
                            http::HeaderValue::from_static("application/grpc"),
                        );
                        Ok::<_, Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url(addr), te)
}
