//! `closed`: a closed-loop load over HTTPS, HTTP/2 or HTTP/3, for bench/h3.sh. `--conns`
//! connections, each with `--streams` requests in flight at all times (one loop each, the
//! next request sent when the last is answered), for `--duration` seconds after a second's
//! warm-up. Prints one JSON line: requests answered 200, other outcomes, req/s, latency
//! percentiles (µs).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};

pub struct Config {
    pub port: u16,
    pub path: String,
    pub proto: String,
    pub conns: usize,
    pub streams: usize,
    pub duration: f64,
    pub ca: String,
    pub sni: String,
}

#[derive(Default)]
struct Tally {
    ok: AtomicU64,
    failed: AtomicU64,
    counting: AtomicBool,
    latencies: Mutex<Vec<u32>>,
}

impl Tally {
    fn done(&self, ok: bool, took: Duration, lat: &mut Vec<u32>) {
        if !self.counting.load(Ordering::Relaxed) {
            return;
        }
        if ok {
            self.ok.fetch_add(1, Ordering::Relaxed);
            lat.push(took.as_micros() as u32);
        } else {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

pub async fn run(cfg: Config) {
    let (tls, name) = super::steady::tls_config(&cfg.ca, &cfg.sni);
    let mut tls = (*tls).clone();
    tls.alpn_protocols = vec![if cfg.proto == "h3" {
        b"h3".to_vec()
    } else {
        b"h2".to_vec()
    }];
    let tls = Arc::new(tls);
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let uri: http::Uri = format!("https://{}:{}{}", cfg.sni, cfg.port, cfg.path)
        .parse()
        .expect("uri");
    let addr: std::net::SocketAddr = format!("127.0.0.1:{}", cfg.port).parse().expect("addr");
    let mut tasks = Vec::new();
    for _ in 0..cfg.conns {
        let (tally, stop, uri, tls, name) = (
            tally.clone(),
            stop.clone(),
            uri.clone(),
            tls.clone(),
            name.clone(),
        );
        let (streams, h3) = (cfg.streams, cfg.proto == "h3");
        tasks.push(tokio::task::spawn_local(async move {
            if h3 {
                h3_conn(addr, tls, &cfg_sni(&name), uri, streams, tally, stop).await
            } else {
                h2_conn(addr, tls, name, uri, streams, tally, stop).await
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    tally.counting.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(cfg.duration)).await;
    tally.counting.store(false, Ordering::Relaxed);
    let secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    let mut lat = tally.latencies.lock().unwrap().clone();
    lat.sort_unstable();
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 * p) as usize).min(lat.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    let ok = tally.ok.load(Ordering::Relaxed);
    println!(
        "{}",
        serde_json::json!({
            "proto": cfg.proto, "ok": ok, "failed": tally.failed.load(Ordering::Relaxed),
            "secs": secs, "rps": ok as f64 / secs,
            "p50_us": pct(0.5), "p99_us": pct(0.99),
        })
    );
}

fn cfg_sni(name: &rustls::pki_types::ServerName<'static>) -> String {
    match name {
        rustls::pki_types::ServerName::DnsName(d) => d.as_ref().to_string(),
        other => format!("{other:?}"),
    }
}

async fn h2_conn(
    addr: std::net::SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    name: rustls::pki_types::ServerName<'static>,
    uri: http::Uri,
    streams: usize,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let _ = tcp.set_nodelay(true);
    let stream = tokio_rustls::TlsConnector::from(tls)
        .connect(name, tcp)
        .await
        .expect("TLS");
    let (sender, conn) = hyper::client::conn::http2::Builder::new(Local)
        .handshake::<_, Empty<Bytes>>(hyper_util::rt::TokioIo::new(stream))
        .await
        .expect("h2 handshake");
    tokio::task::spawn_local(conn);
    let mut loops = Vec::new();
    for _ in 0..streams {
        let (mut sender, uri, tally, stop) =
            (sender.clone(), uri.clone(), tally.clone(), stop.clone());
        loops.push(tokio::task::spawn_local(async move {
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let req = http::Request::get(uri.clone())
                    .body(Empty::new())
                    .expect("req");
                let ok = match sender.send_request(req).await {
                    Ok(resp) => {
                        let status = resp.status();
                        resp.into_body().collect().await.is_ok() && status == 200
                    }
                    Err(_) => false,
                };
                tally.done(ok, t.elapsed(), &mut lat);
                if !ok {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            tally.latencies.lock().unwrap().extend(lat);
        }));
    }
    for l in loops {
        let _ = l.await;
    }
}

async fn h3_conn(
    addr: std::net::SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    sni: &str,
    uri: http::Uri,
    streams: usize,
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
) {
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("QUIC TLS");
    let mut endpoint =
        quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("endpoint");
    endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
    let conn = endpoint
        .connect(addr, sni)
        .expect("connect")
        .await
        .expect("QUIC handshake");
    let (mut driver, sender) = h3::client::new(h3_quinn::Connection::new(conn))
        .await
        .expect("h3");
    tokio::task::spawn_local(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    let mut loops = Vec::new();
    for _ in 0..streams {
        let (mut sender, uri, tally, stop) =
            (sender.clone(), uri.clone(), tally.clone(), stop.clone());
        loops.push(tokio::task::spawn_local(async move {
            let mut lat = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let req = http::Request::get(uri.clone()).body(()).expect("req");
                let ok = async {
                    let mut stream = sender.send_request(req).await.ok()?;
                    stream.finish().await.ok()?;
                    let resp = stream.recv_response().await.ok()?;
                    while stream.recv_data().await.ok()?.is_some() {}
                    Some(resp.status() == 200)
                }
                .await
                .unwrap_or(false);
                tally.done(ok, t.elapsed(), &mut lat);
                if !ok {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            tally.latencies.lock().unwrap().extend(lat);
        }));
    }
    for l in loops {
        let _ = l.await;
    }
}

/// hyper's executor on the current thread's `LocalSet`.
#[derive(Clone, Copy)]
struct Local;

impl<F: std::future::Future + 'static> hyper::rt::Executor<F> for Local {
    fn execute(&self, fut: F) {
        tokio::task::spawn_local(fut);
    }
}
