//! HTTP/3 for the tests: aioquic's client (`tests/h3_py/client.py`, a QUIC and HTTP/3
//! implementation independent of the router's) run with a JSON plan, and a UDP relay that
//! stands for a NAT: it can change the source port it forwards from (a rebinding, as when a
//! phone changes network) and hold the client's packets back for a while.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::net::UdpSocket;

/// The Python with aioquic: `IUID_ROUTER_PYTHON`, else `target/pyenv/bin/python` (.ci/run).
pub fn python() -> PathBuf {
    let path = std::env::var_os("IUID_ROUTER_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/pyenv/bin/python")
        });
    assert!(
        path.exists() || path.components().count() == 1,
        "{} is missing: python3 -m venv target/pyenv && target/pyenv/bin/pip install aioquic (as .ci/run does)",
        path.display()
    );
    path
}

/// A plan for `client.py` to the router at `port`, trusting the CA in `certs`.
pub fn plan(port: u16, certs: &Path, steps: Value) -> Value {
    json!({
        "host": "127.0.0.1",
        "port": port,
        "sni": "localhost",
        "ca": certs.join("ca.pem"),
        "steps": steps,
    })
}

/// Runs `plan` with aioquic's client; what it printed. Panics if it fails or prints no JSON.
pub async fn run(plan: Value) -> Value {
    try_run(plan).await.unwrap_or_else(|e| panic!("{e}"))
}

/// [`run`], or why the client failed (a refused handshake, say).
pub async fn try_run(plan: Value) -> Result<Value, String> {
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(python())
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/h3_py/client.py"))
            .arg(plan.to_string())
            .output()
    });
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .expect("client.py finished")
        .expect("joined")
        .expect("client.py ran");
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "client.py failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_str(stdout.trim()).map_err(|e| format!("client.py printed {stdout}: {e}"))
}

/// A request step.
pub fn get(path: &str, headers: Value) -> Value {
    json!({"op": "request", "method": "GET", "path": path, "headers": headers})
}

/// A UDP relay between one client and the router: the client sends to [`Relay::addr`], the
/// router sees the relay's current outbound socket as the client.
pub struct Relay {
    pub addr: SocketAddr,
    state: Arc<RelayState>,
}

struct RelayState {
    router: SocketAddr,
    client: Mutex<Option<SocketAddr>>,
    outbound: Mutex<Arc<UdpSocket>>,
    inbound: Arc<UdpSocket>,
    /// Client datagrams forwarded so far.
    forwarded: AtomicU64,
    /// The router has sent something back.
    replied: AtomicBool,
    /// Client datagrams sent after the router's first reply wait this long (ms) first.
    hold_ms: AtomicU64,
    stopped: AtomicBool,
}

impl Relay {
    /// A relay to the router's UDP port at `router`.
    pub async fn start(router: SocketAddr) -> Relay {
        let inbound = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("relay bind"));
        let addr = inbound.local_addr().expect("addr");
        let outbound = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("relay out"));
        let state = Arc::new(RelayState {
            router,
            client: Mutex::new(None),
            outbound: Mutex::new(outbound.clone()),
            inbound,
            forwarded: AtomicU64::new(0),
            replied: AtomicBool::new(false),
            hold_ms: AtomicU64::new(0),
            stopped: AtomicBool::new(false),
        });
        tokio::spawn(back(state.clone(), outbound));
        let forward = state.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 65536];
            while !forward.stopped.load(Ordering::Relaxed) {
                let Ok((n, from)) = forward.inbound.recv_from(&mut buf).await else {
                    break;
                };
                *forward.client.lock().expect("client") = Some(from);
                forward.forwarded.fetch_add(1, Ordering::Relaxed);
                let out = forward.outbound.lock().expect("out").clone();
                let datagram = buf[..n].to_vec();
                let router = forward.router;
                let hold = forward.hold_ms.load(Ordering::Relaxed);
                if hold > 0 && forward.replied.load(Ordering::Relaxed) {
                    let wait = Duration::from_millis(hold);
                    tokio::spawn(async move {
                        tokio::time::sleep(wait).await;
                        let _ = out.send_to(&datagram, router).await;
                    });
                } else {
                    let _ = out.send_to(&datagram, router).await;
                }
            }
        });
        Relay { addr, state }
    }

    /// From now on the router sees the client at a new port (a NAT rebinding); what it
    /// sends to the old one still reaches the client.
    pub async fn rebind(&self) -> SocketAddr {
        let fresh = Arc::new(UdpSocket::bind("127.0.0.1:0").await.expect("rebind"));
        let addr = fresh.local_addr().expect("addr");
        *self.state.outbound.lock().expect("out") = fresh.clone();
        tokio::spawn(back(self.state.clone(), fresh));
        addr
    }

    /// Client datagrams sent once the router has replied wait `ms` each before they go
    /// on: the client's first flight (its 0-RTT requests) arrives at once, its handshake's
    /// end (its Finished) comes late.
    pub fn hold_after_reply(&self, ms: u64) {
        self.state.hold_ms.store(ms, Ordering::Relaxed);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.state.stopped.store(true, Ordering::Relaxed);
    }
}

/// The router's datagrams on `socket` back to the client.
async fn back(state: Arc<RelayState>, socket: Arc<UdpSocket>) {
    let mut buf = vec![0u8; 65536];
    while !state.stopped.load(Ordering::Relaxed) {
        let Ok(Ok((n, _))) =
            tokio::time::timeout(Duration::from_secs(30), socket.recv_from(&mut buf)).await
        else {
            break;
        };
        state.replied.store(true, Ordering::Relaxed);
        let client = *state.client.lock().expect("client");
        if let Some(client) = client {
            let _ = state.inbound.send_to(&buf[..n], client).await;
        }
    }
}
