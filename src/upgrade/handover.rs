//! The hand-over itself, both sides of the upgrade socket (docs/upgrades.md).
//!
//! ```text
//! new process                                  running process (Handover::serve)
//!   upgrade <pid>\n                       →
//!                                         ←    {"pid":…,"sockets":[…]}\n + SCM_RIGHTS
//!   (serves on them: workers, admin)
//!   ready\n                               →
//!                                         ←    draining\n   (stops accepting, drains, exits)
//! ```
//!
//! Until `ready` the running process has changed nothing: a new process that fails or
//! dies before it leaves it serving as it was. The descriptors are duplicates of the
//! running process's sockets, so both accept on the same sockets while both run: a
//! connection waits in the socket's queue for whichever accepts it, none is refused.

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::net::{UnixListener, UnixStream};

use super::fds;

/// How long either side waits for the other's next line before giving up on this upgrade.
/// A new process needs it between taking the sockets and `ready`: starting its workers.
const STEP: Duration = Duration::from_secs(30);

/// A socket handed over, described in the line its descriptor comes with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Socket {
    /// One socket of the public listener (a `SO_REUSEPORT` group has several).
    Public {
        /// Its local address: taken when the new config's `listen` is the same.
        addr: SocketAddr,
    },
    /// The admin API's listener.
    Admin {
        /// Its local address: taken when the new config's `admin_listen` is the same.
        addr: SocketAddr,
    },
    /// The upgrade socket, so the next upgrade finds the new process at the same path.
    Upgrade {
        /// Its path: taken when the new config's `upgrade_socket` is the same.
        path: PathBuf,
    },
}

/// The line a running router answers `upgrade` with.
#[derive(Debug, Serialize, Deserialize)]
struct Offer {
    pid: u32,
    sockets: Vec<Socket>,
}

/// The running process's side: duplicates of the sockets it serves on, and the upgrade
/// socket it is asked on.
pub struct Handover {
    sockets: Vec<(Socket, OwnedFd)>,
    listener: UnixListener,
}

impl Handover {
    /// `sockets` are handed over as they are (duplicates: this process keeps its own);
    /// `listener` is the upgrade socket, also handed over.
    pub fn new(sockets: Vec<(Socket, OwnedFd)>, listener: UnixListener) -> Handover {
        Handover { sockets, listener }
    }

    /// Answers upgrade requests, one at a time, until one is carried through: then the new
    /// process serves, and this one must stop accepting and drain. A request that fails
    /// (a new process that dies, or never says `ready`) is logged and changes nothing.
    pub async fn serve(self) {
        loop {
            let stream = match self.listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "upgrade socket: accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            match self.answer(stream).await {
                Ok(pid) => {
                    tracing::info!(new_pid = pid, "upgrade: the new process serves; draining");
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "upgrade not carried through; still serving"),
            }
        }
    }

    /// One upgrade request: the new process's pid once it said `ready`.
    async fn answer(&self, stream: UnixStream) -> Result<u32, String> {
        let asked = line(&stream).await?;
        let pid = asked
            .strip_prefix("upgrade ")
            .and_then(|pid| pid.trim().parse::<u32>().ok())
            .ok_or_else(|| format!("unexpected request {asked:?}"))?;
        tracing::info!(
            new_pid = pid,
            "upgrade asked: handing the listening sockets over"
        );
        let offer = Offer {
            pid: std::process::id(),
            sockets: self.sockets.iter().map(|(s, _)| s.clone()).collect(),
        };
        let mut text = serde_json::to_vec(&offer).map_err(|e| e.to_string())?;
        text.push(b'\n');
        let raw: Vec<_> = self.sockets.iter().map(|(_, fd)| fd.as_raw_fd()).collect();
        fds::send(&stream, &text, &raw)
            .await
            .map_err(|e| format!("sending the sockets to pid {pid}: {e}"))?;
        match line(&stream).await?.as_str() {
            "ready" => {}
            other => return Err(format!("pid {pid} said {other:?}, not ready")),
        }
        // Best effort: the new process serves whether or not it reads this.
        let _ = fds::send(&stream, b"draining\n", &[]).await;
        Ok(pid)
    }
}

/// The new process's side after it took the sockets: says `ready` once it serves.
#[derive(Debug)]
pub struct Handshake {
    stream: UnixStream,
    /// The running process's pid.
    pub old_pid: u32,
}

impl Handshake {
    /// Tells the running process this one serves; it then stops accepting and drains.
    ///
    /// Errors: the running process did not answer `draining` (it may go on serving beside
    /// this one).
    pub async fn ready(self) -> Result<(), String> {
        fds::send(&self.stream, b"ready\n", &[])
            .await
            .map_err(|e| format!("telling pid {} to drain: {e}", self.old_pid))?;
        match line(&self.stream).await?.as_str() {
            "draining" => Ok(()),
            other => Err(format!("pid {} answered {other:?}", self.old_pid)),
        }
    }
}

/// Asks the router serving upgrades at `path` for its sockets.
///
/// Errors: nobody answers at `path`, or the answer is not a hand-over.
pub async fn take(path: &Path) -> Result<(Vec<(Socket, OwnedFd)>, Handshake), String> {
    let stream = UnixStream::connect(path).await.map_err(|e| {
        format!(
            "no running router answers on the upgrade socket {}: {e}",
            path.display()
        )
    })?;
    let ask = format!("upgrade {}\n", std::process::id());
    fds::send(&stream, ask.as_bytes(), &[])
        .await
        .map_err(|e| format!("asking for the sockets: {e}"))?;
    let (text, descriptors) = tokio::time::timeout(STEP, fds::recv(&stream))
        .await
        .map_err(|_| "the running router did not answer within 30 s".to_owned())?
        .map_err(|e| format!("receiving the sockets: {e}"))?;
    let offer: Offer = serde_json::from_slice(&text)
        .map_err(|e| format!("the running router's answer is not a hand-over: {e}"))?;
    if offer.sockets.len() != descriptors.len() {
        return Err(format!(
            "{} sockets described, {} received",
            offer.sockets.len(),
            descriptors.len()
        ));
    }
    let sockets = offer.sockets.into_iter().zip(descriptors).collect();
    Ok((
        sockets,
        Handshake {
            stream,
            old_pid: offer.pid,
        },
    ))
}

/// One short line, without its `\n`, within [`STEP`]. Read a byte at a time: the lines
/// are a few bytes, and nothing past the `\n` may be taken from the socket (the
/// descriptors ride on the next message's first byte).
async fn line(stream: &UnixStream) -> Result<String, String> {
    let read = async {
        let mut text = Vec::new();
        loop {
            stream.readable().await?;
            let mut byte = [0u8; 1];
            match stream.try_read(&mut byte) {
                Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                Ok(_) if byte[0] == b'\n' => return Ok(text),
                Ok(_) if text.len() >= 256 => return Err(std::io::Error::other("line too long")),
                Ok(_) => text.push(byte[0]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
    };
    match tokio::time::timeout(STEP, read).await {
        Err(_) => Err("no answer within 30 s".into()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            Err("the other side closed the upgrade socket".into())
        }
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(text)) => Ok(String::from_utf8_lossy(&text).into_owned()),
    }
}
