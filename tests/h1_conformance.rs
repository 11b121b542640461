//! A conformance suite of the router's HTTP/1.1 codec over real sockets: raw request bytes
//! go to a router in front of a recording upstream, and what the client got back and what
//! reached the upstream are checked against what a correct router does with them.
//!
//! The corpus is written here from public test vectors (llhttp's request tests, the payloads
//! HTTP Garden lists for the bugs it found), the request-smuggling classics, and odd but
//! valid heads; a proptest adds requests generated from a grammar of valid heads and bodies.
//! Every case says what a correct router does with it (how many requests reach the
//! upstream, what the client is answered); where implementations differ (hyper, nginx,
//! llhttp), it also says which reading the router takes, and that is asserted too. The
//! other way, the upstream answers odd, valid and broken bytes (llhttp's response tests
//! among them), and what the client gets is checked the same way.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{iuid_for, lettered_table, orders_config, url, Router};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

// ---- the recording upstream ------------------------------------------------------------

/// What the recording upstream answers to every request (no body to a `HEAD`).
const ANSWER: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Up: 1\r\n\r\nok";

/// What an upstream connection delivered.
#[derive(Debug, Clone)]
enum Seen {
    /// A complete request: its head, then its body by its framing.
    Request(Message),
    /// Bytes that never became a complete request before the router closed the connection.
    Partial(Vec<u8>),
    /// Bytes that are no valid request (the upstream then closed the connection).
    Unreadable(&'static str, Vec<u8>),
}

/// A request as the upstream read it.
#[derive(Debug, Clone)]
struct Message {
    /// The request line, without its CRLF.
    line: Vec<u8>,
    /// The field lines in order: name as sent, value without surrounding whitespace.
    fields: Vec<(Vec<u8>, Vec<u8>)>,
    /// The body, de-chunked.
    body: Vec<u8>,
    /// Each chunk-size line's extensions (what follows the size), when chunked.
    extensions: Vec<Vec<u8>>,
    /// The trailer fields, when chunked.
    trailers: Vec<(Vec<u8>, Vec<u8>)>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|&b| b != b' ' && b != b'\t')
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// A field line `name: value`, strictly (RFC 9112 §5): a token name right before the colon.
fn field_line(line: &[u8]) -> Result<(Vec<u8>, Vec<u8>), &'static str> {
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or("a field line without a colon")?;
    let name = &line[..colon];
    let tchar = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    if name.is_empty() || !name.iter().all(tchar) {
        return Err("a field name that is no token");
    }
    let value = trim(&line[colon + 1..]);
    if value.iter().any(|&b| b == 0 || b == b'\r' || b == b'\n') {
        return Err("NUL, CR or LF in a field value");
    }
    Ok((name.to_vec(), value.to_vec()))
}

/// Reads a chunked body starting at `pos`: its data, extensions, trailers and end.
#[allow(clippy::type_complexity)]
fn read_chunked(
    buf: &[u8],
    mut pos: usize,
) -> Result<Option<(Vec<u8>, Vec<Vec<u8>>, Vec<(Vec<u8>, Vec<u8>)>, usize)>, &'static str> {
    let (mut data, mut extensions, mut trailers) = (Vec::new(), Vec::new(), Vec::new());
    loop {
        let Some(eol) = find(&buf[pos..], b"\r\n") else {
            return Ok(None);
        };
        let line = &buf[pos..pos + eol];
        if line.contains(&b'\n') || line.contains(&b'\r') {
            return Err("a bare CR or LF in a chunk-size line");
        }
        let split = line.iter().position(|&b| b == b';').unwrap_or(line.len());
        let size = trim(&line[..split]);
        // A strict parser's rule (llhttp refuses what is outside it), so that a forwarded
        // extension the next hop would refuse fails the case (issue 37).
        let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
        if !common::chunk_ext_ok(&line[digits..]) {
            return Err("a chunk extension outside RFC 9112 §7.1.1's grammar");
        }
        if size.is_empty() || size.len() > 16 || !size.iter().all(u8::is_ascii_hexdigit) {
            return Err("a chunk size that is not 1-16 hex digits");
        }
        let n = usize::from_str_radix(std::str::from_utf8(size).expect("hex"), 16)
            .map_err(|_| "a chunk size too large")?;
        extensions.push(line[split..].to_vec());
        pos += eol + 2;
        if n == 0 {
            loop {
                let Some(eol) = find(&buf[pos..], b"\r\n") else {
                    return Ok(None);
                };
                let line = &buf[pos..pos + eol];
                pos += eol + 2;
                if line.is_empty() {
                    return Ok(Some((data, extensions, trailers, pos)));
                }
                if line.contains(&b'\n') || line.contains(&b'\r') {
                    return Err("a bare CR or LF in a trailer line");
                }
                let (name, value) = field_line(line)?;
                // RFC 9110 §6.5.1: framing, routing and forwarding fields are never trailers.
                let forbidden = [
                    &b"content-length"[..],
                    b"transfer-encoding",
                    b"host",
                    b"x-forwarded-for",
                    b"forwarded",
                    b"via",
                    b"x-request-id",
                ];
                if forbidden.iter().any(|f| name.eq_ignore_ascii_case(f)) {
                    return Err("a trailer field RFC 9110 §6.5.1 forbids");
                }
                trailers.push((name, value));
            }
        }
        if buf.len() < pos + n + 2 {
            return Ok(None);
        }
        data.extend_from_slice(&buf[pos..pos + n]);
        if &buf[pos + n..pos + n + 2] != b"\r\n" {
            return Err("chunk data not followed by CRLF");
        }
        pos += n + 2;
    }
}

/// Reads one request from the start of `buf`: `Ok(None)` while it is incomplete.
fn read_message(buf: &[u8]) -> Result<Option<(Message, usize)>, &'static str> {
    let Some(end) = find(buf, b"\r\n\r\n") else {
        return Ok(None);
    };
    // The head with its last line's CRLF: every line ends with one.
    let head = &buf[..end + 2];
    let mut lines = Vec::new();
    for l in head.split_inclusive(|&b| b == b'\n') {
        let l = l.strip_suffix(b"\r\n").ok_or("a line not ended by CRLF")?;
        if l.contains(&b'\r') {
            return Err("a bare CR in the head");
        }
        lines.push(l);
    }
    let line = lines[0];
    if line.split(|&b| b == b' ').count() != 3 {
        return Err("a request line that is not method SP target SP version");
    }
    let mut fields = Vec::new();
    for l in &lines[1..] {
        fields.push(field_line(l)?);
    }
    let named = |name: &[u8]| {
        fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .collect::<Vec<_>>()
    };
    let codings: Vec<Vec<u8>> = named(b"transfer-encoding")
        .iter()
        .flat_map(|v| v.split(|&b| b == b',').map(|c| trim(c).to_vec()))
        .filter(|c| !c.is_empty())
        .collect();
    let lengths = named(b"content-length");
    let start = end + 4;
    let mut message = Message {
        line: line.to_vec(),
        fields,
        body: Vec::new(),
        extensions: Vec::new(),
        trailers: Vec::new(),
    };
    if !codings.is_empty() {
        if !lengths.is_empty() {
            return Err("both Transfer-Encoding and Content-Length");
        }
        if codings.len() != 1 || !codings[0].eq_ignore_ascii_case(b"chunked") {
            return Err("a transfer coding other than chunked once");
        }
        return Ok(
            read_chunked(buf, start)?.map(|(body, extensions, trailers, end)| {
                message.body = body;
                message.extensions = extensions;
                message.trailers = trailers;
                (message, end)
            }),
        );
    }
    let mut length = None;
    for value in &lengths {
        let text = std::str::from_utf8(value).map_err(|_| "Content-Length not ASCII")?;
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err("Content-Length not 1*DIGIT");
        }
        let n: usize = text.parse().map_err(|_| "Content-Length too large")?;
        if length.is_some_and(|l| l != n) {
            return Err("two different Content-Length values");
        }
        length = Some(n);
    }
    let n = length.unwrap_or(0);
    if buf.len() < start + n {
        return Ok(None);
    }
    message.body = buf[start..start + n].to_vec();
    Ok(Some((message, start + n)))
}

/// What an upstream has received: whole requests and what its connections closed on, in
/// order, and the bytes of requests still coming, per connection.
#[derive(Debug, Default)]
struct Log {
    seen: Vec<Seen>,
    pending: std::collections::BTreeMap<u64, Vec<u8>>,
    /// What to answer instead of [`ANSWER`], the connection then closed (the response
    /// tests).
    script: Option<Vec<u8>>,
}

impl Log {
    /// Everything received, a request still coming as `Partial`.
    fn all(&self) -> Vec<Seen> {
        let pending = self.pending.values().filter(|b| !b.is_empty());
        let pending = pending.map(|b| Seen::Partial(b.clone()));
        self.seen.iter().cloned().chain(pending).collect()
    }
}

type Shared = Arc<Mutex<Log>>;

/// Serves one upstream connection: every request read is recorded and answered
/// [`ANSWER`], on the same connection (keep-alive); or the script, then closed.
async fn record(mut stream: tokio::net::TcpStream, log: Shared, id: u64) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 << 10];
    loop {
        match read_message(&buf) {
            Ok(Some((message, used))) => {
                buf.drain(..used);
                let head = message.line.starts_with(b"HEAD ");
                let script = {
                    let mut log = log.lock().expect("log");
                    log.seen.push(Seen::Request(message));
                    log.pending.insert(id, buf.clone());
                    log.script.clone()
                };
                if let Some(script) = script {
                    let _ = stream.write_all(&script).await;
                    let _ = stream.shutdown().await;
                    log.lock().expect("log").pending.remove(&id);
                    return;
                }
                let answer = if head {
                    &ANSWER[..ANSWER.len() - 2]
                } else {
                    ANSWER
                };
                if stream.write_all(answer).await.is_err() {
                    return;
                }
                continue;
            }
            Ok(None) => {}
            Err(why) => {
                let mut log = log.lock().expect("log");
                log.pending.remove(&id);
                log.seen.push(Seen::Unreadable(why, buf));
                return;
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                let mut log = log.lock().expect("log");
                log.pending.remove(&id);
                if !buf.is_empty() {
                    log.seen.push(Seen::Partial(buf));
                }
                return;
            }
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                log.lock().expect("log").pending.insert(id, buf.clone());
            }
        }
    }
}

/// A recording upstream on a free loopback port: its address and its log.
async fn recording_upstream() -> (SocketAddr, Shared) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let log: Shared = Arc::default();
    let shared = log.clone();
    tokio::spawn(async move {
        let mut id = 0;
        while let Ok((stream, _)) = listener.accept().await {
            id += 1;
            tokio::spawn(record(stream, shared.clone(), id));
        }
    });
    (addr, log)
}

// ---- the router -------------------------------------------------------------------------

/// The router, the upstream behind it, and the runtime they run on (the test's client side
/// is plain blocking sockets).
struct World {
    router: Router,
    upstream: SocketAddr,
    log: Shared,
    // Dropped last: the router shuts down on it.
    rt: tokio::runtime::Runtime,
}

impl World {
    fn start() -> World {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let (router, upstream, log) = rt.block_on(async {
            let (upstream, log) = recording_upstream().await;
            // One worker: the router shares two cores with the test; the answers' cases
            // fail the upstream on purpose, and it must not be ejected for that.
            let config = orders_config()
                .extra("workers: 1\nhealth: { eject_after: 1000000 }")
                .yaml();
            let table = lettered_table("conformance", &[&[url(upstream)]]);
            (Router::start(&config, &table).await, upstream, log)
        });
        World {
            router,
            upstream,
            log,
            rt,
        }
    }

    /// Sends `bytes` to the router on a new connection; what the client and the upstream
    /// saw. `heads`: which of the requests are `HEAD` (their answers have no body).
    fn run(&self, bytes: &[u8], heads: &[bool]) -> Observed {
        let _runtime = self.rt.enter();
        {
            let mut log = self.log.lock().expect("log");
            log.seen.clear();
            log.pending.values_mut().for_each(Vec::clear);
        }
        let observed = self.observe(bytes, exchange(self.router.addr, bytes), heads);
        // What the router sent the upstream is recorded when the upstream reads it, which
        // may be after the client had its answer when the router answered itself (a body
        // broken midway); unless every answer came from the upstream (then everything it
        // got was recorded before it answered).
        let settled = observed.answers.iter().all(|a| a.from_upstream)
            && observed.answers.len() == observed.upstream.len()
            && !observed.answers.is_empty();
        if settled {
            return observed;
        }
        // Read again until nothing changed for 100 ms (at most a second).
        let mut observed = observed;
        let mut quiet = 0;
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(50));
            let again = self.again(bytes, observed.clone());
            let same = again.upstream == observed.upstream;
            observed = again;
            quiet = if same { quiet + 1 } else { 0 };
            if quiet == 2 {
                break;
            }
        }
        observed
    }

    fn observe(&self, sent: &[u8], (answer, closed): (Vec<u8>, bool), heads: &[bool]) -> Observed {
        let (answers, rest) = read_answers(&answer, heads);
        let observed = Observed {
            answers,
            unread: String::from_utf8_lossy(rest).into_owned(),
            closed,
            upstream: Vec::new(),
            chunking: Vec::new(),
        };
        self.again(sent, observed)
    }

    /// `observed` with what reached the upstream read again.
    fn again(&self, sent: &[u8], observed: Observed) -> Observed {
        let seen = self.log.lock().expect("log").all();
        let upstream = seen
            .iter()
            .map(|seen| match seen {
                Seen::Request(m) => Upstream::Request(self.normalize(m, sent)),
                Seen::Partial(bytes) => Upstream::Partial(first_line(bytes)),
                Seen::Unreadable(why, bytes) => Upstream::Unreadable(why, first_line(bytes)),
            })
            .collect();
        let chunking = seen
            .iter()
            .filter_map(|seen| match seen {
                Seen::Request(m) => Some(Chunking::of(m)),
                _ => None,
            })
            .collect();
        Observed {
            upstream,
            chunking,
            ..observed
        }
    }

    /// A forwarded request as the checks read it: names lowercased, in the order they
    /// came, `Host` (when it is the upstream's) and fresh request ids masked, the body
    /// de-chunked.
    fn normalize(&self, m: &Message, sent: &[u8]) -> Normal {
        let upstream_host = self.upstream.to_string().into_bytes();
        let fields = m
            .fields
            .iter()
            .map(|(name, value)| {
                let name = String::from_utf8_lossy(name).to_ascii_lowercase();
                let value = if name == "host" && *value == upstream_host {
                    "<upstream>".to_owned()
                } else if name == "x-request-id" && find(sent, value).is_none() {
                    "<fresh>".to_owned()
                } else {
                    value.escape_ascii().to_string()
                };
                format!("{name}: {value}")
            })
            .collect();
        Normal {
            line: m.line.escape_ascii().to_string(),
            fields,
            body: m.body.escape_ascii().to_string(),
        }
    }
}

fn first_line(bytes: &[u8]) -> String {
    let end = find(bytes, b"\r\n").unwrap_or(bytes.len().min(80));
    bytes[..end].escape_ascii().to_string()
}

/// Sends `bytes` on a new connection and reads until the server closes it, or nothing more
/// comes for a while (750 ms after the last byte, 3 s when none came). The bytes and
/// whether the server closed.
fn exchange(addr: SocketAddr, bytes: &[u8]) -> (Vec<u8>, bool) {
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    // The server may refuse and close before reading all: what it answered is still read.
    let _ = s.write_all(bytes);
    let start = Instant::now();
    let mut last = start;
    let mut out = Vec::new();
    let mut buf = [0u8; 16 << 10];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (out, true),
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                last = Instant::now();
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                let quiet = if out.is_empty() {
                    start.elapsed() >= Duration::from_secs(3)
                } else {
                    last.elapsed() >= Duration::from_millis(750)
                };
                if quiet {
                    return (out, false);
                }
            }
            Err(_) => return (out, true),
        }
    }
}

// ---- what a client and an upstream saw --------------------------------------------------

/// What the client and the upstream saw of one case.
#[derive(Debug, Clone)]
struct Observed {
    /// The answers, in order (informational ones included).
    answers: Vec<Answer>,
    /// Bytes after the last whole answer.
    unread: String,
    /// The router closed the connection (else it was still open when the client stopped).
    closed: bool,
    /// What reached the upstream.
    upstream: Vec<Upstream>,
    /// The chunk extensions and trailers of each whole request that reached the upstream.
    chunking: Vec<Chunking>,
}

/// What a chunked body carried besides its data.
#[derive(Debug, Clone, PartialEq, Default)]
struct Chunking {
    /// Each size line's extensions (`;a=b`), in order; empty when none.
    extensions: Vec<String>,
    trailers: Vec<String>,
}

impl Chunking {
    fn of(m: &Message) -> Chunking {
        Chunking {
            extensions: m
                .extensions
                .iter()
                .filter(|e| !e.is_empty())
                .map(|e| e.escape_ascii().to_string())
                .collect(),
            trailers: m
                .trailers
                .iter()
                .map(|(n, v)| format!("{}: {}", n.escape_ascii(), v.escape_ascii()))
                .collect(),
        }
    }

    /// The extensions alone: the router drops request trailers.
    fn without_trailers(&self) -> Chunking {
        Chunking {
            extensions: self.extensions.clone(),
            trailers: Vec::new(),
        }
    }

    /// What the sent request's chunked body carried.
    fn sent(bytes: &[u8]) -> Chunking {
        let (m, _) = read_message(bytes)
            .expect("a valid request")
            .expect("a whole request");
        Chunking::of(&m)
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Answer {
    status: u16,
    /// The problem's `type`, for a problem+json answer.
    problem: Option<String>,
    /// The upstream's answer (it has `X-Up`).
    from_upstream: bool,
}

#[derive(Debug, Clone, PartialEq)]
enum Upstream {
    Request(Normal),
    /// An incomplete request (its first line) whose connection the router closed.
    Partial(String),
    /// Something that is no request (why, and its first line).
    Unreadable(&'static str, String),
}

#[derive(Debug, Clone, PartialEq)]
struct Normal {
    line: String,
    fields: Vec<String>,
    body: String,
}

impl Observed {
    fn statuses(&self) -> Vec<u16> {
        self.answers.iter().map(|a| a.status).collect()
    }

    fn requests(&self) -> Vec<&Normal> {
        self.upstream
            .iter()
            .filter_map(|u| match u {
                Upstream::Request(n) => Some(n),
                _ => None,
            })
            .collect()
    }

    /// The answers and what reached the upstream are what `want` says.
    fn assert_wanted(&self, want: &Want, what: &str) {
        assert_eq!(self.statuses(), want.answers, "{what}: answers\n{self:#?}");
        assert_eq!(
            self.requests().len(),
            want.forwarded,
            "{what}: requests forwarded\n{self:#?}"
        );
        assert!(
            self.upstream
                .iter()
                .all(|u| matches!(u, Upstream::Request(_))),
            "{what}: only whole requests reach the upstream\n{self:#?}"
        );
        // An answer the router made itself is problem+json (docs/errors.md).
        for a in &self.answers {
            if !a.from_upstream && a.status >= 400 {
                assert!(a.problem.is_some(), "{what}: {a:?} is problem+json");
            }
        }
        assert!(
            self.unread.is_empty(),
            "{what}: only whole answers\n{self:#?}"
        );
    }
}

/// An answer as the client read it.
#[derive(Debug, Clone)]
struct Reply {
    status: u16,
    /// Field lines: lowercased names, values without surrounding whitespace.
    fields: Vec<(String, String)>,
    /// The body, de-chunked.
    body: Vec<u8>,
}

impl Reply {
    fn get(&self, name: &str) -> Option<&str> {
        let mut values = self.fields.iter().filter(|(n, _)| n == name);
        values.next().map(|(_, v)| v.as_str())
    }
}

/// Reads the answers at the start of `bytes`; `heads`: which requests were `HEAD`.
fn read_replies<'b>(bytes: &'b [u8], heads: &[bool]) -> (Vec<Reply>, &'b [u8]) {
    let mut replies = Vec::new();
    let mut pos = 0;
    let mut finals = 0;
    while pos < bytes.len() {
        let Some(end) = find(&bytes[pos..], b"\r\n\r\n") else {
            break;
        };
        let head_text = String::from_utf8_lossy(&bytes[pos..pos + end]).into_owned();
        let mut lines = head_text.split("\r\n");
        let status_line = lines.next().unwrap_or_default();
        let Some(status) = status_line
            .strip_prefix("HTTP/1.1 ")
            .or_else(|| status_line.strip_prefix("HTTP/1.0 "))
            .and_then(|s| s.get(..3))
            .and_then(|s| s.parse::<u16>().ok())
        else {
            break;
        };
        let fields: Vec<(String, String)> = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(n, v)| (n.to_ascii_lowercase(), v.trim().to_owned()))
            .collect();
        let mut reply = Reply {
            status,
            fields,
            body: Vec::new(),
        };
        let body_start = pos + end + 4;
        if status < 200 {
            replies.push(reply);
            pos = body_start;
            continue;
        }
        let head = heads.get(finals).copied().unwrap_or(false);
        let bodiless = head || status == 204 || status == 304;
        finals += 1;
        let chunked = reply
            .get("transfer-encoding")
            .is_some_and(|te| te.eq_ignore_ascii_case("chunked"));
        let length = reply
            .get("content-length")
            .and_then(|v| v.parse::<usize>().ok());
        let (body, next) = if bodiless {
            (Vec::new(), body_start)
        } else if chunked {
            match read_chunked(bytes, body_start) {
                Ok(Some((body, _, _, next))) => (body, next),
                _ => break,
            }
        } else if let Some(n) = length {
            if bytes.len() < body_start + n {
                break;
            }
            (bytes[body_start..body_start + n].to_vec(), body_start + n)
        } else {
            (bytes[body_start..].to_vec(), bytes.len())
        };
        reply.body = body;
        replies.push(reply);
        pos = next;
    }
    (replies, &bytes[pos..])
}

/// [`read_replies`], each as [`Answer`].
fn read_answers<'b>(bytes: &'b [u8], heads: &[bool]) -> (Vec<Answer>, &'b [u8]) {
    let (replies, rest) = read_replies(bytes, heads);
    let answers = replies
        .iter()
        .map(|r| Answer {
            status: r.status,
            problem: (r.status >= 200)
                .then(|| r.get("content-type"))
                .flatten()
                .filter(|t| t.contains("problem+json"))
                .map(|_| {
                    serde_json::from_slice::<serde_json::Value>(&r.body)
                        .ok()
                        .and_then(|v| v.get("type")?.as_str().map(str::to_owned))
                        .unwrap_or_else(|| "<no type>".to_owned())
                }),
            from_upstream: r.status >= 200 && r.get("x-up").is_some(),
        })
        .collect();
    (answers, rest)
}

// ---- the corpus -------------------------------------------------------------------------

/// What a correct router does with a case.
#[derive(Debug, Clone, Copy)]
struct Want {
    /// The statuses the client gets, in order.
    answers: &'static [u16],
    /// The complete requests that reach the upstream.
    forwarded: usize,
}

const fn want(answers: &'static [u16], forwarded: usize) -> Want {
    Want { answers, forwarded }
}

/// Forwarded, answered by the upstream.
const OK: Want = want(&[200], 1);
/// Two pipelined requests, both forwarded and answered.
const OK2: Want = want(&[200, 200], 2);
/// Refused with this status, nothing forwarded.
const fn refused(status: &'static [u16]) -> Want {
    want(status, 0)
}
const R400: Want = refused(&[400]);

/// What the router does where other implementations differ (docs/data-path.md), each
/// asserted beyond the case's `Want` (which is what the router does, these included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Diff {
    /// A refused head (and a framing field a strict parser refuses) is answered
    /// problem+json, where hyper's parser answers a bare status: the last answer (the
    /// refusal) is this problem type (slug), and the connection is closed after it.
    RefusedHeadProblemJson(&'static str),
    /// `Transfer-Encoding` with `Content-Length` in a request is 400 (`bad-body-framing`),
    /// where hyper reads it as chunked (RFC 9112 §6.1 allows either).
    TeWithCl,
    /// Chunked bodies go on as they came (sizes, extensions), where hyper re-encodes them
    /// without their extensions: the upstream gets the sent extensions, and no trailers.
    ChunkedReencoded,
    /// Chunked bodies are checked as they pass: what the router would have to forward as it
    /// came but a next hop could read otherwise (a size of more than 16 hex digits, a control
    /// byte in an extension, an extension outside RFC 9112 §7.1.1's grammar) is 400
    /// `bad-body-framing`, nothing forwarded; hyper decodes it and forwards it re-encoded.
    ChunkedChecked,
    /// A chunked body broken in what came with its head is refused (400
    /// `bad-body-framing`) before anything goes upstream, where hyper has started the
    /// upstream request by then: the upstream sees nothing.
    BrokenChunkedNotStarted,
    /// A `Content-Length` list of one value (`5, 5`) is read and sent on as
    /// `Content-Length: 5`, where hyper refuses it (400).
    LengthList,
}

struct Case {
    name: &'static str,
    bytes: Vec<u8>,
    want: Want,
    diff: Option<Diff>,
}

/// The path every case routes by (an iUID of country 1: region `a`), for `{P}`; the id
/// alone is `{ID}`.
fn orders_path() -> String {
    format!("/v1/orders/{}", iuid_for(1))
}

fn expand(template: &[u8]) -> Vec<u8> {
    let id = iuid_for(1);
    let path = orders_path();
    let mut out = Vec::with_capacity(template.len() + 64);
    let mut i = 0;
    while i < template.len() {
        if template[i..].starts_with(b"{P}") {
            out.extend_from_slice(path.as_bytes());
            i += 3;
        } else if template[i..].starts_with(b"{ID}") {
            out.extend_from_slice(id.as_bytes());
            i += 4;
        } else {
            out.push(template[i]);
            i += 1;
        }
    }
    out
}

fn case(name: &'static str, template: &[u8], want: Want) -> Case {
    Case {
        name,
        bytes: expand(template),
        want,
        diff: None,
    }
}

impl Case {
    fn differs(mut self, diff: Diff) -> Case {
        self.diff = Some(diff);
        self
    }
}

fn corpus() -> Vec<Case> {
    let mut cases = vec![
        // -- Odd but valid heads and bodies (RFC 9110/9112), written for this test --------
        case(
            "get",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "head",
            b"HEAD {P} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "post with a length",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            OK,
        ),
        case(
            "put with a binary body",
            b"PUT {P} HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\nConnection: close\r\n\r\n\x00\xff\r\n\x7f ",
            OK,
        ),
        case(
            "post with an empty length",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "delete",
            b"DELETE {P} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "options on a path",
            b"OPTIONS {P} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "patch",
            b"PATCH {P}/lines/1 HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
            OK,
        ),
        case(
            "post chunked",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
            OK,
        ),
        case(
            "get with a chunked body (a search API)",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nq=1\r\n0\r\n\r\n",
            OK,
        ),
        case(
            "chunked with an empty body",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n",
            OK,
        ),
        case(
            "chunked, coding names in another case and with OWS",
            b"POST {P} HTTP/1.1\r\nHost: t\r\ntransfer-encoding:\t  CHUNKED \t\r\nConnection: close\r\n\r\n1\r\nx\r\n0\r\n\r\n",
            OK,
        ),
        case(
            "long target with a query and percent-encoding",
            &[
                b"GET {P}?q=a%20b&euro=%E2%82%AC&list=1,2,3&empty=&flag&k=".as_slice(),
                &[b'v'; 3000],
                b" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            ]
            .concat(),
            OK,
        ),
        case(
            "an encoded comma and dot segments in the rest of the path (forwarded as sent)",
            b"GET {P}/a%2Cb/./c/../d HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "an empty query",
            b"GET {P}? HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "tabs and spaces in values",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nX-Tab: a\tb\r\nX-Ows:\t  spaced  out \t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "empty values",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nX-Empty:\r\nX-Blank:   \r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "obs-text in a value",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nX-Name: D\xc3\xbcsseldorf \xff\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "names in odd case",
            b"GET {P} HTTP/1.1\r\nhOsT: t\r\nx-MiXeD-cAsE: v\r\nACCEPT: */*\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "duplicate fields, interleaved",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nAccept: text/html\r\nX-B: 1\r\nAccept: application/json\r\nX-B: 2\r\nCookie: a=1\r\nCookie: b=2\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "an X-Forwarded-For chain in two lines",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: 203.0.113.1\r\nX-Forwarded-For: 198.51.100.2, 192.0.2.3\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "obs-text in an X-Forwarded-For line",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nX-Forwarded-For: caf\xe9\r\nX-Forwarded-For: 192.0.2.3\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "an empty X-Forwarded-For line",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nX-Forwarded-For:\r\nX-Forwarded-For: 192.0.2.3\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "the client's forwarding fields replaced",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nForwarded: for=1.2.3.4\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "Connection nominating fields",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nConnection: keep-alive, X-Secret\r\nX-Secret: s\r\nX-Kept: k\r\nConnection: close, x-other\r\nX-Other: o\r\n\r\n",
            OK,
        ),
        case(
            "Connection nominating fields the proxies own",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nConnection: close, X-Forwarded-For, Via, Forwarded, X-Request-Id, Authorization\r\nX-Forwarded-For: 192.0.2.9\r\nVia: 1.1 front\r\nForwarded: for=192.0.2.9\r\nX-Request-Id: client-id-1\r\nAuthorization: Bearer x\r\n\r\n",
            OK,
        ),
        case(
            "hop-by-hop fields",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\nTrailer: X-T\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "Via chain",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nVia: 1.1 front (comment, with comma)\r\nVia: HTTP/1.0 cdn\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "Via chain at max_hops (3)",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nVia: 1.1 a, 1.1 b\r\nVia: 1.0 c\r\nConnection: close\r\n\r\n",
            refused(&[508]),
        ),
        case(
            "Via naming this router: a loop",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nVia: 1.1 edge\r\nConnection: close\r\n\r\n",
            refused(&[508]),
        ),
        case(
            "client-certificate fields removed",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nX-Forwarded-Client-Cert: forged\r\nX-SSL-Client-Verify: SUCCESS\r\nClient-Cert: :Zm9v:\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "a sane request id kept, twice sent",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nX-Request-Id: abc-123.x:y\r\nX-Request-Id: other\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "an insane request id replaced",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nX-Request-Id: not sane!\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "routed by a header",
            b"GET /anything HTTP/1.1\r\nHost: t\r\nX-Entity-Id: {ID}\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "a malformed id in the path",
            b"GET /v1/orders/not-an-id HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            refused(&[400]),
        ),
        case(
            "Host with a port, and an IPv6 literal",
            b"GET {P} HTTP/1.1\r\nHost: [2001:db8::1]:8080\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "a Host with a quote",
            b"GET {P} HTTP/1.1\r\nHost: a\"b\r\nConnection: close\r\n\r\n",
            R400,
        ),
        case(
            "many fields",
            &[
                b"GET {P} HTTP/1.1\r\nHost: t\r\n".as_slice(),
                &(0..60)
                    .flat_map(|i| format!("X-Field-{i}: value {i}\r\n").into_bytes())
                    .collect::<Vec<u8>>(),
                b"Connection: close\r\n\r\n",
            ]
            .concat(),
            OK,
        ),
        case(
            "pipelined GETs",
            b"GET {P}?n=1 HTTP/1.1\r\nHost: t\r\n\r\nGET {P}?n=2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK2,
        ),
        case(
            "pipelined POST with a length, then a GET",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabcGET {P} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK2,
        ),
        case(
            "pipelined chunked POST, then a GET",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET {P} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK2,
        ),
        case(
            "a valid request, then a refused one",
            b"GET {P} HTTP/1.1\r\nHost: t\r\n\r\nGET {P} HTTP/1.1\r\nConnection: close\r\n\r\n",
            want(&[200, 400], 1),
        ),
        // -- HTTP/1.0, expectations, upgrades, unusual targets (RFC 9112 §3.2, §9.3) -------
        case(
            "HTTP/1.0 with a Host",
            b"GET {P} HTTP/1.0\r\nHost: t\r\n\r\n",
            OK,
        ),
        case("HTTP/1.0 without a Host", b"GET {P} HTTP/1.0\r\n\r\n", OK),
        case(
            "Expect: 100-continue",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            want(&[100, 200], 1),
        ),
        case(
            "Upgrade: websocket with Connection: upgrade (the upstream does not switch)",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
            OK,
        ),
        case(
            "Upgrade: websocket without Connection",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "absolute-form target",
            b"GET http://t{P}?q=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "CONNECT",
            b"CONNECT t:443 HTTP/1.1\r\nHost: t:443\r\nConnection: close\r\n\r\n",
            refused(&[405]),
        ),
        case(
            "GET with an authority-form target",
            b"GET t:80 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            R400,
        ),
        case(
            "GET *",
            b"GET * HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "OPTIONS *",
            b"OPTIONS * HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        // -- Host (RFC 9112 §3.2) ----------------------------------------------------------
        case(
            "no Host",
            b"GET {P} HTTP/1.1\r\nConnection: close\r\n\r\n",
            R400,
        ),
        case(
            "two Hosts",
            b"GET {P} HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n",
            R400,
        ),
        case(
            "an invalid Host",
            b"GET {P} HTTP/1.1\r\nHost: a b/c\r\nConnection: close\r\n\r\n",
            R400,
        ),
        case(
            "an empty Host",
            b"GET {P} HTTP/1.1\r\nHost:\r\nConnection: close\r\n\r\n",
            R400,
        ),
        // -- Request smuggling classics (PortSwigger's CL.TE, TE.CL, TE.TE) ----------------
        case(
            "CL.TE",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\nG",
            R400,
        )
        .differs(Diff::TeWithCl),
        case(
            "CL.TE, a request behind and no close",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: 6\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET {P}?smuggled HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::TeWithCl),
        case(
            "TE.CL",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\nConnection: close\r\n\r\n8\r\nSMUGGLED\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::TeWithCl),
        case(
            "TE.TE: xchunked",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: xchunked\r\nConnection: close\r\n\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "TE.TE: xchunked beside a length",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nTransfer-Encoding: xchunked\r\nConnection: close\r\n\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "TE.TE: a space before the value",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding:  chunked\r\nConnection: close\r\n\r\n1\r\nZ\r\n0\r\n\r\n",
            OK,
        ),
        case(
            "TE.TE: a tab after the value",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\t\r\nConnection: close\r\n\r\n1\r\nZ\r\n0\r\n\r\n",
            OK,
        ),
        case(
            "TE.TE: a tab before the value",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding:\tchunked\r\nConnection: close\r\n\r\n1\r\nZ\r\n0\r\n\r\n",
            OK,
        ),
        case(
            "TE.TE: a space before the colon",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding : chunked\r\nConnection: close\r\n\r\n1\r\nZ\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "TE.TE: chunked then identity",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\nConnection: close\r\n\r\n1\r\nZ\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "TE.TE: a coding before chunked",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n1\r\nZ\r\n0\r\n\r\n",
            refused(&[501]),
        ),
        case(
            "Transfer-Encoding in HTTP/1.0",
            b"POST {P} HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nZ\r\n0\r\n\r\n",
            R400,
        )
        // RFC 9112 §6.1: Transfer-Encoding in HTTP/1.0 is faulty framing (issue 37).
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "Content-Length with a plus",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: +5\r\nConnection: close\r\n\r\nhello",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "a negative Content-Length",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: -1\r\nConnection: close\r\n\r\nhello",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "a hex Content-Length",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: 0x5\r\nConnection: close\r\n\r\nhello",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "Content-Length with leading zeros",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: 005\r\nConnection: close\r\n\r\nhello",
            OK,
        ),
        case(
            "Content-Length 010 (ten bytes)",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: 010\r\nConnection: close\r\n\r\n0123456789",
            OK,
        ),
        case(
            "two different Content-Lengths",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 6\r\nConnection: close\r\n\r\nhello!",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "two equal Content-Lengths",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            OK,
        ),
        case(
            "a Content-Length list of equal values",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 5\r\nConnection: close\r\n\r\nhello",
            OK,
        )
        .differs(Diff::LengthList),
        case(
            "a Content-Length list of different values",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 6\r\nConnection: close\r\n\r\nhello!",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        // -- Chunk sizes and framing lines (RFC 9112 §7.1) ---------------------------------
        case(
            "chunk size 0x2",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0x2\r\nhi\r\n0\r\n\r\n",
            R400,
        ),
        case(
            "chunk size 2zz",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2zz\r\nhi\r\n0\r\n\r\n",
            R400,
        ),
        case(
            "chunk size +2",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n+2\r\nhi\r\n0\r\n\r\n",
            R400,
        ),
        case(
            "chunk size with a leading space",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n 2\r\nhi\r\n0\r\n\r\n",
            R400,
        ),
        case(
            "chunk size of 17 hex digits",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n00000000000000002\r\nhi\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::ChunkedChecked),
        case(
            "chunk size of 16 hex digits, leading zeros",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0000000000000002\r\nhi\r\n0\r\n\r\n",
            OK,
        ),
        case(
            "chunk data without its CRLF",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\nhiX0\r\n\r\n",
            R400,
        )
        .differs(Diff::BrokenChunkedNotStarted),
        case(
            "a bare LF after a chunk size",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\nhi\r\n0\r\n\r\n",
            R400,
        ),
        case(
            "a control character in a chunk extension",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2;a=\x01\r\nhi\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::ChunkedChecked),
        case(
            "a trailer with an invalid name",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\nhi\r\n0\r\nBad Name: v\r\n\r\n",
            R400,
        )
        .differs(Diff::BrokenChunkedNotStarted),
        case(
            "chunk extensions",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2;a=b;c\r\nhi\r\n0;last\r\n\r\n",
            OK,
        )
        .differs(Diff::ChunkedReencoded),
        // Request trailers are dropped (docs/data-path.md), as nginx drops them, the ones RFC
        // 9110 §6.5.1 forbids above all: merged into the head, they would reframe or reroute it.
        case(
            "trailers",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\nhi\r\n0\r\nX-Checksum: 1234\r\nX-Other: v\r\n\r\n",
            OK,
        ),
        case(
            "trailers that carry framing, routing and forwarding fields",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\nhi\r\n0\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\nHost: evil\r\nX-Forwarded-For: 10.0.0.1\r\nForwarded: for=10.0.0.1\r\nVia: 1.1 other\r\nX-Request-Id: forged\r\n\r\n",
            OK,
        ),
        // Extensions outside RFC 9112 §7.1.1's grammar, which llhttp refuses: 400, as the
        // router forwards extensions as they came (hyper drops them all).
        case(
            "a chunk extension of a bare semicolon",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2;\r\nhi\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::ChunkedChecked),
        case(
            "a chunk extension with an unbalanced quote",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2;a=\"b\r\nhi\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::ChunkedChecked),
        case(
            "a chunk extension whose value is missing",
            b"POST {P} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2;a=\r\nhi\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::ChunkedChecked),
        // -- Heads a strict parser refuses (RFC 9112 §2.2, §5) -----------------------------
        case(
            "obs-fold",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nX-Folded: a\r\n b\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "a bare CR in a value",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nX-A: a\rb\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "NUL in a value",
            b"GET {P} HTTP/1.1\r\nHost: t\r\nX-A: a\x00b\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "raw non-ASCII bytes in the target",
            b"GET {P}/\xce\xb4\xc2\xb6 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            R400,
        ),
        case(
            "an invalid method character",
            b"G(ET {P} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "HTTP/1.2",
            b"GET {P} HTTP/1.2\r\nHost: t\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "HTTP/2.0 in an HTTP/1 request line",
            b"GET {P} HTTP/2.0\r\nHost: t\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "a lowercase version",
            b"GET {P} http/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "two spaces in the request line",
            b"GET  {P} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
    ];
    cases.extend(llhttp());
    cases.extend(garden());
    cases
}

/// From nodejs/llhttp, `test/request/*.md` (the file is named at each case): the request
/// bytes of its vectors, with the `\n` of the Markdown as the `\r\n` its test harness
/// sends; `Host: t` added to HTTP/1.1 requests that have none (else each would be refused
/// for that alone), and `Connection: close` where it is the last request.
fn llhttp() -> Vec<Case> {
    vec![
        // test/request/sample.md
        case(
            "llhttp sample.md: simple request",
            b"OPTIONS /url HTTP/1.1\r\nHost: t\r\nHeader1: Value1\r\nHeader2:\t Value2\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "llhttp sample.md: DUMBLUCK",
            b"GET /dumbluck HTTP/1.1\r\nHost: t\r\naaaaaaaaaaaaa:++++++++++\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "llhttp sample.md: fragment in URI",
            b"GET /forums/1/topics/2375?page=1#posts-17408 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "llhttp sample.md: prefix newline",
            b"\r\nGET /test HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "llhttp sample.md: query URL with question mark",
            b"GET /test.cgi?foo=bar?baz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "llhttp sample.md: no HTTP version",
            b"GET /\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "llhttp sample.md: line folding in header value with CRLF",
            b"GET / HTTP/1.1\r\nHost: t\r\nLine1:   abc\r\n\tdef\r\n ghi\r\n\t\tjkl\r\n  mno \r\n\t \tqrs\r\nLine2: \t line2\t\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "llhttp sample.md: request starting with CRLF",
            b"\r\nGET /url HTTP/1.1\r\nHost: t\r\nHeader1: Value1\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "llhttp sample.md: extended characters",
            b"GET / HTTP/1.1\r\nHost: t\r\nTest: D\xc3\xbcsseldorf\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "llhttp sample.md: 255 ASCII in header value",
            b"OPTIONS /url HTTP/1.1\r\nHost: t\r\nHeader1: Value1\r\nHeader2: \xffValue2\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "llhttp sample.md: X-SSL-Nonsense (folded)",
            b"GET / HTTP/1.1\r\nHost: t\r\nX-SSL-Nonsense:   -----BEGIN CERTIFICATE-----\r\n\tMIIFbTCCBFWgAwIBAgICH4cwDQYJKoZIhvcNAQEFBQAwcDELMAkGA1UEBhMCVUsx\r\n\t-----END CERTIFICATE-----\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        // test/request/content-length.md
        case(
            "llhttp content-length.md: Content-Length with zeroes",
            b"PUT /url HTTP/1.1\r\nHost: t\r\nContent-Length: 003\r\nConnection: close\r\n\r\nabc",
            OK,
        ),
        case(
            "llhttp content-length.md: Content-Length overflow",
            b"PUT /url HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000000000000000000\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "llhttp content-length.md: duplicate Content-Length",
            b"PUT /url HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "llhttp content-length.md: Content-Length and Transfer-Encoding: identity",
            b"PUT /url HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nTransfer-Encoding: identity\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "llhttp content-length.md: whitespace before the colon",
            b"PUT /url HTTP/1.1\r\nHost: t\r\nConnection: upgrade\r\nContent-Length : 4\r\nUpgrade: ws\r\n\r\nabcdefgh",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "llhttp content-length.md: spaces around the value",
            b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length:  2  \r\nConnection: close\r\n\r\nok",
            OK,
        ),
        case(
            "llhttp content-length.md: spaces inside the value",
            b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 4 2\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "llhttp content-length.md: empty Content-Length",
            b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length:\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "llhttp content-length.md: CR instead of a dash",
            b"PUT /url HTTP/1.1\r\nHost: t\r\nContent\rLength: 003\r\nConnection: close\r\n\r\nabc",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        // test/request/transfer-encoding.md
        case(
            "llhttp transfer-encoding.md: empty Transfer-Encoding with Content-Length",
            b"POST /first HTTP/1.1\r\nHost: t\r\nTransfer-Encoding:\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "llhttp transfer-encoding.md: chunks with lowercase size",
            b"PUT /url HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\na\r\n0123456789\r\n0\r\n\r\n",
            OK,
        ),
        case(
            "llhttp transfer-encoding.md: chunks with uppercase size",
            b"PUT /url HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nA\r\n0123456789\r\n0\r\n\r\n",
            OK,
        ),
        case(
            "llhttp transfer-encoding.md: two chunks and a triple zero end chunk",
            b"POST /two_chunks_mult_zero_end HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n000\r\n\r\n",
            OK,
        ),
        case(
            "llhttp transfer-encoding.md: trailing headers",
            b"POST /chunked_w_trailing_headers HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\nVary: *\r\nContent-Type: text/plain\r\n\r\n",
            OK,
        )
        .differs(Diff::ChunkedReencoded),
        case(
            "llhttp transfer-encoding.md: chunk extensions",
            b"POST /chunked_w_unicorns_after_length HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5;ilovew3;somuchlove=aretheseparametersfor;another=withvalue\r\nhello\r\n6;blahblah;blah\r\n world\r\n0\r\n\r\n",
            OK,
        )
        .differs(Diff::ChunkedReencoded),
        case(
            "llhttp transfer-encoding.md: no semicolon before chunk extensions",
            b"POST /chunked_w_unicorns_after_length HTTP/1.1\r\nHost: localhost\r\nTransfer-encoding: chunked\r\nConnection: close\r\n\r\n2 erfrferferf\r\naa\r\n0 rrrr\r\n\r\n",
            R400,
        ),
        case(
            "llhttp transfer-encoding.md: chunk extensions quoting",
            b"POST /chunked_w_unicorns_after_length HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5;ilovew3=\"I \\\"love\\\"; \\\\extensions\\\\\";somuchlove=\"aretheseparametersfor\";blah;foo=bar\r\nhello\r\n6;blahblah;blah\r\n world\r\n0\r\n\r\n",
            OK,
        )
        .differs(Diff::ChunkedReencoded),
        case(
            "llhttp transfer-encoding.md: pigeons",
            b"PUT /url HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: pigeons\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "llhttp transfer-encoding.md: chunked before another coding",
            b"POST /post_identity_body_world?q=search#hey HTTP/1.1\r\nHost: t\r\nAccept: */*\r\nTransfer-Encoding: chunked, deflate\r\nConnection: close\r\n\r\nWorld",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "llhttp transfer-encoding.md: chunked and another coding in two lines",
            b"POST /post_identity_body_world?q=search#hey HTTP/1.1\r\nHost: t\r\nAccept: */*\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: deflate\r\nConnection: close\r\n\r\nWorld",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "llhttp transfer-encoding.md: chunked as the last coding",
            b"POST /post_identity_body_world?q=search#hey HTTP/1.1\r\nHost: t\r\nAccept: */*\r\nTransfer-Encoding: deflate, chunked\r\nConnection: close\r\n\r\n5\r\nWorld\r\n0\r\n\r\n",
            refused(&[501]),
        ),
        case(
            "llhttp transfer-encoding.md: chunkedchunked",
            b"POST /post_identity_body_world?q=search#hey HTTP/1.1\r\nHost: t\r\nAccept: */*\r\nTransfer-Encoding: chunkedchunked\r\nConnection: close\r\n\r\n5\r\nWorld\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "llhttp transfer-encoding.md: missing last-chunk",
            b"PUT /url HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nfoo\r\n\r\n",
            R400,
        )
        .differs(Diff::BrokenChunkedNotStarted),
        case(
            "llhttp transfer-encoding.md: invalid OBS fold after chunked value",
            b"PUT /url HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n  abc\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "llhttp transfer-encoding.md: chunk data not terminated by CRLF",
            b"PUT /url HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nABCDE0\r\n\r\n",
            R400,
        )
        .differs(Diff::BrokenChunkedNotStarted),
        // test/request/invalid.md
        case(
            "llhttp invalid.md: ICE protocol",
            b"GET /music/sweet/music ICE/1.0\r\nHost: t\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "llhttp invalid.md: headers separated by CR",
            b"GET / HTTP/1.1\r\nHost: t\r\nFoo: 1\rBar: 2\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "llhttp invalid.md: invalid header token",
            b"GET / HTTP/1.1\r\nHost: t\r\nFoo\x01\x02: Bar\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "llhttp invalid.md: missing CR between headers",
            b"GET / HTTP/1.1\r\nHost: t\r\nFoo: 1\nBar: 2\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "llhttp invalid.md: invalid HTTP version",
            b"GET / HTTP/5.6\r\nHost: t\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "llhttp invalid.md: invalid space after start line",
            b"GET / HTTP/1.1\r\n Host: foo\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "llhttp invalid.md: only LFs present",
            b"POST / HTTP/1.1\nHost: t\nTransfer-Encoding: chunked\nTrailer: Baz\nFoo: abc\nBar: def\n\n1\nA\n1;abc\nB\n1;def=ghi\nC\n1;jkl=\"mno\"\nD\n0\n\nBaz: ghi\n\n",
            R400,
        ),
        case(
            "llhttp invalid.md: spaces before headers",
            b"POST /hello HTTP/1.1\r\nHost: localhost\r\nFoo: bar\r\n Content-Length: 38\r\n\r\nGET /bye HTTP/1.1\r\nHost: localhost\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        // test/request/uri.md
        case(
            "llhttp uri.md: quotes in URI",
            b"GET /with_\"lovely\"_quotes?foo=\\\"bar\\\" HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "llhttp uri.md: query URL with vertical bar",
            b"GET /test.cgi?query=| HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "llhttp uri.md: host terminated by a query string",
            b"GET http://hypnotoad.org?hail=all HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "llhttp uri.md: space in URI",
            b"GET /foo bar/ HTTP/1.1\r\nHost: t\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "llhttp uri.md: UTF-8 in the path",
            b"GET /\xce\xb4\xc2\xb6/\xce\xb4t/space HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            R400,
        ),
        // test/request/method.md
        case(
            "llhttp method.md: REPORT",
            b"REPORT /test HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "llhttp method.md: M-SEARCH",
            b"M-SEARCH * HTTP/1.1\r\nHOST: 239.255.255.250:1900\r\nMAN: \"ssdp:discover\"\r\nST: \"ssdp:all\"\r\nConnection: close\r\n\r\n",
            OK,
        ),
        case(
            "llhttp method.md: PATCH",
            b"PATCH /file.txt HTTP/1.1\r\nHost: www.example.com\r\nContent-Type: application/example\r\nIf-Match: \"e0023aa4e\"\r\nContent-Length: 10\r\nConnection: close\r\n\r\ncccccccccc",
            OK,
        ),
        case(
            "llhttp method.md: CONNECT with caps",
            b"CONNECT HOME0.NETSCAPE.COM:443 HTTP/1.1\r\nHost: HOME0.NETSCAPE.COM:443\r\nUser-agent: Mozilla/1.1N\r\nProxy-authorization: basic aGVsbG86d29ybGQ=\r\nConnection: close\r\n\r\n",
            refused(&[405]),
        ),
        case(
            "llhttp method.md: QUERY",
            b"QUERY /contacts HTTP/1.1\r\nHost: example.org\r\nContent-Type: example/query\r\nAccept: text/csv\r\nContent-Length: 41\r\nConnection: close\r\n\r\nselect surname, givenname, email limit 10",
            OK,
        ),
        // test/request/connection.md
        case(
            "llhttp connection.md: keep-alive pipelining",
            b"PUT /url HTTP/1.1\r\nHost: t\r\nConnection: keep-alive\r\nContent-Length: 4\r\n\r\n2\r\nOKPUT /url HTTP/1.1\r\nHost: t\r\nConnection: close\r\nContent-Length: 4\r\n\r\n2\r\nOK",
            OK2,
        ),
        case(
            "llhttp connection.md: multiple tokens with folding",
            b"GET /demo HTTP/1.1\r\nHost: example.com\r\nConnection: Something,\r\n Upgrade, ,Keep-Alive\r\nSec-WebSocket-Key2: 12998 5 Y3 1  .P00\r\nSec-WebSocket-Protocol: sample\r\nUpgrade: WebSocket\r\n\r\nHot diggity dogg",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        // test/request/pipelining.md
        case(
            "llhttp pipelining.md: three POSTs",
            b"POST /aaa HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nAAA\r\nPOST /bbb HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nBBB\r\nPOST /ccc HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nConnection: close\r\n\r\nCCC",
            want(&[200, 200, 200], 3),
        ),
    ]
}

/// From narfindustries/http-garden, `TROPHIES.md`: the payloads it lists for the bugs it
/// found in servers and transducers (proxies), byte for byte; `Host: a` added after the
/// request line where a payload has none, so that its framing is what is judged.
fn garden() -> Vec<Case> {
    vec![
        case(
            "garden: chunk size 0_2e, a request smuggled behind",
            b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0_2e\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
            R400,
        ),
        case(
            "garden: NUL and CR in a value",
            b"GET / HTTP/1.1\r\nHost: a\r\nHeader: v\x00\ralue\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: whitespace before the colon of Content-Length",
            b"GET / HTTP/1.1\r\nHost: whatever\r\nContent-Length : 34\r\n\r\nGET / HTTP/1.1\r\nHost: whatever\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: whitespace before the first field name",
            b"GET / HTTP/1.1\r\n\tContent-Length: 1\r\nHost: a\r\n\r\nX",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: HTTP/1.32",
            b"GET /test HTTP/1.32\r\nHost: a\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: a method that is no token",
            b"G=\":<>(e),[T];?\" /get HTTP/1.1\r\nHost: a\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: target !",
            b"GET ! HTTP/1.1\r\nHost: a\r\n\r\n",
            R400,
        ),
        case(
            "garden: a non-ASCII byte in a field name",
            b"GET / HTTP/1.1\r\nHost: a\r\n\xefoo: bar\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: LF as whitespace in the request line",
            b"GET /\nHTTP/1.1\r\nHost: a\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: Content-Length +1_0",
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: +1_0\r\n\r\n0123456789",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "garden: Transfer-Encoding chunked twice",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nZ\r\n0\r\n\r\n",
            R400,
        ),
        case(
            "garden: \\xa0 around chunked",
            b"POST / HTTP/1.1\r\nHost: whatever\r\nTransfer-Encoding: \xa0chunked\xa0\r\n\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "garden: a CR ending a field line",
            b"GET / HTTP/1.1\r\nHost: a\r\nVisible: :/\rSmuggled: :)\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: HTTP/\\r\\r1.1",
            b"GET / HTTP/\r\r1.1\r\nHost: a\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: an empty Content-Length",
            b"GET / HTTP/1.1\r\nHost: whatever\r\nContent-Length: \r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "garden: an empty chunk size",
            b"GET / HTTP/1.1\r\nHost: whatever\r\nTransfer-Encoding: chunked\r\n\r\n\r\n\r\n",
            R400,
        ),
        case(
            "garden: an empty field name",
            b"GET / HTTP/1.1\r\n: ignored\r\nHost: whatever\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: \\x85 after a field name",
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length\x85: 10\r\n\r\n0123456789",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: ,chunked beside a length",
            b"GET / HTTP/1.1\r\nHost: whatever\r\nTransfer-Encoding: ,chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::TeWithCl),
        case(
            "garden: Content-Length 1 then 0",
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 0\r\n\r\nZ",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "garden: HTTP/4294967295.255",
            b"GET / HTTP/4294967295.255\r\nHost: a\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: Content-Length -48",
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: -48\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "garden: a field line of a colon alone",
            b"GET / HTTP/1.1\r\nHost: a\r\n:\r\nI: am chopped off\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: a field line without a colon",
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length 10\r\n\r\n0123456789",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: Content-Length 1Z",
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1Z\r\n\r\nZ",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "garden: a head ended by \\r\\n\\rZ",
            b"GET / HTTP/1.1\r\nHost: a\r\n\rZGET /evil: HTTP/1.1\r\nHost: a\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: a chunk line ended by \\r\\r",
            b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\r;ABCD\r\n34\r\nE\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
            R400,
        ),
        case(
            "garden: Content-Length 010 (decimal, not octal: two bytes short)",
            b"GET / HTTP/1.1\r\nHost: whatever\r\nContent-Length: 010\r\n\r\n01234567",
            want(&[], 0),
        ),
        case(
            "garden: a bare CR in a value",
            b"GET / HTTP/1.1\r\nHost: whatever\r\nHeader: va\rlue\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: a CR in chunk-ext whitespace",
            b"POST /abc HTTP/1.1\r\nTransfer-Encoding: chunked\r\nHost: h2o.http-garden.us\r\n\r\n41;a=b\r\rXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX\r\n0\r\n\r\nGET /bad_path/pwned HTTP/1.1\r\nHost: a\r\nContent-Length: 412\r\n\r\n0\r\n\r\nGET /def HTTP/1.1\r\nHost: h2o.http-garden.us\r\n\r\n",
            R400,
        ),
        case(
            "garden: a field name continued across lines",
            b"POST / HTTP/1.1\r\nHost: whatever\r\nTransfer-\r\nEncoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: chunked ended by \\r\\nXX",
            b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX:POST / HTTP/1.1\r\n\r\n",
            OK,
        )
        .differs(Diff::ChunkedReencoded),
        case(
            "garden: an unknown coding",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: blegh\r\n\r\n1\r\nZ\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "garden: an invalid request after one asking to close",
            b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\nInvalid\r\n\r\n",
            OK,
        ),
        case(
            "garden: \\xff around chunked",
            b"POST / HTTP/1.1\r\nHost: \xffa\xff\r\nTransfer-Encoding: \xffchunked\xff\r\n\r\n1\r\nZ\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "garden: an invalid chunk, a request behind",
            b"POST / HTTP/1.1\r\nHost: whatever\r\nTransfer-Encoding: chunked\r\n\r\nINVALID!!!\r\nGET / HTTP/1.1\r\nHost: whatever\r\n\r\n",
            R400,
        ),
        case(
            "garden: Content-Length 0x10",
            b"POST / HTTP/1.1\r\nHost: akamai.my-domain.cool\r\nContent-Length: 0x10\r\n\r\nZ",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "garden: chunk sizes Z, ZZ, ZZZ",
            b"POST / HTTP/1.1\r\nHost: akamai.my-domain.cool\r\nTransfer-Encoding: chunked\r\n\r\nZ\r\nZZ\r\nZZZ\r\n\r\n",
            R400,
        ),
        case(
            "garden: a CR before the semicolon of a chunk-ext",
            b"POST / HTTP/1.1\r\nHost: server.my-domain.cool\r\nTransfer-Encoding: chunked\r\n\r\n2\r\r;a\r\n02\r\n41\r\n0\r\n\r\nGET /bad_path/pwned HTTP/1.1\r\nHost: a\r\nContent-Length: 430\r\n\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: server.my-domain.cool\r\n\r\n",
            R400,
        ),
        case(
            "garden: a chunk size ended by a bare CR",
            b"POST /  HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r0\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: bytes after a valid chunk size",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1these-bytes-never-get-validated\r\nZ\r\n0\r\n\r\n",
            R400,
        ),
        case(
            "garden: ,chunked",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,chunked\r\n\r\n0\r\n\r\n",
            want(&[200], 1),
        ),
        case(
            "garden: NUL in Host",
            b"GET / HTTP/1.1\r\nHost: google.com\x00.kallus.org\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: a bare LF ending chunk data",
            b"GET / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\na\r\n0123456789\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::BrokenChunkedNotStarted),
        case(
            "garden: a field line broken by LF",
            b"GET / HTTP/1.1\r\nHost: whatever\r\nTe\nst: test\r\nConnection: close\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: LF line ends throughout",
            b"GET / HTTP/1.1\nHost: whatever\nConnection: close\n\n",
            OK,
        ),
        case(
            "garden: chunk size -0x0",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n-0x0\r\n\r\n",
            R400,
        ),
        case(
            "garden: a NUL field line after a colon-less one",
            b"GET / HTTP/1.1\r\nHost: a\r\na:b\r\nc\x00\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: a GET with a body",
            b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\nConnection: close\r\n\r\n1234567890",
            OK,
        ),
        case(
            "garden: Content-Length 0 then 31, a request behind",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\nContent-Length: 31\r\n\r\nGET /evil HTTP/1.1\r\nHost: a\r\n\r\n",
            R400,
        )
        .differs(Diff::RefusedHeadProblemJson("bad-body-framing")),
        case(
            "garden: Content-Length and Transfer-Encoding",
            b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n",
            R400,
        )
        .differs(Diff::TeWithCl),
        case(
            "garden: a chunk size after whitespace",
            b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n           0\r\n\r\n",
            R400,
        ),
        case(
            "garden: a NUL after the message",
            b"GET / HTTP/1.1\r\nHost: whatever\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n\x00",
            want(&[200, 400], 1),
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
        case(
            "garden: a pipelined request read as a body",
            b"POST / HTTP/1.1\r\nContent-Length: 0\r\nConnection:keep-alive\r\nHost: a\r\nid: 0\r\n\r\nPOST / HTTP/1.1\r\nHost: a\r\nid: 1\r\nContent-Length: 34\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nid: 2\r\nConnection: close\r\n\r\n",
            want(&[200, 200, 400], 2),
        )
        .differs(Diff::RefusedHeadProblemJson("invalid-head")),
    ]
}

/// Checks one case: the router does what the case wants, and what its `Diff` says.
fn check(world: &World, case: &Case) -> Result<(), String> {
    let own = world.run(&case.bytes, &[case.bytes.starts_with(b"HEAD ")]);
    let outcome = std::panic::catch_unwind(|| {
        assert!(
            own.chunking.iter().all(|c| c.trailers.is_empty()),
            "request trailers forwarded: {:?}",
            own.chunking
        );
        own.assert_wanted(&case.want, "router");
        if let Some(diff) = case.diff {
            diff.check(&case.bytes, &case.want, &own);
        }
    });
    outcome.map_err(|e| {
        let why = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_default();
        format!(
            "case {:?} ({:?}): {why}\nsent: {}\nrouter: {own:#?}",
            case.name,
            case.diff,
            case.bytes.escape_ascii()
        )
    })
}

impl Diff {
    /// Asserts what docs/data-path.md says the router does.
    fn check(&self, sent: &[u8], want: &Want, own: &Observed) {
        let problem = |slug: &str| Some(format!("urn:iuid-router:problem:{slug}"));
        let refused_for_framing = |o: &Observed| {
            o.assert_wanted(&R400, "router");
            assert_eq!(o.answers[0].problem, problem("bad-body-framing"));
        };
        match *self {
            Diff::RefusedHeadProblemJson(slug) => {
                own.assert_wanted(want, "router");
                let last = own.answers.last().expect("an answer");
                assert_eq!(last.problem, problem(slug), "problem+json");
                assert!(own.closed, "the connection closed");
            }
            Diff::TeWithCl | Diff::ChunkedChecked => refused_for_framing(own),
            Diff::ChunkedReencoded => {
                own.assert_wanted(want, "router");
                let sent = Chunking::sent(sent);
                assert_ne!(
                    sent,
                    Chunking::default(),
                    "the case has extensions or trailers"
                );
                assert_eq!(own.chunking, [sent.without_trailers()], "as they came");
            }
            Diff::BrokenChunkedNotStarted => {
                refused_for_framing(own);
                assert_eq!(own.upstream, [], "nothing reached the upstream");
            }
            Diff::LengthList => {
                own.assert_wanted(want, "router");
                let (_, n) = sent_length(sent);
                let fields = &own.requests()[0].fields;
                assert!(
                    fields.contains(&format!("content-length: {n}")),
                    "{fields:?}"
                );
            }
        }
    }
}

/// The sent request's `Content-Length` value and the length it says.
fn sent_length(sent: &[u8]) -> (String, u64) {
    let text = String::from_utf8_lossy(sent);
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length:"))
        .expect("a Content-Length line")
        .trim()
        .to_owned();
    let first = value.split(',').next().unwrap_or_default().trim();
    (value.clone(), first.parse().expect("a length"))
}

/// The corpus: every case is answered and forwarded as it wants. All cases run; the
/// failures are reported together.
#[test]
fn the_corpus_is_answered_and_forwarded_as_specified() {
    let world = World::start();
    let cases = corpus();
    assert!(cases.len() >= 80, "{} cases", cases.len());
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|case| check(&world, case).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}

// ---- generated requests -----------------------------------------------------------------

/// One generated request: its bytes and whether it is a `HEAD`.
#[derive(Debug, Clone)]
struct Generated {
    bytes: Vec<u8>,
    head: bool,
}

/// A field value: visible ASCII and obs-text, spaces and tabs inside (not at its ends:
/// they are not part of a value).
fn field_value() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        8 => 0x21u8..=0x7e,
        2 => Just(b' '),
        1 => Just(b'\t'),
        1 => 0x80u8..=0xff,
    ];
    prop::collection::vec(byte, 0..30).prop_map(|v| trim(&v).to_vec())
}

/// A field line the router passes on (or rewrites): common
/// names, repeated, in any case, and made-up ones.
fn field() -> impl Strategy<Value = (String, Vec<u8>)> {
    let name = prop_oneof![
        prop::sample::select(vec![
            "Accept",
            "accept",
            "User-Agent",
            "Cookie",
            "cookie",
            "Cache-Control",
            "If-None-Match",
            "Authorization",
            "X-Custom",
            "x-custom",
            "Forwarded",
            "X-Forwarded-Proto",
            "X-Forwarded-Host",
            "X-Forwarded-Client-Cert",
            "Keep-Alive",
            "TE",
        ])
        .prop_map(str::to_owned),
        "X-[A-Za-z0-9!#$%&'*+.^_`|~-]{1,12}",
    ];
    let xff = prop::sample::select(vec![
        "203.0.113.7",
        " 198.51.100.1, 192.0.2.2 ",
        "",
        "unknown",
    ])
    .prop_map(|v| ("X-Forwarded-For".to_owned(), v.as_bytes().to_vec()));
    let id = prop::sample::select(vec!["abc-123", "A.b:c_1", "not sane!"])
        .prop_map(|v| ("X-Request-Id".to_owned(), v.as_bytes().to_vec()));
    prop_oneof![6 => (name, field_value()), 1 => xff, 1 => id]
}

/// A body and its framing: none, a length, or chunked (random chunk sizes spelled in any
/// case with leading zeros, extensions, trailers).
#[derive(Debug, Clone)]
enum Body {
    None,
    Length(Vec<u8>),
    Chunked {
        data: Vec<u8>,
        /// Where the data is cut into chunks (sorted offsets).
        cuts: Vec<usize>,
        /// Each chunk's size spelling: uppercase, leading zeros, extension.
        styles: Vec<(bool, usize, Option<&'static str>)>,
        trailers: Vec<(String, Vec<u8>)>,
    },
}

fn body() -> impl Strategy<Value = Body> {
    let data = prop::collection::vec(any::<u8>(), 0..400);
    let style = (
        any::<bool>(),
        0usize..3,
        prop::option::weighted(
            0.3,
            prop::sample::select(vec![";a=b", ";flag", ";q=\"x y\"", " ;ws=1"]),
        ),
    );
    let trailer = ("X-T[a-z]{0,6}", field_value());
    prop_oneof![
        Just(Body::None),
        data.clone().prop_map(Body::Length),
        (
            data,
            prop::collection::vec(any::<prop::sample::Index>(), 0..6),
            prop::collection::vec(style, 8),
            prop::collection::vec(trailer, 0..3),
        )
            .prop_map(|(data, cuts, styles, trailers)| {
                let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(data.len() + 1)).collect();
                cuts.sort_unstable();
                cuts.dedup();
                Body::Chunked {
                    data,
                    cuts,
                    styles,
                    trailers,
                }
            }),
    ]
}

/// The body's framing field and bytes.
fn encode(body: &Body) -> (Option<String>, Vec<u8>) {
    match body {
        Body::None => (None, Vec::new()),
        Body::Length(data) => (
            Some(format!("Content-Length: {}", data.len())),
            data.clone(),
        ),
        Body::Chunked {
            data,
            cuts,
            styles,
            trailers,
        } => {
            let mut out = Vec::new();
            let mut at = 0;
            let ends = cuts.iter().copied().chain([data.len()]);
            for (i, end) in ends.enumerate() {
                if end <= at {
                    continue;
                }
                let (upper, zeros, ext) = styles[i % styles.len()];
                let size = format!("{}{:x}", "0".repeat(zeros), end - at);
                let size = if upper { size.to_uppercase() } else { size };
                out.extend_from_slice(size.as_bytes());
                out.extend_from_slice(ext.unwrap_or("").as_bytes());
                out.extend_from_slice(b"\r\n");
                out.extend_from_slice(&data[at..end]);
                out.extend_from_slice(b"\r\n");
                at = end;
            }
            out.extend_from_slice(b"0\r\n");
            for (name, value) in trailers {
                out.extend_from_slice(format!("{name}: ").as_bytes());
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
            out.extend_from_slice(b"\r\n");
            (Some("Transfer-Encoding: chunked".to_owned()), out)
        }
    }
}

/// A valid request: a method, a target the routes take (the orders path, with a rest, or
/// unrouted), `Host`, random fields, perhaps a `Connection` line nominating one of them, a
/// body by its framing; `last`: it asks to close.
fn request(last: bool) -> impl Strategy<Value = Generated> {
    let method = prop::sample::select(vec![
        "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS",
    ]);
    // Not an encoded slash or backslash, nor `..` (above the root): paths upstreams read
    // apart, refused (docs/data-path.md "Paths", tests/one_reading_paths.rs).
    let segment = prop_oneof!["[A-Za-z0-9._~!$&'()*+,;=:@-]{1,8}", "%[0-9A-F]{2}",]
        .prop_filter("a path upstreams read one way", |s| {
            !matches!(s.as_str(), ".." | "%2F" | "%5C")
        });
    let target = (
        prop::sample::select(vec!["orders", "orders-rest", "root", "other"]),
        prop::collection::vec(segment, 0..3),
        prop::option::of(prop::collection::vec(
            ("[a-z]{1,5}", "[A-Za-z0-9%._~/?:@!$'()*+,;-]{0,8}"),
            1..4,
        )),
    )
        .prop_map(|(base, segments, query)| {
            let mut t = match base {
                "orders" => orders_path(),
                "orders-rest" => format!("{}/lines", orders_path()),
                "root" => String::new(),
                _ => "/other".to_owned(),
            };
            if base != "orders" {
                for s in segments {
                    t.push('/');
                    t.push_str(&s);
                }
            }
            if t.is_empty() {
                t.push('/');
            }
            if let Some(query) = query {
                let pairs: Vec<String> = query.iter().map(|(k, v)| format!("{k}={v}")).collect();
                t.push('?');
                t.push_str(&pairs.join("&"));
            }
            t
        });
    let host = prop::sample::select(vec!["t", "shop.example:8443", "127.0.0.1", "[::1]:80"]);
    (
        method,
        target,
        host,
        prop::collection::vec(field(), 0..12),
        prop::option::of(any::<prop::sample::Index>()),
        body(),
        any::<bool>(),
    )
        .prop_map(
            move |(method, target, host, fields, nominate, body, host_first)| {
                // A HEAD's answer has no body, so it is sent none either.
                let body = if method == "HEAD" { Body::None } else { body };
                let mut head = format!("{method} {target} HTTP/1.1\r\n").into_bytes();
                let mut lines: Vec<Vec<u8>> = fields
                    .iter()
                    .map(|(n, v)| [n.as_bytes(), b": ", v].concat())
                    .collect();
                let host = format!("Host: {host}").into_bytes();
                if host_first {
                    lines.insert(0, host);
                } else {
                    lines.push(host);
                }
                let mut connection: Vec<String> = Vec::new();
                if last {
                    connection.push("close".to_owned());
                }
                if let (Some(i), false) = (nominate, fields.is_empty()) {
                    connection.push(fields[i.index(fields.len())].0.clone());
                }
                if !connection.is_empty() {
                    lines.push(format!("Connection: {}", connection.join(", ")).into_bytes());
                }
                let (framing, bytes) = encode(&body);
                if let Some(framing) = framing {
                    lines.push(framing.into_bytes());
                }
                for line in lines {
                    head.extend_from_slice(&line);
                    head.extend_from_slice(b"\r\n");
                }
                head.extend_from_slice(b"\r\n");
                head.extend_from_slice(&bytes);
                Generated {
                    bytes: head,
                    head: method == "HEAD",
                }
            },
        )
}

/// One request, or two pipelined, the last asking to close.
fn requests() -> impl Strategy<Value = Vec<Generated>> {
    prop_oneof![
        3 => request(true).prop_map(|r| vec![r]),
        1 => (request(false), request(true)).prop_map(|(a, b)| vec![a, b]),
    ]
}

/// Valid requests generated from the grammar above reach the upstream and are answered, the
/// chunk extensions as they came and no trailers ([`Diff::ChunkedReencoded`]).
#[test]
fn generated_valid_requests_are_forwarded() {
    let world = World::start();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let result = runner.run(&requests(), |requests| {
        let bytes: Vec<u8> = requests.iter().flat_map(|r| r.bytes.clone()).collect();
        let heads: Vec<bool> = requests.iter().map(|r| r.head).collect();
        let own = world.run(&bytes, &heads);
        let n = requests.len();
        let want = want(&[200, 200][..n], n);
        let checked = std::panic::catch_unwind(|| own.assert_wanted(&want, "router"));
        prop_assert!(checked.is_ok(), "router: {:#?}", own);
        let sent: Vec<Chunking> = requests.iter().map(|r| Chunking::sent(&r.bytes)).collect();
        let sent: Vec<Chunking> = sent.iter().map(Chunking::without_trailers).collect();
        prop_assert_eq!(
            &own.chunking,
            &sent,
            "extensions as they came, trailers dropped"
        );
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

// ---- answers: upstream answers through the router ---------------------------------------

/// An answer as the client got it: names lowercased, lines of one name together in their
/// order, the request id and `Date` masked, the body de-chunked (a problem's, its type).
#[derive(Debug, Clone, PartialEq)]
struct Normal2 {
    status: u16,
    fields: Vec<String>,
    body: String,
}

/// What a client got when the upstream answered a case's bytes.
#[derive(Debug, Clone)]
struct Relayed {
    replies: Vec<Normal2>,
    /// Bytes after the last whole answer.
    unread: String,
    /// The router closed the connection (the request asked it to).
    closed: bool,
}

impl Relayed {
    fn statuses(&self) -> Vec<u16> {
        self.replies.iter().map(|r| r.status).collect()
    }
}

impl World {
    /// Has the upstream answer `script` (then close) to a `GET` (or `HEAD`); what the
    /// client got.
    fn relay(&self, script: &[u8], head: bool) -> Relayed {
        {
            let mut log = self.log.lock().expect("log");
            log.seen.clear();
            log.script = Some(script.to_vec());
        }
        let method = if head { "HEAD" } else { "GET" };
        let request = format!(
            "{method} {} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
            orders_path()
        );
        let (bytes, closed) = exchange(self.router.addr, request.as_bytes());
        {
            let (replies, rest) = read_replies(&bytes, &[head]);
            let replies = replies
                .into_iter()
                .map(|r| {
                    let problem = r
                        .get("content-type")
                        .is_some_and(|t| t.contains("problem+json"));
                    let mut fields: Vec<(String, String)> = r
                        .fields
                        .into_iter()
                        .map(|(n, v)| match n.as_str() {
                            "x-request-id" => (n, "<id>".to_owned()),
                            "date" => (n, "<date>".to_owned()),
                            _ => (n, v),
                        })
                        .collect();
                    fields.sort_by(|a, b| a.0.cmp(&b.0));
                    // The router's own answers are read by their problem type: their
                    // detail is a wording of the upstream's fault.
                    if problem {
                        fields.retain(|(n, _)| n != "content-length");
                    }
                    let body = match serde_json::from_slice::<serde_json::Value>(&r.body) {
                        Ok(json) if problem => json["type"].to_string(),
                        _ => r.body.escape_ascii().to_string(),
                    };
                    Normal2 {
                        status: r.status,
                        fields: fields
                            .into_iter()
                            .map(|(n, v)| format!("{n}: {v}"))
                            .collect(),
                        body,
                    }
                })
                .collect();
            Relayed {
                replies,
                unread: String::from_utf8_lossy(rest).into_owned(),
                closed,
            }
        }
    }
}

/// What the router does with an answer where other implementations differ
/// (docs/data-path.md), asserted beyond the case's statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AnswerDiff {
    /// 1xx answers other than `100` (`103 Early Hints`) reach the client (hyper drops
    /// them): the 1xx first, then the final answer.
    EarlyHints,
    /// Chunked bodies are checked as they pass: a chunk size line the router would relay as
    /// it came but RFC 9112 §7.1 does not allow (whitespace after the size with no
    /// extension, a `;` with no name) is 502 `bad-gateway`, where hyper relays the answer
    /// re-encoded.
    ChunkedChecked,
    /// A close-delimited answer goes to the client chunked, an HTTP/1.0 one too (hyper sends
    /// that on delimited by the close): `transfer-encoding: chunked`, the body whole.
    Http10CloseDelimited,
    /// A `304`'s `Content-Length` (the length a `200` would have had, RFC 9110 §8.6) is
    /// passed on (hyper drops it).
    NotModifiedLength,
}

struct AnswerCase {
    name: &'static str,
    answer: &'static [u8],
    head: bool,
    /// The statuses the client gets, informational ones included.
    want: &'static [u16],
    diff: Option<AnswerDiff>,
}

const fn answer(name: &'static str, answer: &'static [u8], want: &'static [u16]) -> AnswerCase {
    AnswerCase {
        name,
        answer,
        head: false,
        want,
        diff: None,
    }
}

fn answers() -> Vec<AnswerCase> {
    vec![
        // -- Odd but valid answers, written for this test ----------------------------------
        answer("length", b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", &[200]),
        answer(
            "chunked",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
            &[200],
        ),
        answer(
            "chunked with extensions and trailers",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
            &[200],
        ),
        answer("close-delimited", b"HTTP/1.1 200 OK\r\n\r\nuntil the close", &[200]),
        answer(
            "both Transfer-Encoding and Content-Length",
            b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            &[200],
        ),
        answer("204 with a length", b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n", &[204]),
        answer("304", b"HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\n\r\n", &[304]),
        AnswerCase {
            diff: Some(AnswerDiff::NotModifiedLength),
            ..answer(
                "304 with the GET's length",
                b"HTTP/1.1 304 Not Modified\r\nContent-Length: 12\r\n\r\n",
                &[304],
            )
        },
        answer(
            "a chunked answer over a connection the upstream closes",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n2\r\nok\r\n0\r\n\r\n",
            &[200],
        ),
        AnswerCase {
            head: true,
            ..answer(
                "an answer to HEAD with a length",
                b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n",
                &[200],
            )
        },
        answer(
            "hop-by-hop and nominated fields",
            b"HTTP/1.1 200 OK\r\nConnection: keep-alive, X-Secret\r\nKeep-Alive: timeout=5\r\nX-Secret: s\r\nProxy-Connection: keep-alive\r\nUpgrade: h2c\r\nContent-Length: 2\r\n\r\nok",
            &[200],
        ),
        answer(
            "the upstream's request id replaced",
            b"HTTP/1.1 200 OK\r\nX-Request-Id: from-upstream\r\nContent-Length: 2\r\n\r\nok",
            &[200],
        ),
        answer(
            "repeated fields",
            b"HTTP/1.1 200 OK\r\nSet-Cookie: a=1\r\nVary: A\r\nSet-Cookie: b=2\r\nVary: B\r\nContent-Length: 2\r\n\r\nok",
            &[200],
        ),
        answer(
            "an unknown status and reason",
            b"HTTP/1.1 599 Whatever It Is\r\nContent-Length: 2\r\n\r\nok",
            &[599],
        ),
        answer(
            "a Content-Length list of one value",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\n\r\nok",
            &[200],
        ),
        answer(
            "two different Content-Lengths",
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok!",
            &[502],
        ),
        answer(
            "a broken first chunk",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2zz\r\nhi\r\n0\r\n\r\n",
            &[502],
        ),
        answer(
            "an unasked 101",
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
            &[502],
        ),
        answer(
            "100 Continue, then the answer",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            &[200],
        ),
        AnswerCase {
            diff: Some(AnswerDiff::EarlyHints),
            ..answer(
                "103 Early Hints, then the answer",
                b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                &[103, 200],
            )
        },
        answer("status 000", b"HTTP/1.1 000 X\r\nContent-Length: 2\r\n\r\nok", &[502]),
        answer("a bare LF in the head", b"HTTP/1.1 200 OK\nContent-Length: 2\n\nok", &[200]),
        answer(
            "obs-fold",
            b"HTTP/1.1 200 OK\r\nX-A: a\r\n b\r\nContent-Length: 2\r\n\r\nok",
            &[502],
        ),
        answer("HTTP/1.0 with a length", b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", &[200]),
        // -- From nodejs/llhttp, test/response/*.md (the file named at each case): the bytes
        //    of its vectors, `\n` as the `\r\n` its harness sends. --
        // test/response/sample.md
        answer(
            "llhttp sample.md: simple response",
            b"HTTP/1.1 200 OK\r\nHeader1: Value1\r\nHeader2:\t Value2\r\nContent-Length: 0\r\n\r\n",
            &[200],
        ),
        answer("llhttp sample.md: RTSP response", b"RTSP/1.1 200 OK\r\n\r\n", &[502]),
        answer("llhttp sample.md: ICE response", b"ICE/1.1 200 OK\r\n\r\n", &[502]),
        answer("llhttp sample.md: invalid response start", b"HTTPER/1.1 200 OK\r\n\r\n", &[502]),
        answer(
            "llhttp sample.md: amazon.com",
            b"HTTP/1.1 301 MovedPermanently\r\nDate: Wed, 15 May 2013 17:06:33 GMT\r\nServer: Server\r\nx-amz-id-1: 0GPHKXSJQ826RK7GZEB2\r\np3p: policyref=\"http://www.amazon.com/w3c/p3p.xml\",CP=\"CAO DSP LAW CUR ADM IVAo IVDo CONo OTPo OUR DELi PUBi OTRi BUS PHY ONL UNI PUR FIN COM NAV INT DEM CNT STA HEA PRE LOC GOV OTC \"\r\nx-amz-id-2: STN69VZxIFSz9YJLbz1GDbxpbjG6Qjmmq5E3DxRhOUw+Et0p4hr7c/Q8qNcx4oAD\r\nLocation: http://www.amazon.com/Dan-Brown/e/B000AP9DSU/ref=s9_pop_gw_al1?_encoding=UTF8&refinementId=618073011&pf_rd_m=ATVPDKIKX0DER&pf_rd_s=center-2&pf_rd_r=0SHYY5BZXN3KR20BNFAY&pf_rd_t=101&pf_rd_p=1263340922&pf_rd_i=507846\r\nVary: Accept-Encoding,User-Agent\r\nContent-Type: text/html; charset=ISO-8859-1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n\n\r\n0\r\n\r\n",
            &[301],
        ),
        answer("llhttp sample.md: no headers and no body", b"HTTP/1.1 404 Not Found\r\n\r\n", &[404]),
        answer("llhttp sample.md: no reason phrase", b"HTTP/1.1 301\r\n\r\n", &[301]),
        answer("llhttp sample.md: empty reason phrase after space", b"HTTP/1.1 200 \r\n\r\n", &[200]),
        answer(
            "llhttp sample.md: no carriage ret",
            b"HTTP/1.1 200 OK\nContent-Type: text/html; charset=utf-8\nConnection: close\n\nthese headers are from http://news.ycombinator.com/",
            &[200],
        ),
        answer(
            "llhttp sample.md: underscore in header key",
            b"HTTP/1.1 200 OK\r\nServer: DCLK-AdSvr\r\nContent-Type: text/xml\r\nContent-Length: 0\r\nDCLK_imp: v7;x;114750856;0-0;0;17820020;0/0;21603567/21621457/1;;~okv=;dcmt=text/xml;;~cs=o\r\n\r\n",
            &[200],
        ),
        answer(
            "llhttp sample.md: bonjourmadame.fr",
            b"HTTP/1.0 301 Moved Permanently\r\nDate: Thu, 03 Jun 2010 09:56:32 GMT\r\nServer: Apache/2.2.3 (Red Hat)\r\nCache-Control: public\r\nPragma: \r\nLocation: http://www.bonjourmadame.fr/\r\nVary: Accept-Encoding\r\nContent-Length: 0\r\nContent-Type: text/html; charset=UTF-8\r\nConnection: keep-alive\r\n\r\n",
            &[301],
        ),
        answer(
            "llhttp sample.md: spaces in header value",
            b"HTTP/1.1 200 OK\r\nDate: Tue, 28 Sep 2010 01:14:13 GMT\r\nServer: Apache\r\nCache-Control: no-cache, must-revalidate\r\nExpires: Mon, 26 Jul 1997 05:00:00 GMT\r\n.et-Cookie: PlaxoCS=1274804622353690521; path=/; domain=.plaxo.com\r\nVary: Accept-Encoding\r\n_eep-Alive: timeout=45\r\n_onnection: Keep-Alive\r\nTransfer-Encoding: chunked\r\nContent-Type: text/html\r\nConnection: close\r\n\r\n0\r\n\r\n",
            &[200],
        ),
        answer(
            "llhttp sample.md: spaces in header name",
            b"HTTP/1.1 200 OK\r\nServer: Microsoft-IIS/6.0\r\nX-Powered-By: ASP.NET\r\nen-US Content-Type: text/xml\r\nContent-Type: text/xml\r\nContent-Length: 16\r\nDate: Fri, 23 Jul 2010 18:45:38 GMT\r\nConnection: keep-alive\r\n\r\n<xml>hello</xml>",
            &[502],
        ),
        answer(
            "llhttp sample.md: non-ASCII in the status line",
            b"HTTP/1.1 500 Ori\xc3\xabntatieprobleem\r\nDate: Fri, 5 Nov 2010 23:07:12 GMT+2\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            &[500],
        ),
        answer("llhttp sample.md: HTTP/0.9", b"HTTP/0.9 200 OK\r\n\r\n", &[502]),
        answer(
            "llhttp sample.md: no Content-Length, no Transfer-Encoding",
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello world",
            &[200],
        ),
        answer(
            "llhttp sample.md: response starting with CRLF",
            b"\r\nHTTP/1.1 200 OK\r\nHeader1: Value1\r\nHeader2:\t Value2\r\nContent-Length: 0\r\n\r\n",
            &[200],
        ),
        // test/response/content-length.md
        answer(
            "llhttp content-length.md: Content-Length-X",
            b"HTTP/1.1 200 OK\r\nContent-Length-X: 0\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nOK\r\n0\r\n\r\n",
            &[200],
        ),
        answer(
            "llhttp content-length.md: tabs around Content-Length",
            b"HTTP/1.1 200 OK\r\nContent-Length:\t2\t\r\n\r\nok",
            &[200],
        ),
        // test/response/transfer-encoding.md
        AnswerCase {
            diff: Some(AnswerDiff::ChunkedChecked),
            ..answer(
                "llhttp transfer-encoding.md: trailing space on chunk sizes",
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n25  \r\nThis is the data in the first chunk\r\n\r\n1C\r\nand this is the second one\r\n\r\n0  \r\n\r\n",
                &[502],
            )
        },
        answer(
            "llhttp transfer-encoding.md: chunked before another coding",
            b"HTTP/1.1 200 OK\r\nAccept: */*\r\nTransfer-Encoding: chunked, deflate\r\n\r\nWorld",
            &[200],
        ),
        answer(
            "llhttp transfer-encoding.md: chunked, then identity",
            b"HTTP/1.1 200 OK\r\nAccept: */*\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\nWorld",
            &[200],
        ),
        answer(
            "llhttp transfer-encoding.md: chunkedchunked",
            b"HTTP/1.1 200 OK\r\nAccept: */*\r\nTransfer-Encoding: chunkedchunked\r\n\r\n2\r\nOK\r\n0\r\n\r\n",
            &[200],
        ),
        answer(
            "llhttp transfer-encoding.md: chunk extensions",
            b"HTTP/1.1 200 OK\r\nHost: localhost\r\nTransfer-encoding: chunked\r\n\r\n5;ilovew3;somuchlove=aretheseparametersfor\r\nhello\r\n6;blahblah;blah\r\n world\r\n0\r\n\r\n",
            &[200],
        ),
        answer(
            "llhttp transfer-encoding.md: no semicolon before chunk extensions",
            b"HTTP/1.1 200 OK\r\nHost: localhost\r\nTransfer-encoding: chunked\r\n\r\n2 erfrferferf\r\naa\r\n0 rrrr\r\n\r\n",
            &[502],
        ),
        // A `;` with no name is outside RFC 9112 §7.1.1's grammar (llhttp refuses it): the
        // router, which forwards extensions as they came, answers 502 (issue 37).
        AnswerCase {
            diff: Some(AnswerDiff::ChunkedChecked),
            ..answer(
                "llhttp transfer-encoding.md: no extension after semicolon",
                b"HTTP/1.1 200 OK\r\nHost: localhost\r\nTransfer-encoding: chunked\r\n\r\n2;\r\naa\r\n0\r\n\r\n",
                &[502],
            )
        },
        answer(
            "llhttp transfer-encoding.md: invalid OBS fold after chunked value",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n  abc\r\n\r\n5\r\nWorld\r\n0\r\n\r\n",
            &[502],
        ),
        // test/response/invalid.md
        answer("llhttp invalid.md: incomplete HTTP protocol", b"HTP/1.1 200 OK\r\n\r\n", &[502]),
        answer("llhttp invalid.md: extra digit in the major version", b"HTTP/01.1 200 OK\r\n\r\n", &[502]),
        answer("llhttp invalid.md: extra digit in the minor version", b"HTTP/1.01 200 OK\r\n\r\n", &[502]),
        answer("llhttp invalid.md: tab after the version", b"HTTP/1.1\t200 OK\r\n\r\n", &[502]),
        answer(
            "llhttp invalid.md: headers separated by CR",
            b"HTTP/1.1 200 OK\r\nFoo: 1\rBar: 2\r\n\r\n",
            &[502],
        ),
        answer(
            "llhttp invalid.md: bare CR after the status line",
            b"HTTP/1.1 200 OK\rContent-Length: 0\r\n\r\n",
            &[502],
        ),
        answer("llhttp invalid.md: HTTP/5.6", b"HTTP/5.6 200 OK\r\n\r\n", &[502]),
        answer(
            "llhttp invalid.md: invalid space after the start line",
            b"HTTP/1.1 200 OK\r\n Host: foo\r\n\r\n",
            &[502],
        ),
        answer(
            "llhttp invalid.md: two spaces before the status",
            b"HTTP/1.1  200 OK\r\n\r\n",
            &[502],
        ),
        answer(
            "llhttp invalid.md: two spaces before the reason",
            b"HTTP/1.1 200  OK\r\nContent-Length: 0\r\n\r\n",
            &[200],
        ),
        answer("llhttp invalid.md: a one-digit status", b"HTTP/1.1 2 OK\r\n\r\n", &[502]),
        answer(
            "llhttp invalid.md: only LFs",
            b"HTTP/1.1 200 OK\nFoo: abc\nBar: def\n\nBODY\n",
            &[200],
        ),
        // test/response/connection.md
        answer(
            "llhttp connection.md: Proxy-Connection",
            b"HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=UTF-8\r\nContent-Length: 11\r\nProxy-Connection: close\r\nDate: Thu, 31 Dec 2009 20:55:48 +0000\r\n\r\nhello world",
            &[200],
        ),
        AnswerCase {
            diff: Some(AnswerDiff::Http10CloseDelimited),
            ..answer(
                "llhttp connection.md: HTTP/1.0 keep-alive, EOF-terminated",
                b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\nHTTP/1.0 200 OK",
                &[200],
            )
        },
        answer(
            "llhttp connection.md: HTTP/1.0 keep-alive, 204",
            b"HTTP/1.0 204 No content\r\nConnection: keep-alive\r\n\r\n",
            &[204],
        ),
        answer(
            "llhttp connection.md: HTTP/1.1, EOF-terminated",
            b"HTTP/1.1 200 OK\r\n\r\nHTTP/1.1 200 OK",
            &[200],
        ),
        answer("llhttp connection.md: HTTP/1.1, 204", b"HTTP/1.1 204 No content\r\n\r\n", &[204]),
    ]
}

/// Upstream answers (odd, valid and not) reach the client as specified: relayed whole, or
/// refused with a 502.
#[test]
fn upstream_answers_are_relayed_as_specified() {
    let world = World::start();
    let cases = answers();
    let mut failures = Vec::new();
    for case in &cases {
        let own = world.relay(case.answer, case.head);
        let checked = std::panic::catch_unwind(|| {
            assert_eq!(own.statuses(), case.want, "the statuses");
            assert_eq!(own.unread, "", "only whole answers");
            assert!(own.closed, "the connection closed, as the request asked");
            match case.diff {
                None => {}
                Some(AnswerDiff::ChunkedChecked) => {
                    let problem = "\"urn:iuid-router:problem:bad-gateway\"";
                    assert_eq!(own.replies[0].body, problem, "a 502 bad-gateway");
                }
                Some(AnswerDiff::Http10CloseDelimited) => {
                    let reply = &own.replies[0];
                    let chunked = "transfer-encoding: chunked".to_owned();
                    assert!(reply.fields.contains(&chunked), "relayed chunked");
                    assert_eq!(reply.body, "HTTP/1.0 200 OK", "the body whole");
                }
                Some(AnswerDiff::NotModifiedLength) => {
                    let length = "content-length: 12".to_owned();
                    assert!(own.replies[0].fields.contains(&length), "passed on");
                }
                Some(AnswerDiff::EarlyHints) => {
                    assert_eq!(own.replies[0].status, 103, "the 1xx first");
                }
            }
        });
        if let Err(e) = checked {
            let why = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            failures.push(format!("answer {:?}: {why}\nrouter: {own:#?}", case.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} answers failed:\n\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
}
