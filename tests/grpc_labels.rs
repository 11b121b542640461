//! A gRPC answer is counted by what it is (docs/metrics.md, `iuid_router_requests_total`):
//! its HTTP status is 200 whatever happened, so the router counts its `grpc-status` as
//! `google.rpc.Code` maps it. Over h2c, real sockets.

mod common;

use bytes::Bytes;
use common::{lettered_table, metric_sum, metrics_text, orders_config, Router, Upstream};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};

/// One gRPC call over a new h2c connection with `entity` in `x-entity-id`: its HTTP status
/// and `grpc-status`.
async fn call(router: &Router, entity: &str) -> (u16, Option<String>) {
    let tcp = tokio::net::TcpStream::connect(router.addr)
        .await
        .expect("connect");
    let (mut h2, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
            .await
            .expect("h2 handshake");
    tokio::spawn(conn);
    let req = http::Request::post(router.url("/orders.v1.Orders/GetOrder"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-entity-id", entity)
        .body(Full::new(Bytes::from_static(&[0, 0, 0, 0, 0])))
        .expect("request");
    let resp = h2.send_request(req).await.expect("answer");
    let status = resp.status().as_u16();
    let head = resp.headers().get("grpc-status").cloned();
    let body = resp.into_body().collect().await.expect("body");
    let grpc = head
        .or_else(|| body.trailers().and_then(|t| t.get("grpc-status")).cloned())
        .map(|v| v.to_str().expect("ascii").to_owned());
    (status, grpc)
}

fn counted(text: &str, class: &str) -> f64 {
    let status = format!("status=\"{class}\"");
    metric_sum(
        text,
        "iuid_router_requests_total",
        &["route=\"header\"", "protocol=\"h2\"", &status],
    )
}

#[tokio::test]
async fn a_grpc_refusal_counts_as_the_status_it_stands_for() {
    let up = Upstream::start("a").await;
    let router = Router::start(
        &orders_config().yaml(),
        &lettered_table("g", &[&[up.url()]]),
    )
    .await;
    let before = metrics_text(router.admin).await;
    // A malformed id: the router refuses it, HTTP 200 with grpc-status 3 INVALID_ARGUMENT.
    let (status, grpc) = call(&router, "not-an-id").await;
    assert_eq!((status, grpc.as_deref()), (200, Some("3")));
    let after = metrics_text(router.admin).await;
    assert_eq!(
        counted(&after, "4xx") - counted(&before, "4xx"),
        1.0,
        "{after}"
    );
    assert_eq!(
        counted(&after, "2xx") - counted(&before, "2xx"),
        0.0,
        "{after}"
    );
}
