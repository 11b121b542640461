//! Where the listening sockets come from, and how they go to the next process: upgrades
//! and reconfiguration without a refused connection (docs/upgrades.md).
//!
//! A process gets its sockets one of three ways ([`Listeners::open`]):
//! - **bound** from the config (`listen`, `admin_listen`, `upgrade_socket`);
//! - **passed by systemd** (socket activation, `LISTEN_FDS`: `systemd`), matched to
//!   `listen` or `admin_listen` by `FileDescriptorName=` (`public`, `admin`) or by address;
//! - **handed over** by the running router (`serve --upgrade`: `handover`), as Pingora's
//!   graceful upgrade and HAProxy's `-x` do: the new process asks on `upgrade_socket`, gets
//!   duplicates of every listening socket over `SCM_RIGHTS`, serves on them, and only then
//!   tells the running process, which stops accepting, drains
//!   ([`Drain::Handover`](crate::server::Drain)) and exits. The sockets never close, so
//!   the kernel queues new connections for whichever process accepts them.
//!
//! Everything a new process could fail at (its config, its routing table, its
//! certificates) is checked before it asks: a bad config leaves the running process as it
//! was. Cloudflare's `shellflip` was considered: it has the running process fork the new
//! one itself (same command line, `SIGUSR1` or its own socket), where here an operator or
//! systemd's `ExecReload` starts the new binary with its own config and the new process
//! asks; the hand-over is these two small files on `nix`'s `sendmsg`/`recvmsg`.

mod admin;
mod fds;
mod handover;
pub mod systemd;

use std::net::SocketAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

pub use admin::{close_after_handover, AdminListener};
pub use handover::{Handover, Handshake, Socket};

use crate::config::RouterConfig;

/// The sockets a router serves on.
#[derive(Debug)]
pub struct Listeners {
    /// The public listener: one socket, or a `SO_REUSEPORT` group (`server::group`).
    pub public: Vec<std::net::TcpListener>,
    /// The admin API's listener, with `admin_listen`.
    pub admin: Option<std::net::TcpListener>,
    /// The upgrade socket, with `upgrade_socket`: asked on once this process serves.
    pub upgrade: Option<(PathBuf, std::os::unix::net::UnixListener)>,
    /// Where they came from, for the log.
    pub origin: Origin,
}

/// Where a process's sockets came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// Bound from the config.
    Bound,
    /// Passed by systemd (`LISTEN_FDS`); what it did not pass, bound.
    Systemd,
    /// Handed over by the process with this pid; what it did not have, bound.
    Upgrade(u32),
}

impl Listeners {
    /// The sockets `config` asks for: handed over by the running router when `upgrade`
    /// (then also the handshake to finish once this process serves), else passed by
    /// systemd, else bound. Call inside a tokio runtime.
    ///
    /// Errors: `upgrade` without `upgrade_socket`, or nobody answers on it; a socket
    /// systemd passed matches neither listener; an address cannot be bound; another router
    /// already serves upgrades on `upgrade_socket`.
    pub async fn open(
        config: &RouterConfig,
        upgrade: bool,
    ) -> Result<(Listeners, Option<Handshake>), String> {
        let mut found = Found::default();
        let mut handshake = None;
        let origin = if upgrade {
            let path = config.upgrade_socket.as_deref().ok_or_else(|| {
                format!(
                    "{}: serve --upgrade needs upgrade_socket (docs/upgrades.md)",
                    config.path.display()
                )
            })?;
            let (sockets, shake) = handover::take(path).await?;
            let origin = Origin::Upgrade(shake.old_pid);
            handshake = Some(shake);
            found.handed(config, sockets);
            origin
        } else {
            let passed = systemd::listen_fds()?;
            if passed.is_empty() {
                Origin::Bound
            } else {
                found.passed(config, passed)?;
                Origin::Systemd
            }
        };
        let public = match found.public {
            public if !public.is_empty() => public,
            _ => vec![bound(config.listen, config.limits.listen_backlog)?],
        };
        let admin = match (found.admin, config.admin_listen) {
            (Some(admin), _) => Some(admin),
            (None, Some(addr)) => Some(bound(addr, crate::config::DEFAULT_BACKLOG)?),
            (None, None) => None,
        };
        let upgrade = match (found.upgrade, &config.upgrade_socket) {
            (Some(listener), Some(path)) => Some((path.clone(), listener)),
            (None, Some(path)) => Some((path.clone(), bind_upgrade(path)?)),
            (_, None) => None,
        };
        Ok((
            Listeners {
                public,
                admin,
                upgrade,
                origin,
            },
            handshake,
        ))
    }
}

/// The sockets found handed over or passed, by role.
#[derive(Default)]
struct Found {
    public: Vec<std::net::TcpListener>,
    admin: Option<std::net::TcpListener>,
    upgrade: Option<std::os::unix::net::UnixListener>,
}

impl Found {
    /// Keeps what the config still asks for; a socket it no longer does (its address
    /// changed) is closed here, and the running process closes its own when it exits.
    fn handed(&mut self, config: &RouterConfig, sockets: Vec<(Socket, OwnedFd)>) {
        for (socket, fd) in sockets {
            match socket {
                Socket::Public { addr } if addr == config.listen => self.public.push(fd.into()),
                Socket::Admin { addr } if Some(addr) == config.admin_listen => {
                    self.admin = Some(fd.into())
                }
                Socket::Upgrade { path } if Some(&path) == config.upgrade_socket.as_ref() => {
                    self.upgrade = Some(fd.into())
                }
                other => tracing::warn!(
                    socket = ?other,
                    "the running router's socket is not in this config: not taken"
                ),
            }
        }
    }

    /// Each socket systemd passed, by its name (`public`, `admin`) or else its address.
    fn passed(
        &mut self,
        config: &RouterConfig,
        passed: Vec<systemd::Passed>,
    ) -> Result<(), String> {
        for systemd::Passed { fd, name } in passed {
            let listener = std::net::TcpListener::from(fd);
            let addr = listener.local_addr().map_err(|e| {
                format!("a socket systemd passed is not a TCP listener ({name:?}): {e}")
            })?;
            let admin = name == "admin" || (name != "public" && Some(addr) == config.admin_listen);
            if admin {
                self.admin = Some(listener);
            } else if name == "public" || addr == config.listen {
                self.public.push(listener);
            } else {
                return Err(format!(
                    "systemd passed a socket on {addr} ({name:?}): {} listens on {}{}; name it \
                     with FileDescriptorName=public or admin",
                    config.path.display(),
                    config.listen,
                    config
                        .admin_listen
                        .map(|a| format!(" and admin_listen {a}"))
                        .unwrap_or_default()
                ));
            }
        }
        Ok(())
    }
}

/// A listener bound as `server::bind` binds.
fn bound(addr: SocketAddr, backlog: u32) -> Result<std::net::TcpListener, String> {
    crate::server::bind_now(addr, backlog)
        .and_then(|l| l.into_std())
        .map_err(|e| e.to_string())
}

/// Binds the upgrade socket at `path`, owner-only (it hands out the listening sockets). A
/// socket file left by a process that is gone is replaced; one a live router answers on
/// is an error (start this one with `--upgrade`).
fn bind_upgrade(path: &Path) -> Result<std::os::unix::net::UnixListener, String> {
    use std::os::unix::fs::PermissionsExt;
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(format!(
            "a router already serves upgrades on {}: start this one with `serve --upgrade`, \
             or give it another upgrade_socket",
            path.display()
        ));
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("upgrade_socket {}: {e}", path.display())),
    }
    let listener = std::os::unix::net::UnixListener::bind(path)
        .map_err(|e| format!("upgrade_socket {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("upgrade_socket {}: {e}", path.display()))?;
    Ok(listener)
}

/// What this process serves on, as handed over to the next one: a duplicate of each
/// socket (this process keeps its own until it stops accepting).
///
/// Errors: a descriptor cannot be duplicated (out of descriptors).
pub fn duplicates(
    public: &[std::net::TcpListener],
    admin: Option<&std::net::TcpListener>,
    upgrade: &(PathBuf, std::os::unix::net::UnixListener),
) -> std::io::Result<Vec<(Socket, OwnedFd)>> {
    let mut sockets = Vec::with_capacity(public.len() + 2);
    for socket in public {
        let addr = socket.local_addr()?;
        sockets.push((
            Socket::Public { addr },
            socket.as_fd().try_clone_to_owned()?,
        ));
    }
    if let Some(admin) = admin {
        let addr = admin.local_addr()?;
        sockets.push((Socket::Admin { addr }, admin.as_fd().try_clone_to_owned()?));
    }
    let (path, listener) = upgrade;
    sockets.push((
        Socket::Upgrade { path: path.clone() },
        listener.as_fd().try_clone_to_owned()?,
    ));
    Ok(sockets)
}
