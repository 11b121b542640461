//! Accepting on every worker, as nginx's `listen … reuseport` does: each worker has its own
//! listening socket in one `SO_REUSEPORT` group and accepts on its own event loop, so a new
//! connection is never handed from thread to thread (no deregistration and registration of
//! its socket, no wake-up of another thread), and the kernel spreads connections over the
//! workers.
//!
//! The group is made by `server::group`: `server::bind` sets `SO_REUSEPORT` on the listener,
//! and the workers' sockets are bound to its address there; after an upgrade the group is
//! the one the old process handed over (`crate::upgrade`), whatever its size: each socket
//! is accepted on, worker `i % workers` taking socket `i`, since a member of the group that
//! nobody accepts on would keep the connections the kernel gives it. A listener bound
//! without it (a test's, or one systemd hands in) is accepted on the caller's thread
//! instead, each connection handed to a worker.
//!
//! When the drain begins each loop closes its socket (this process's descriptor: after a
//! hand-over the socket stays open in the new process). On a hand-over
//! ([`Drain::Handover`](crate::server::Drain)) the connections that have sent nothing yet are
//! still served: each gets its task, and its request is answered with `Connection: close`.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;
use tokio::net::TcpListener;

use super::plain::{self, PlainClient};
use super::waiting::Waiting;
use super::{connection, Shared};
use crate::relay::Buffered;
use crate::workers::Workers;

/// Starts an accept loop for every socket of `group`, socket `i` on worker `i % workers`.
/// Errors: the group is one socket without `SO_REUSEPORT`: it comes back to be accepted on
/// the caller's thread.
pub(super) fn per_worker(
    mut group: Vec<TcpListener>,
    workers: &Workers,
    shared: &Arc<Shared>,
) -> Result<(), TcpListener> {
    if group.len() == 1 && !reuseport(&group[0]) {
        return Err(group.remove(0));
    }
    for (i, socket) in group.into_iter().enumerate() {
        let socket = match socket.into_std() {
            Ok(socket) => socket,
            Err(e) => {
                // Not expected: the socket is open. Say so loudly.
                tracing::error!(error = %e, "a listening socket could not move to a worker");
                continue;
            }
        };
        let shared = shared.clone();
        workers.spawn_on(i % workers.len(), async move {
            // SAFETY: the std listener owns its fd, open until it is dropped with the
            // `AsyncFd`, which hands out no way to replace it.
            match unsafe { AsyncFd::register_with_interest(socket, Interest::READABLE) } {
                Ok(listener) => accept_loop(listener, shared).await,
                Err(e) => {
                    tracing::error!(error = %e, "a worker's listener could not register")
                }
            }
        });
    }
    Ok(())
}

/// Accepts until the drain begins, then closes this worker's socket.
async fn accept_loop(listener: AsyncFd<std::net::TcpListener>, shared: Arc<Shared>) {
    let mut waiting = accept_until_drain(&listener, &shared).await;
    drop(listener);
    if shared.settings.close_idle() {
        return;
    }
    // Handed over: the connections that have sent nothing yet are this process's to serve.
    while !waiting.is_empty() {
        tokio::select! {
            (stream, client, bytes) = waiting.ready() => {
                let start = super::h1::Start::Plain(shared.clone(), client);
                let conn = Buffered::with_bytes(PlainClient::from(stream), bytes);
                tokio::spawn(super::h1::serve(start, conn, true));
            }
            // `ready` closes the buckets past their deadline as it goes.
            () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
        }
    }
}

/// The accept loop proper; what still waits for its first bytes when the drain begins.
async fn accept_until_drain(
    listener: &AsyncFd<std::net::TcpListener>,
    shared: &Arc<Shared>,
) -> Waiting {
    let mut draining = shared.draining.clone();
    let own = shared.tls.is_none();
    let nodelay = nodelay(listener.get_ref());
    // The own engine's connections that sent nothing yet wait here, without a task.
    let mut waiting = Waiting::new(shared.settings.header_timeout);
    loop {
        let accepted = tokio::select! {
            accepted = plain::accept(listener) => accepted,
            (stream, client, bytes) = waiting.ready() => {
                let start = super::h1::Start::Plain(shared.clone(), client);
                let conn = Buffered::with_bytes(PlainClient::from(stream), bytes);
                tokio::spawn(super::h1::serve(start, conn, true));
                continue;
            }
            _ = draining.wait_for(|d| *d) => return waiting,
        };
        // Out of descriptors is the reserve's case too, reached by upstream connections.
        let reserved = match &accepted {
            Ok((_, _, reserved)) => *reserved,
            Err(e) => matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)),
        };
        match accepted.map(|(stream, client, _)| (stream, client)) {
            // A plain connection on the own engine: its request read at once if it came
            // with the connection, its task (that engine's loop alone, not sized for the
            // TLS and hyper paths too) spawned when there is something to serve. Its
            // socket joins the event loop only when it has to wait (`plain`).
            Ok((stream, client)) if own => {
                if !nodelay {
                    let _ = stream.set_nodelay();
                }
                let mut conn = Buffered::new(stream);
                match conn.read_accepted() {
                    Ok(0) => {}
                    Ok(_) => {
                        let start = super::h1::Start::Plain(shared.clone(), client);
                        tokio::spawn(super::h1::serve(start, conn, true));
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        match conn.io.into_registered() {
                            Ok(stream) => waiting.push(stream, client),
                            Err(e) => {
                                tracing::debug!(%client, error = %e, "registering a new connection")
                            }
                        }
                    }
                    Err(e) => tracing::debug!(%client, error = %e, "reading a new connection"),
                }
            }
            Ok((stream, client)) => match stream.into_registered() {
                Ok(stream) => {
                    let shared = shared.clone();
                    tokio::spawn(async move { connection(&shared, stream, client, nodelay).await });
                }
                Err(e) => tracing::debug!(%client, error = %e, "registering a new connection"),
            },
            Err(e) if reserved => tracing::debug!(error = %e, "accept failed"),
            Err(e) => {
                // Failures other than running out of descriptors: back off, never spin.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
        if reserved && !pause_in_reserve(listener, shared, &mut waiting).await {
            return waiting;
        }
    }
}

/// The last descriptor accepted lies in `RLIMIT_NOFILE`'s reserve (`crate::nofile`): idle
/// connections are closed first — those that sent nothing yet, held here, and the own
/// engine's kept-alive ones waiting for a next request, woken by the notify they share
/// with the drain — and accepts pause, the clients waiting in the listen backlog, until
/// the lowest free descriptor is below the reserve again (checked every 50 ms: one
/// `fcntl` and one `close`, no spinning). The reserve is left to upstream connections and
/// the admin API. `false`: the listener drains meanwhile.
async fn pause_in_reserve(
    listener: &AsyncFd<std::net::TcpListener>,
    shared: &Arc<Shared>,
    waiting: &mut Waiting,
) -> bool {
    tracing::warn!("open files at 90% of RLIMIT_NOFILE: accepts paused, idle connections closed");
    crate::metrics::overloaded("nofile", true);
    waiting.close_all();
    shared.settings.drain.notify_waiters();
    let mut draining = shared.draining.clone();
    let fd = listener.get_ref().as_raw_fd();
    loop {
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_millis(50)) => {}
            _ = draining.wait_for(|d| *d) => return false,
        }
        if crate::nofile::below_reserve(fd) {
            break;
        }
        // Connections that went idle since: closed too.
        shared.settings.drain.notify_waiters();
    }
    crate::metrics::overloaded("nofile", false);
    tracing::info!("open files below 90% of RLIMIT_NOFILE: accepting again");
    true
}

/// Whether the socket has `SO_REUSEPORT` set.
pub(super) fn reuseport(listener: &impl AsRawFd) -> bool {
    flag(listener, libc::SOL_SOCKET, libc::SO_REUSEPORT)
}

/// Whether connections accepted from `listener` come with `TCP_NODELAY` (`server::bind`
/// sets it on the listener). Linux and the BSDs copy it to each accepted socket; elsewhere
/// each connection sets it itself.
pub(super) fn nodelay(listener: &impl AsRawFd) -> bool {
    cfg!(any(
        target_os = "linux",
        target_os = "freebsd",
        target_os = "macos"
    )) && flag(listener, libc::IPPROTO_TCP, libc::TCP_NODELAY)
}

/// Whether the int-valued socket option `level`/`name` is set (non-zero) on `listener`.
fn flag(listener: &impl AsRawFd, level: libc::c_int, name: libc::c_int) -> bool {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `value`, an int it owns; the fd is
    // the listener's, open for the call.
    let rc = unsafe {
        libc::getsockopt(
            listener.as_raw_fd(),
            level,
            name,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    rc == 0 && value != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The listener's `TCP_NODELAY` reaches what it accepts, so the accept loops set none.
    #[tokio::test]
    async fn accepted_connections_inherit_nodelay_from_the_listener() {
        let listener = crate::server::bind("127.0.0.1:0".parse().unwrap(), 16)
            .await
            .unwrap();
        assert!(reuseport(&listener));
        assert!(nodelay(&listener));
        let addr = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (accepted, _) = listener.accept().await.unwrap();
        assert!(accepted.nodelay().unwrap());
    }
}
