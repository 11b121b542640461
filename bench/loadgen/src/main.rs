//! bench/brownout.py's load generator and black hole (issue 38), compiled so that the
//! measuring side costs the 2-core machine little next to the proxy it measures. Every
//! subcommand runs on one thread (tokio's `current_thread` runtime): one core at most.
//!
//! ```text
//! loadgen hole --port P --stats FILE
//! loadgen burst --port P --path /v1/orders/<uid> [--n 6000] [--wait 3] [--batch 50]
//! loadgen burst-h2 --port P --path /v1/orders/<uid> [--conns 60] [--streams 100] [--wait 3]
//! ```
//!
//! `hole`: accepts on 127.0.0.1:P (backlog 65535, capped by net.core.somaxconn), reads what
//! every connection sends and never answers; counts connections accepted, requests read (a
//! head ending in CRLF CRLF, matched across reads), connections the peer closed (kept open on
//! this side) and failed accepts. Writes `{"accepted", "requests", "closed", "accept_errors",
//! "open"}` to FILE (through FILE.tmp and a rename) at start, within ~50 ms of a change, and
//! on SIGTERM, then exits (stdin is not watched: it may be /dev/null).
//!
//! `burst`: n HTTP/1.1 connections, connects issued in batches of `--batch` with the I/O
//! driver polled between batches; each sends one `GET path` as soon as it is connected and
//! reads the answer's head (and its body, to find `region-overloaded`). `--wait` s after the
//! last connect was issued, every client is judged and one JSON object is printed on stdout
//! (one line). The sockets stay open until SIGTERM or EOF on stdin, then the process exits.
//! Times: from just before the request's write to the answer's first bytes, both as this
//! loop saw them (`Instant`) and by the kernel's receive timestamp (SO_TIMESTAMPNS, against
//! the wall clock read just before the write), which leaves out this loop's delay in reading.
//!
//! `burst-h2`: `--conns` h2c connections (HTTP/2 with prior knowledge), each opening
//! `--streams` streams at once as soon as its handshake is done, one GET each; a stream's
//! time runs from its `send_request` to its response head (as this loop saw it). Judged
//! `--wait` s after the last stream was sent; connections kept open as in `burst`.
//!
//! The JSON (both bursts): `outcomes` (clients or streams not answered, by kind: `connecting`,
//! `waiting`, `closed, no answer`, `reset`, `connect failed (E…)`, …), `statuses` (answered,
//! by status, `503 region-overloaded` when the body names it), `latency_ms` (count, min, p50, p90,
//! p99, max, nearest rank) for `503`, `503_seen`, `503_fast`, `503_slow`, `other` and by
//! status, and `issue_s`, `clients`, `answered`, `kernel_503`, `slow_connects`, `cpu_s`.
//!
//! ```text
//! loadgen steady --port P --path /a[,/b,...] [--conns 8] [--rate 200] [--duration 30]
//!                [--timeout-ms 5000] [--per-conn 0] [--tls-ca FILE --sni NAME]
//! loadgen delay --port P [--listen-host 127.0.0.1] --to HOST:PORT --delay-ms D
//! loadgen closed --port P --path PATH --tls-ca FILE [--proto h2|h3] [--conns 4]
//!                [--streams 16] [--duration 10] [--sni localhost]
//! ```
//!
//! `closed` (bench/h3.sh): a closed loop over HTTPS, HTTP/2 or HTTP/3 (`rate.rs`).
//!
//! `steady` (bench/chaos.py): `--conns` keep-alive HTTP/1.1 connections (HTTPS with
//! `--tls-ca`, verifying the server as `--sni`), each sending `GET` after `GET` for
//! `--duration` s, paced so that all together send `--rate` requests/s (a connection that
//! falls behind skips the slots it missed rather than bursting). Connection c sends path
//! c mod (number of paths), so a stalled path holds up only its own connections.
//! A connection is replaced after an answer with `Connection: close`, after any failure, and
//! after `--per-conn` requests (0: never), so `--per-conn` sets the share of new handshakes.
//! Every request is judged: `ok` (2xx), another status, `refused` (connect ECONNREFUSED),
//! `connect_error` (another connect error), `tls_error` (handshake failed), `reset`
//! (ECONNRESET/EPIPE before the whole answer), `closed` (EOF before the whole answer) or
//! `timeout` (no whole answer `--timeout-ms` after the request was due, connect included).
//! A status other than 2xx is counted with the router's problem slug when the body has one
//! (`status 503 region-unavailable`). With `--tls-ca`, sessions are never resumed: every
//! handshake is a full one and sees the certificate served at that moment.
//! Prints one JSON line: `start_unix`, `requests`, `ok`, `failures` (by kind, `5xx`/`4xx`
//! statuses as `status NNN`), `latency_ms` (answered requests, write to last byte),
//! `by_path` (the same per path), `timeline` (`[bucket, path, ok, failed]` per 100 ms of
//! send time with something in it), `failed` (the first 5000 failures: `[t_s, path, kind]`),
//! `certs` (handshakes by a hash of the leaf certificate), `connects`, `cpu_s`.
//!
//! `delay`: a TCP proxy on LISTEN-HOST:P to `--to`; each chunk read either way is written on
//! `--delay-ms` later (order kept). SIGUSR1 turns the delay on, SIGUSR2 off (it starts on
//! only with `--start-on 1`); SIGTERM ends it. bench/chaos.py's latency between edges.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::{TcpSocket, TcpStream};
use tokio::signal::unix::{signal, SignalKind};

mod rate;
mod steady;

/// Linux's SO_TIMESTAMPNS (SO_TIMESTAMPNS_OLD on x86-64 and arm64), also its SCM type.
const SO_TIMESTAMPNS: libc::c_int = 35;
/// A connect that took longer than this had its SYN (or the answer) dropped and sent again.
const SLOW_CONNECT: Duration = Duration::from_millis(500);

fn main() {
    let mut args = std::env::args().skip(1);
    let cmd = args.next().unwrap_or_default();
    let mut opts = BTreeMap::new();
    while let Some(k) = args.next() {
        let Some(key) = k.strip_prefix("--") else {
            usage(&format!("unexpected {k}"))
        };
        let v = args
            .next()
            .unwrap_or_else(|| usage(&format!("--{key} needs a value")));
        opts.insert(key.to_string(), v);
    }
    let num = |k: &str, d: f64| -> f64 {
        opts.get(k).map_or(d, |v| {
            v.parse().unwrap_or_else(|_| usage(&format!("--{k}: {v}")))
        })
    };
    let port = num("port", 0.0) as u16;
    if port == 0 {
        usage("--port is required");
    }
    let text = |k: &str, d: &str| opts.get(k).cloned().unwrap_or_else(|| d.to_string());
    let path = || {
        opts.get("path")
            .cloned()
            .unwrap_or_else(|| usage("--path is required"))
    };
    raise_nofile();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    match cmd.as_str() {
        "hole" => {
            let stats = opts
                .get("stats")
                .cloned()
                .unwrap_or_else(|| usage("--stats is required"));
            rt.block_on(hole(port, stats));
        }
        "burst" => {
            let (n, wait, batch) = (
                num("n", 6000.0) as usize,
                num("wait", 3.0),
                num("batch", 50.0) as usize,
            );
            rt.block_on(burst(port, path(), n, wait, batch.max(1)));
        }
        "burst-h2" => {
            let (conns, streams, wait) = (
                num("conns", 60.0) as usize,
                num("streams", 100.0) as usize,
                num("wait", 3.0),
            );
            rt.block_on(burst_h2(port, path(), conns, streams, wait));
        }
        "steady" => {
            let paths: Vec<String> = path().split(',').map(str::to_string).collect();
            let tls = opts
                .get("tls-ca")
                .map(|ca| steady::tls_config(ca, &text("sni", "localhost")));
            let cfg = steady::Config {
                port,
                paths,
                conns: (num("conns", 8.0) as usize).max(1),
                rate: num("rate", 200.0).max(1.0),
                duration: num("duration", 30.0),
                timeout: Duration::from_secs_f64(num("timeout-ms", 5000.0) / 1000.0),
                per_conn: num("per-conn", 0.0) as u64,
                tls,
            };
            rt.block_on(steady::run(cfg));
        }
        "closed" => {
            let cfg = rate::Config {
                port,
                path: path(),
                proto: text("proto", "h2"),
                conns: (num("conns", 4.0) as usize).max(1),
                streams: (num("streams", 16.0) as usize).max(1),
                duration: num("duration", 10.0),
                ca: opts
                    .get("tls-ca")
                    .cloned()
                    .unwrap_or_else(|| usage("--tls-ca is required")),
                sni: text("sni", "localhost"),
            };
            tokio::task::LocalSet::new().block_on(&rt, rate::run(cfg));
        }
        "delay" => {
            let listen: SocketAddr = format!("{}:{port}", text("listen-host", "127.0.0.1"))
                .parse()
                .unwrap_or_else(|_| usage("--listen-host: not an IP address"));
            let to: SocketAddr = opts
                .get("to")
                .and_then(|t| t.parse().ok())
                .unwrap_or_else(|| usage("--to HOST:PORT is required"));
            let delay = Duration::from_millis(num("delay-ms", 100.0) as u64);
            rt.block_on(steady::delay(
                listen,
                to,
                delay,
                num("start-on", 0.0) != 0.0,
            ));
        }
        _ => usage(&format!("unknown subcommand {cmd:?}")),
    }
    // Every socket (the burst's clients, the hole's connections) closes with the process.
    std::process::exit(0);
}

fn usage(why: &str) -> ! {
    eprintln!("loadgen: {why}\nusage: loadgen hole --port P --stats FILE\n       loadgen burst --port P --path PATH [--n 6000] [--wait 3] [--batch 50]\n       loadgen burst-h2 --port P --path PATH [--conns 60] [--streams 100] [--wait 3]\n       loadgen steady --port P --path PATH[,PATH...] [--conns 8] [--rate 200] [--duration 30] [--timeout-ms 5000] [--per-conn 0] [--tls-ca FILE --sni NAME]\n       loadgen closed --port P --path PATH --tls-ca FILE [--proto h2|h3] [--conns 4] [--streams 16] [--duration 10] [--sni localhost]\n       loadgen delay --port P [--listen-host IP] --to IP:PORT [--delay-ms 100] [--start-on 0]");
    std::process::exit(2);
}

/// RLIMIT_NOFILE's soft limit raised to the hard one.
fn raise_nofile() {
    unsafe {
        let mut r: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) == 0 && r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &r);
        }
    }
}

fn cpu_s() -> f64 {
    unsafe {
        let mut u: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut u);
        let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        tv(u.ru_utime) + tv(u.ru_stime)
    }
}

fn errno_name(e: &io::Error) -> String {
    let name = match e.raw_os_error() {
        Some(libc::ECONNREFUSED) => "ECONNREFUSED",
        Some(libc::ECONNRESET) => "ECONNRESET",
        Some(libc::ETIMEDOUT) => "ETIMEDOUT",
        Some(libc::EADDRNOTAVAIL) => "EADDRNOTAVAIL",
        Some(libc::EMFILE) => "EMFILE",
        Some(libc::ENFILE) => "ENFILE",
        Some(libc::EAGAIN) => "EAGAIN",
        Some(libc::EPIPE) => "EPIPE",
        Some(libc::ENOBUFS) => "ENOBUFS",
        Some(n) => return format!("errno {n}"),
        None => return format!("{:?}", e.kind()),
    };
    name.to_string()
}

/// Waits for SIGTERM or EOF on stdin (the script that started us is gone, or done).
async fn until_told(mut term: tokio::signal::unix::Signal) {
    let stdin = tokio::task::spawn_blocking(|| {
        let mut sink = [0u8; 256];
        let mut input = io::stdin();
        while matches!(input.read(&mut sink), Ok(n) if n > 0) {}
    });
    tokio::select! {
        _ = term.recv() => {}
        _ = stdin => {}
    }
}

// ---------------------------------------------------------------------------------------------
// The black hole

#[derive(Default)]
struct Counts {
    accepted: AtomicU64,
    requests: AtomicU64,
    closed: AtomicU64,
    accept_errors: AtomicU64,
}

impl Counts {
    fn snapshot(&self) -> [u64; 4] {
        [
            self.accepted.load(Ordering::Relaxed),
            self.requests.load(Ordering::Relaxed),
            self.closed.load(Ordering::Relaxed),
            self.accept_errors.load(Ordering::Relaxed),
        ]
    }
}

fn write_stats(path: &str, s: [u64; 4]) {
    let v = json!({"accepted": s[0], "requests": s[1], "closed": s[2], "accept_errors": s[3],
                   "open": s[0] - s[2]});
    let tmp = format!("{path}.tmp");
    if std::fs::write(&tmp, v.to_string()).is_ok() {
        let _ = std::fs::rename(&tmp, path);
    }
}

async fn hole(port: u16, stats: String) {
    let term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let socket = TcpSocket::new_v4().expect("socket");
    socket.set_reuseaddr(true).expect("SO_REUSEADDR");
    socket
        .bind(SocketAddr::from(([127, 0, 0, 1], port)))
        .unwrap_or_else(|e| panic!("bind 127.0.0.1:{port}: {e}"));
    let listener = socket.listen(65535).expect("listen");
    let counts = Arc::new(Counts::default());
    let mut written = counts.snapshot();
    write_stats(&stats, written);
    {
        let (counts, stats) = (counts.clone(), stats.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            loop {
                tick.tick().await;
                let now = counts.snapshot();
                if now != written {
                    write_stats(&stats, now);
                    written = now;
                }
            }
        });
    }
    let accept = async {
        loop {
            match listener.accept().await {
                Ok((conn, _)) => {
                    counts.accepted.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(swallow(conn, counts.clone()));
                }
                Err(_) => {
                    // EMFILE and the like: count it and back off rather than spin.
                    counts.accept_errors.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    };
    let mut term = term;
    tokio::select! {
        _ = term.recv() => {}
        _ = accept => {}
    }
    write_stats(&stats, counts.snapshot());
}

/// Reads a connection to its end, counting the heads (CRLF CRLF) in it; never answers, and
/// keeps the socket open after the peer closed it.
async fn swallow(conn: TcpStream, counts: Arc<Counts>) {
    const END: &[u8; 4] = b"\r\n\r\n";
    let mut buf = vec![0u8; 4096];
    let mut matched = 0usize; // bytes of END matched so far, across reads
    loop {
        if conn.readable().await.is_err() {
            break;
        }
        let n = match conn.try_read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(_) => break, // reset by the proxy
        };
        let mut heads = 0;
        for &b in &buf[..n] {
            if b == END[matched] {
                matched += 1;
                if matched == END.len() {
                    heads += 1;
                    matched = 0;
                }
            } else {
                matched = usize::from(b == b'\r');
            }
        }
        if heads > 0 {
            counts.requests.fetch_add(heads, Ordering::Relaxed);
        }
    }
    counts.closed.fetch_add(1, Ordering::Relaxed);
    drop(buf);
    std::future::pending::<()>().await;
    drop(conn);
}

// ---------------------------------------------------------------------------------------------
// The bursts' records and what is printed of them

#[derive(Clone)]
struct Rec {
    issued: Option<Instant>,
    sent: Option<Instant>,
    outcome: String,
    status: Option<u16>,
    overloaded: bool,
    /// send → first bytes, as this loop saw it
    seen: Option<Duration>,
    /// send → the kernel's receive timestamp of the first bytes (HTTP/1.1 only)
    kernel: Option<f64>,
}

impl Rec {
    fn new() -> Rec {
        Rec {
            issued: None,
            sent: None,
            outcome: "connecting".into(),
            status: None,
            overloaded: false,
            seen: None,
            kernel: None,
        }
    }
    /// The time reported: the kernel's when there is one.
    fn answer_ms(&self) -> Option<f64> {
        self.kernel
            .map(|s| s * 1000.0)
            .or(self.seen.map(|d| d.as_secs_f64() * 1000.0))
    }
    fn slow(&self) -> bool {
        matches!((self.issued, self.sent), (Some(i), Some(s)) if s - i > SLOW_CONNECT)
    }
}

type Recs = Arc<Mutex<Vec<Rec>>>;

fn update(recs: &Recs, i: usize, f: impl FnOnce(&mut Rec)) {
    f(&mut recs.lock().unwrap()[i]);
}

fn summary(values: &mut [f64]) -> Value {
    if values.is_empty() {
        return json!({"count": 0});
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    let rank = |q: f64| values[((q / 100.0 * n as f64).ceil() as usize).clamp(1, n) - 1];
    let r = |x: f64| (x * 1000.0).round() / 1000.0;
    json!({"count": n, "min": r(values[0]), "p50": r(rank(50.0)), "p90": r(rank(90.0)),
           "p99": r(rank(99.0)), "max": r(values[n - 1])})
}

fn report(mode: &str, recs: &[Rec], issue_s: f64, extra: Value) -> Value {
    let mut outcomes = BTreeMap::<String, u64>::new();
    let mut statuses = BTreeMap::<String, u64>::new();
    let mut by_status = BTreeMap::<String, Vec<f64>>::new();
    let (mut l503, mut seen503, mut fast503, mut slow503, mut other) =
        (vec![], vec![], vec![], vec![], vec![]);
    let (mut kernel503, mut answered) = (0, 0);
    for r in recs {
        let Some(status) = r.status.filter(|_| r.outcome == "answered") else {
            *outcomes.entry(r.outcome.clone()).or_default() += 1;
            continue;
        };
        answered += 1;
        let key = if r.overloaded {
            format!("{status} region-overloaded")
        } else {
            status.to_string()
        };
        *statuses.entry(key).or_default() += 1;
        let ms = r.answer_ms().unwrap_or(f64::NAN);
        by_status.entry(status.to_string()).or_default().push(ms);
        if status == 503 {
            l503.push(ms);
            seen503.extend(r.seen.map(|d| d.as_secs_f64() * 1000.0));
            kernel503 += usize::from(r.kernel.is_some());
            if r.slow() {
                slow503.push(ms)
            } else {
                fast503.push(ms)
            }
        } else {
            other.push(ms);
        }
    }
    let mut latency = serde_json::Map::new();
    latency.insert("503".into(), summary(&mut l503));
    latency.insert("503_seen".into(), summary(&mut seen503));
    latency.insert("503_fast".into(), summary(&mut fast503));
    latency.insert("503_slow".into(), summary(&mut slow503));
    latency.insert("other".into(), summary(&mut other));
    for (k, mut v) in by_status {
        latency.insert(k, summary(&mut v));
    }
    let mut out = json!({
        "mode": mode, "clients": recs.len(), "answered": answered, "issue_s": issue_s,
        "outcomes": outcomes, "statuses": statuses, "latency_ms": latency,
        "kernel_503": kernel503, "slow_connects": recs.iter().filter(|r| r.slow()).count(),
        "cpu_s": cpu_s(),
    });
    if let (Value::Object(o), Value::Object(e)) = (&mut out, extra) {
        o.extend(e);
    }
    out
}

fn print_line(v: &Value) {
    let mut out = io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

// ---------------------------------------------------------------------------------------------
// HTTP/1.1

async fn burst(port: u16, path: String, n: usize, wait: f64, batch: usize) {
    let term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let request: Arc<[u8]> = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .into_bytes()
        .into();
    let recs: Recs = Arc::new(Mutex::new(vec![Rec::new(); n]));
    let t0 = Instant::now();
    for i in 0..n {
        tokio::spawn(h1_client(i, addr, request.clone(), recs.clone()));
        if i % batch == batch - 1 {
            // The batch's connects are issued, then the I/O driver is polled (yield_now
            // defers this task until after it), then the next batch.
            tokio::task::yield_now().await;
        }
    }
    tokio::task::yield_now().await; // the last batch's connects
    let issued = Instant::now();
    tokio::time::sleep_until((issued + Duration::from_secs_f64(wait)).into()).await;
    let snapshot = recs.lock().unwrap().clone();
    print_line(&report(
        "h1",
        &snapshot,
        (issued - t0).as_secs_f64(),
        json!({"n": n}),
    ));
    until_told(term).await;
}

async fn h1_client(i: usize, addr: SocketAddr, request: Arc<[u8]>, recs: Recs) {
    update(&recs, i, |r| r.issued = Some(Instant::now()));
    let mut conn = match TcpStream::connect(addr).await {
        Ok(c) => c,
        Err(e) => {
            return update(&recs, i, |r| {
                r.outcome = format!("connect failed ({})", errno_name(&e))
            })
        }
    };
    let fd = conn.as_raw_fd();
    unsafe {
        let on: libc::c_int = 1;
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            SO_TIMESTAMPNS,
            &on as *const _ as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    let wall = SystemTime::now();
    let sent = Instant::now();
    if let Err(e) = conn.write_all(&request).await {
        return update(&recs, i, |r| {
            r.outcome = format!("send failed ({})", errno_name(&e))
        });
    }
    update(&recs, i, |r| {
        r.sent = Some(sent);
        r.outcome = "waiting".into();
    });
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        if conn.readable().await.is_err() {
            break;
        }
        let (n, stamp) = match conn.try_io(Interest::READABLE, || recv_stamped(fd, &mut chunk)) {
            Ok(x) => x,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => {
                if buf.is_empty() {
                    let what = if e.raw_os_error() == Some(libc::ECONNRESET) {
                        "reset".into()
                    } else {
                        format!("read failed ({})", errno_name(&e))
                    };
                    update(&recs, i, |r| r.outcome = what);
                }
                break;
            }
        };
        if n == 0 {
            if buf.is_empty() {
                update(&recs, i, |r| r.outcome = "closed, no answer".into());
            }
            break;
        }
        if buf.is_empty() {
            let seen = sent.elapsed();
            let kernel = stamp
                .and_then(|t| t.duration_since(wall).ok())
                .map(|d| d.as_secs_f64());
            update(&recs, i, |r| {
                r.seen = Some(seen);
                r.kernel = kernel;
            });
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(eol) = buf.windows(2).position(|w| w == b"\r\n") else {
            if buf.len() > 64 {
                update(&recs, i, |r| r.outcome = "garbage".into());
                break;
            }
            continue;
        };
        let status = std::str::from_utf8(&buf[..eol])
            .ok()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|s| s.parse().ok());
        let overloaded = buf.windows(17).any(|w| w == b"region-overloaded");
        update(&recs, i, |r| {
            r.outcome = "answered".into();
            r.status = Some(status.unwrap_or(0));
            r.overloaded = overloaded;
        });
        if overloaded || complete(&buf) || buf.len() > 16384 {
            break;
        }
    }
    drop(buf);
    // Kept open, unread, until the process ends.
    std::future::pending::<()>().await;
    drop(conn);
}

/// Whether `buf` holds a whole answer: its head and Content-Length bytes of body.
fn complete(buf: &[u8]) -> bool {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    let length = head.lines().find_map(|l| {
        l.strip_prefix("content-length:")
            .and_then(|v| v.trim().parse::<usize>().ok())
    });
    match length {
        Some(len) => buf.len() >= end + 4 + len,
        None => buf.ends_with(b"0\r\n\r\n"),
    }
}

/// recvmsg with the kernel's receive timestamp (SO_TIMESTAMPNS) when it gave one.
fn recv_stamped(fd: libc::c_int, buf: &mut [u8]) -> io::Result<(usize, Option<SystemTime>)> {
    unsafe {
        let mut iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        let mut control = [0u64; 16];
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        let n = libc::recvmsg(fd, &mut msg, libc::MSG_DONTWAIT);
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut stamp = None;
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == SO_TIMESTAMPNS {
                let ts: libc::timespec = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                stamp = Some(UNIX_EPOCH + Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
        Ok((n as usize, stamp))
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP/2 with prior knowledge

async fn burst_h2(port: u16, path: String, conns: usize, streams: usize, wait: f64) {
    let term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let uri: http::Uri = format!("http://127.0.0.1:{port}{path}")
        .parse()
        .expect("path");
    let total = conns * streams;
    let recs: Recs = Arc::new(Mutex::new(vec![Rec::new(); total]));
    let settled = Arc::new(AtomicUsize::new(0)); // streams sent, or failed before
    let lost = Arc::new(AtomicUsize::new(0)); // connections that ended before the judging
    let t0 = Instant::now();
    for c in 0..conns {
        tokio::spawn(h2_conn(
            c,
            streams,
            addr,
            uri.clone(),
            recs.clone(),
            settled.clone(),
            lost.clone(),
        ));
    }
    let give_up = t0 + Duration::from_secs(10);
    while settled.load(Ordering::Relaxed) < total && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let issued = Instant::now();
    tokio::time::sleep_until((issued + Duration::from_secs_f64(wait)).into()).await;
    let snapshot = recs.lock().unwrap().clone();
    let extra = json!({"conns": conns, "streams": streams, "n": total,
                       "conns_ended": lost.load(Ordering::Relaxed)});
    print_line(&report("h2", &snapshot, (issued - t0).as_secs_f64(), extra));
    until_told(term).await;
}

async fn h2_conn(
    c: usize,
    streams: usize,
    addr: SocketAddr,
    uri: http::Uri,
    recs: Recs,
    settled: Arc<AtomicUsize>,
    lost: Arc<AtomicUsize>,
) {
    let ids = c * streams..(c + 1) * streams;
    let issued = Instant::now();
    let fail = |what: String| {
        let mut r = recs.lock().unwrap();
        for i in ids.clone() {
            r[i].issued = Some(issued);
            r[i].outcome = what.clone();
        }
        settled.fetch_add(streams, Ordering::Relaxed);
    };
    let tcp = match TcpStream::connect(addr).await {
        Ok(t) => t,
        Err(e) => return fail(format!("connect failed ({})", errno_name(&e))),
    };
    let _ = tcp.set_nodelay(true);
    let (sender, conn) = match hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .handshake::<_, Empty<Bytes>>(TokioIo::new(tcp))
        .await
    {
        Ok(x) => x,
        Err(e) => return fail(format!("handshake failed ({e})")),
    };
    tokio::spawn(async move {
        let _ = conn.await;
        lost.fetch_add(1, Ordering::Relaxed);
    });
    for i in ids {
        let mut sender = sender.clone();
        let (uri, recs, settled) = (uri.clone(), recs.clone(), settled.clone());
        tokio::spawn(async move {
            let req = http::Request::get(uri)
                .body(Empty::<Bytes>::new())
                .expect("request");
            let sent = Instant::now();
            update(&recs, i, |r| {
                r.issued = Some(issued);
                r.sent = Some(sent);
                r.outcome = "waiting".into();
            });
            settled.fetch_add(1, Ordering::Relaxed);
            match sender.send_request(req).await {
                Ok(resp) => {
                    let seen = sent.elapsed();
                    let status = resp.status().as_u16();
                    update(&recs, i, |r| {
                        r.seen = Some(seen);
                        r.status = Some(status);
                        r.outcome = "answered".into();
                    });
                    let body =
                        tokio::time::timeout(Duration::from_secs(2), resp.into_body().collect())
                            .await;
                    if let Ok(Ok(body)) = body {
                        let body = body.to_bytes();
                        let overloaded = body.windows(17).any(|w| w == b"region-overloaded");
                        update(&recs, i, |r| r.overloaded = overloaded);
                    }
                }
                Err(e) => {
                    let what = if e.is_closed() || e.is_canceled() {
                        "connection closed".to_string()
                    } else {
                        let text = e.to_string();
                        let src = std::error::Error::source(&e)
                            .map(|s| s.to_string())
                            .unwrap_or_default();
                        format!("reset ({})", if src.is_empty() { text } else { src })
                    };
                    update(&recs, i, |r| r.outcome = what);
                }
            }
        });
    }
    // The connection stays open while this sender lives: until the process ends.
    std::future::pending::<()>().await;
    drop(sender);
}
