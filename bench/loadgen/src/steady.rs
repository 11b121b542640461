//! `steady` and `delay` (bench/chaos.py, issue 40): a paced keep-alive GET load that judges every
//! request, and a TCP proxy that delays what it forwards. See the crate's doc for the options
//! and the JSON printed.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::signal::unix::{signal, SignalKind};
use tokio_rustls::rustls;

use super::{cpu_s, errno_name, print_line, summary};

/// Failures listed one by one in the JSON, at most.
const MAX_LISTED: usize = 5000;
/// Width of a timeline bucket.
const BUCKET_S: f64 = 0.1;

pub struct Config {
    pub port: u16,
    pub paths: Vec<String>,
    pub conns: usize,
    pub rate: f64,
    pub duration: f64,
    pub timeout: Duration,
    pub per_conn: u64,
    pub tls: Option<(Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>)>,
}

/// A client config trusting the CA in `ca` (PEM), for server name `sni`.
pub fn tls_config(
    ca: &str,
    sni: &str,
) -> (Arc<rustls::ClientConfig>, rustls::pki_types::ServerName<'static>) {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca)
        .unwrap_or_else(|e| panic!("{ca}: {e}"))
    {
        roots
            .add(cert.unwrap_or_else(|e| panic!("{ca}: {e}")))
            .expect("CA certificate");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    // Every handshake a full one: a resumed session would keep the certificate it began with,
    // and a rotation would go unseen.
    config.resumption = rustls::client::Resumption::disabled();
    let name = rustls::pki_types::ServerName::try_from(sni.to_string()).expect("--sni");
    (Arc::new(config), name)
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Conn = Pin<Box<dyn Io>>;

#[derive(Default)]
struct Tally {
    requests: u64,
    ok: u64,
    failures: BTreeMap<String, u64>,
    latency: Vec<f64>,
}

impl Tally {
    fn add(&mut self, outcome: &Outcome, ms: Option<f64>) {
        self.requests += 1;
        match outcome {
            Outcome::Status(s, _) if (200..300).contains(s) => self.ok += 1,
            o => *self.failures.entry(o.kind()).or_default() += 1,
        }
        self.latency.extend(ms);
    }
    fn json(&mut self) -> Value {
        json!({"requests": self.requests, "ok": self.ok, "failures": self.failures,
               "latency_ms": summary(&mut self.latency)})
    }
}

#[derive(Default)]
struct Stats {
    all: Tally,
    by_path: Vec<Tally>,
    timeline: BTreeMap<(u64, usize), (u64, u64)>,
    failed: Vec<(f64, usize, String)>,
    certs: BTreeMap<String, u64>,
    connects: u64,
}

enum Outcome {
    /// A status, with the slug of the router's problem type when the body has one.
    Status(u16, Option<String>),
    Refused,
    ConnectError(String),
    TlsError,
    Reset,
    Closed,
    Timeout,
}

impl Outcome {
    fn kind(&self) -> String {
        match self {
            Outcome::Status(s, None) => format!("status {s}"),
            Outcome::Status(s, Some(slug)) => format!("status {s} {slug}"),
            Outcome::Refused => "refused".into(),
            Outcome::ConnectError(e) => format!("connect_error ({e})"),
            Outcome::TlsError => "tls_error".into(),
            Outcome::Reset => "reset".into(),
            Outcome::Closed => "closed".into(),
            Outcome::Timeout => "timeout".into(),
        }
    }
}

pub async fn run(cfg: Config) {
    let cfg = Arc::new(cfg);
    let stats = Arc::new(Mutex::new(Stats {
        by_path: (0..cfg.paths.len()).map(|_| Tally::default()).collect(),
        ..Default::default()
    }));
    let start_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(cfg.duration);
    let interval = Duration::from_secs_f64(cfg.conns as f64 / cfg.rate);
    let mut tasks = Vec::new();
    for c in 0..cfg.conns {
        // Staggered so that the connections' requests interleave evenly.
        let first = t0 + interval.mul_f64(c as f64 / cfg.conns as f64);
        tasks.push(tokio::spawn(connection(
            c,
            cfg.clone(),
            stats.clone(),
            t0,
            first,
            end,
            interval,
        )));
    }
    for t in tasks {
        let _ = t.await;
    }
    let mut s = stats.lock().unwrap();
    let by_path: Vec<Value> = cfg
        .paths
        .iter()
        .zip(s.by_path.iter_mut())
        .map(|(p, t)| {
            let mut v = t.json();
            v["path"] = json!(p);
            v
        })
        .collect();
    let timeline: Vec<Value> = s
        .timeline
        .iter()
        .map(|((b, p), (ok, f))| json!([b, p, ok, f]))
        .collect();
    let failed: Vec<Value> = s
        .failed
        .iter()
        .map(|(t, p, k)| json!([(t * 1000.0).round() / 1000.0, p, k]))
        .collect();
    let mut out = s.all.json();
    out["start_unix"] = json!(start_unix);
    out["duration_s"] = json!(t0.elapsed().as_secs_f64());
    out["rate"] = json!(cfg.rate);
    out["conns"] = json!(cfg.conns);
    out["timeout_ms"] = json!(cfg.timeout.as_millis() as u64);
    out["by_path"] = json!(by_path);
    out["bucket_s"] = json!(BUCKET_S);
    out["timeline"] = json!(timeline);
    out["failed"] = json!(failed);
    out["certs"] = json!(s.certs);
    out["connects"] = json!(s.connects);
    out["cpu_s"] = json!(cpu_s());
    print_line(&out);
}

async fn connection(
    c: usize,
    cfg: Arc<Config>,
    stats: Arc<Mutex<Stats>>,
    t0: Instant,
    mut next: Instant,
    end: Instant,
    interval: Duration,
) {
    let addr = SocketAddr::from(([127, 0, 0, 1], cfg.port));
    let mut conn: Option<Conn> = None;
    let mut used = 0u64;
    // One path per connection, so that a region that stalls holds up only its own
    // connections' requests, not the other paths' (each connection waits for its answers).
    let p = c % cfg.paths.len();
    let mut buf = Vec::with_capacity(4096);
    while next < end {
        tokio::time::sleep_until(next.into()).await;
        let request = format!(
            "GET {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nUser-Agent: loadgen-steady\r\n\r\n",
            cfg.paths[p], cfg.port
        );
        let due = Instant::now();
        let mut fresh = None;
        let result = tokio::time::timeout(cfg.timeout, async {
            if conn.is_none() {
                let (c, cert) = open(addr, &cfg).await?;
                fresh = Some(cert);
                conn = Some(c);
                used = 0;
            }
            let io = conn.as_mut().unwrap();
            let sent = Instant::now();
            io.write_all(request.as_bytes())
                .await
                .map_err(|e| judge_io(&e))?;
            let close = read_answer(io, &mut buf).await?;
            Ok::<_, Outcome>((close, sent.elapsed()))
        })
        .await;
        let (outcome, ms) = match result {
            Ok(Ok(((status, close), took))) => {
                used += 1;
                if close || (cfg.per_conn > 0 && used >= cfg.per_conn) {
                    conn = None;
                }
                let slug = (!(200..300).contains(&status)).then(|| problem_slug(&buf)).flatten();
                (Outcome::Status(status, slug), Some(took.as_secs_f64() * 1000.0))
            }
            Ok(Err(o)) => {
                conn = None;
                (o, None)
            }
            Err(_) => {
                conn = None;
                (Outcome::Timeout, None)
            }
        };
        {
            let mut s = stats.lock().unwrap();
            if let Some(cert) = fresh {
                s.connects += 1;
                if let Some(cert) = cert {
                    *s.certs.entry(cert).or_default() += 1;
                }
            }
            let failed = !matches!(outcome, Outcome::Status(s, _) if (200..300).contains(&s));
            let t = (due - t0).as_secs_f64();
            let bucket = (t / BUCKET_S) as u64;
            let e = s.timeline.entry((bucket, p)).or_default();
            if failed {
                e.1 += 1;
                if s.failed.len() < MAX_LISTED {
                    s.failed.push((t, p, outcome.kind()));
                }
            } else {
                e.0 += 1;
            }
            s.all.add(&outcome, ms);
            s.by_path[p].add(&outcome, ms);
        }
        next += interval;
        let now = Instant::now();
        if next < now {
            // Behind (a slow answer): skip the missed slots rather than burst.
            let missed = ((now - next).as_secs_f64() / interval.as_secs_f64()).ceil();
            next += interval.mul_f64(missed);
        }
    }
}

/// The slug of a problem+json body (`urn:iuid-router:problem:<slug>`), if the answer has one.
fn problem_slug(answer: &[u8]) -> Option<String> {
    const URN: &[u8] = b"urn:iuid-router:problem:";
    let at = answer.windows(URN.len()).position(|w| w == URN)? + URN.len();
    let slug: Vec<u8> = answer[at..]
        .iter()
        .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-')
        .copied()
        .collect();
    String::from_utf8(slug).ok().filter(|s| !s.is_empty())
}

fn judge_io(e: &io::Error) -> Outcome {
    match e.raw_os_error() {
        Some(libc::ECONNRESET) | Some(libc::EPIPE) => Outcome::Reset,
        _ if e.kind() == io::ErrorKind::UnexpectedEof => Outcome::Closed,
        _ if e.kind() == io::ErrorKind::ConnectionReset => Outcome::Reset,
        _ if e.kind() == io::ErrorKind::BrokenPipe => Outcome::Reset,
        _ => Outcome::Reset,
    }
}

/// A new connection (and TLS session), with a hash of the server's leaf certificate.
async fn open(addr: SocketAddr, cfg: &Config) -> Result<(Conn, Option<String>), Outcome> {
    let tcp = TcpStream::connect(addr).await.map_err(|e| {
        if e.raw_os_error() == Some(libc::ECONNREFUSED) {
            Outcome::Refused
        } else {
            Outcome::ConnectError(errno_name(&e))
        }
    })?;
    let _ = tcp.set_nodelay(true);
    let Some((config, name)) = &cfg.tls else {
        return Ok((Box::pin(tcp), None));
    };
    let tls = tokio_rustls::TlsConnector::from(config.clone())
        .connect(name.clone(), tcp)
        .await
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ECONNRESET) => Outcome::Reset,
            _ if e.kind() == io::ErrorKind::UnexpectedEof => Outcome::Closed,
            _ => Outcome::TlsError,
        })?;
    let cert = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| format!("{:016x}", fnv1a(c.as_ref())));
    Ok((Box::pin(tls), cert))
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}

/// Reads one whole answer: (status, whether the connection must close after it).
async fn read_answer(io: &mut Conn, buf: &mut Vec<u8>) -> Result<(u16, bool), Outcome> {
    buf.clear();
    let mut chunk = [0u8; 8192];
    let mut head: Option<(usize, u16, Framing, bool)> = None;
    loop {
        if let Some((end, status, framing, close)) = head {
            let done = match framing {
                Framing::Length(n) => buf.len() >= end + n,
                Framing::Chunked => chunked_done(&buf[end..]),
                Framing::UntilClose => false,
            };
            if done {
                return Ok((status, close));
            }
        } else if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let h = parse_head(&buf[..end]).ok_or(Outcome::Closed)?;
            head = Some((end + 4, h.0, h.1, h.2));
            continue;
        }
        let n = io.read(&mut chunk).await.map_err(|e| judge_io(&e))?;
        if n == 0 {
            return match head {
                Some((_, status, Framing::UntilClose, _)) => Ok((status, true)),
                _ => Err(Outcome::Closed),
            };
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[derive(Clone, Copy)]
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

fn parse_head(head: &[u8]) -> Option<(u16, Framing, bool)> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split("\r\n");
    let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let (mut framing, mut close) = (None, false);
    for line in lines {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_ascii_lowercase());
        match k.as_str() {
            "content-length" => framing = framing.or(v.parse().ok().map(Framing::Length)),
            "transfer-encoding" if v.contains("chunked") => framing = Some(Framing::Chunked),
            "connection" if v.contains("close") => close = true,
            _ => {}
        }
    }
    let framing = match status {
        204 | 304 | 100..=199 => Framing::Length(0),
        _ => framing.unwrap_or(Framing::UntilClose),
    };
    Some((status, framing, close))
}

/// Whether a chunked body is complete (its last chunk and the trailers' empty line).
fn chunked_done(mut body: &[u8]) -> bool {
    loop {
        let Some(eol) = body.windows(2).position(|w| w == b"\r\n") else {
            return false;
        };
        let size = std::str::from_utf8(&body[..eol])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next()?.trim(), 16).ok());
        let Some(size) = size else { return false };
        body = &body[eol + 2..];
        if size == 0 {
            // Trailers, then an empty line.
            return body.windows(2).any(|w| w == b"\r\n")
                && (body.starts_with(b"\r\n") || body.windows(4).any(|w| w == b"\r\n\r\n"));
        }
        if body.len() < size + 2 {
            return false;
        }
        body = &body[size + 2..];
    }
}

// ---------------------------------------------------------------------------------------------
// The delaying proxy

pub async fn delay(listen: SocketAddr, to: SocketAddr, delay: Duration, start_on: bool) {
    let on = Arc::new(AtomicBool::new(start_on));
    let listener = TcpListener::bind(listen)
        .await
        .unwrap_or_else(|e| panic!("bind {listen}: {e}"));
    eprintln!("delay: {listen} -> {to}, {} ms when on (on: {start_on})", delay.as_millis());
    let mut usr1 = signal(SignalKind::user_defined1()).expect("SIGUSR1");
    let mut usr2 = signal(SignalKind::user_defined2()).expect("SIGUSR2");
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM");
    loop {
        tokio::select! {
            _ = usr1.recv() => { on.store(true, Ordering::Relaxed); eprintln!("delay: on"); }
            _ = usr2.recv() => { on.store(false, Ordering::Relaxed); eprintln!("delay: off"); }
            _ = term.recv() => return,
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                let on = on.clone();
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(to).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    let a = tokio::spawn(pump(cr, sw, delay, on.clone()));
                    let b = tokio::spawn(pump(sr, cw, delay, on));
                    let _ = tokio::join!(a, b);
                });
            }
        }
    }
}

/// Copies `from` to `to`, each chunk written `delay` after it was read while `on`.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
    on: Arc<AtomicBool>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let writer = tokio::spawn(async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due.into()).await;
            if to.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await; // the reader saw EOF: pass the half-close on
    });
    let mut buf = vec![0u8; 16384];
    loop {
        match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let d = if on.load(Ordering::Relaxed) {
                    delay
                } else {
                    Duration::ZERO
                };
                if tx.send((Instant::now() + d, buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}
