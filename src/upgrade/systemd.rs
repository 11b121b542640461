//! systemd's side of the protocol: sockets passed by socket activation
//! (sd_listen_fds(3): `LISTEN_PID`, `LISTEN_FDS`, `LISTEN_FDNAMES`, descriptors from 3) and
//! the readiness message (sd_notify(3): `READY=1` and `MAINPID=` on `NOTIFY_SOCKET`), so
//! that a `Type=notify` unit follows the process that serves after an upgrade
//! (deploy/systemd/).

use std::os::fd::{FromRawFd, OwnedFd, RawFd};

/// The first descriptor systemd passes (`SD_LISTEN_FDS_START`).
const FIRST: RawFd = 3;

/// A socket systemd passed, with its `FileDescriptorName=` (empty when none was given).
#[derive(Debug)]
pub struct Passed {
    /// The socket, close-on-exec.
    pub fd: OwnedFd,
    /// Its `FileDescriptorName=` (`LISTEN_FDNAMES`), or empty.
    pub name: String,
}

/// The sockets systemd passed to this process, or none: `LISTEN_PID` must be this
/// process's pid (the variables are inherited by children that are not meant to take
/// them). Each descriptor is marked close-on-exec.
///
/// Errors: `LISTEN_FDS` is not a number, or more than 128.
pub fn listen_fds() -> Result<Vec<Passed>, String> {
    let ours = std::env::var("LISTEN_PID")
        .ok()
        .and_then(|pid| pid.trim().parse::<u32>().ok())
        == Some(std::process::id());
    if !ours {
        return Ok(Vec::new());
    }
    let count = match std::env::var("LISTEN_FDS") {
        Ok(n) => n
            .trim()
            .parse::<RawFd>()
            .ok()
            .filter(|n| (0..=128).contains(n))
            .ok_or_else(|| format!("LISTEN_FDS={n}: expected a count of descriptors, 0–128"))?,
        Err(_) => return Ok(Vec::new()),
    };
    let names = std::env::var("LISTEN_FDNAMES").unwrap_or_default();
    let mut names = names.split(':');
    let mut passed = Vec::with_capacity(count as usize);
    for fd in FIRST..FIRST + count {
        // SAFETY: by the protocol these descriptors are this process's, open, and passed
        // for it to own; nothing else in the process took them (it starts here).
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let _ = nix::fcntl::fcntl(
            &fd,
            nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC),
        );
        let name = names.next().unwrap_or_default().to_owned();
        passed.push(Passed { fd, name });
    }
    Ok(passed)
}

/// Tells systemd this process serves now and is the unit's main process (after an
/// upgrade it is not the one systemd started: the unit needs `NotifyAccess=all`). Nothing
/// when `NOTIFY_SOCKET` is not set; a failure is logged, never fatal.
pub fn notify_ready() {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let message = format!("READY=1\nMAINPID={}\n", std::process::id());
    if let Err(e) = send(&path, message.as_bytes()) {
        tracing::warn!(error = %e, "cannot notify systemd (NOTIFY_SOCKET)");
    }
}

/// One datagram to `NOTIFY_SOCKET`: a path, or an abstract name when it starts with `@`.
fn send(path: &std::ffi::OsStr, message: &[u8]) -> std::io::Result<usize> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let socket = UnixDatagram::unbound()?;
    let bytes = path.as_bytes();
    if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        let addr = SocketAddr::from_abstract_name(name)?;
        socket.send_to_addr(message, &addr)
    } else {
        socket.send_to(message, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The readiness message reaches a datagram socket named in `NOTIFY_SOCKET`'s form.
    #[test]
    fn ready_goes_to_the_notify_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let receiver = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        send(path.as_os_str(), b"READY=1\nMAINPID=7\n").unwrap();
        let mut buf = [0u8; 64];
        let n = receiver.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1\nMAINPID=7\n");
    }
}
