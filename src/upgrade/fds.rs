//! Descriptors sent over a Unix stream socket (`SCM_RIGHTS`, unix(7)), with a line of text:
//! the message a running router answers an upgrade with.
//!
//! The ancillary data rides on the first byte of the line, so the line is read on to its
//! `\n` after the `recvmsg` that brought the descriptors. Received descriptors are marked
//! close-on-exec (`MSG_CMSG_CLOEXEC`) and owned at once, so none leaks on an error.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use tokio::io::Interest;
use tokio::net::UnixStream;

/// The most descriptors one message carries: a listener group of up to 64 workers, the
/// admin listener and the upgrade socket, with room to spare.
pub const MAX_FDS: usize = 128;

/// The longest line accepted, in bytes.
const MAX_LINE: usize = 64 << 10;

/// Sends `line` (which ends with `\n`) with `fds` attached.
///
/// Errors: the socket's, or more than [`MAX_FDS`] descriptors.
pub async fn send(stream: &UnixStream, line: &[u8], fds: &[RawFd]) -> std::io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(std::io::Error::other(format!(
            "{} descriptors: at most {MAX_FDS} can be handed over",
            fds.len()
        )));
    }
    let mut sent = 0;
    while sent < line.len() {
        stream.writable().await?;
        let rights = [ControlMessage::ScmRights(fds)];
        // The descriptors go with the first byte only.
        let cmsgs: &[ControlMessage] = if sent == 0 { &rights } else { &[] };
        let rest = &line[sent..];
        match stream.try_io(Interest::WRITABLE, || {
            sendmsg::<()>(
                stream.as_raw_fd(),
                &[IoSlice::new(rest)],
                cmsgs,
                MsgFlags::MSG_NOSIGNAL,
                None,
            )
            .map_err(std::io::Error::from)
        }) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Receives one line (without its `\n`) and the descriptors sent with it.
///
/// Errors: the socket's; the peer closed before the line ended; the line is longer than
/// 64 KiB; descriptors were cut off (`MSG_CTRUNC`: more than [`MAX_FDS`]).
pub async fn recv(stream: &UnixStream) -> std::io::Result<(Vec<u8>, Vec<OwnedFd>)> {
    let mut line = Vec::new();
    let mut fds = Vec::new();
    let mut buf = vec![0u8; 4096];
    loop {
        stream.readable().await?;
        let mut cmsg = nix::cmsg_space!([RawFd; MAX_FDS]);
        let got = stream.try_io(Interest::READABLE, || {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let msg = recvmsg::<()>(
                stream.as_raw_fd(),
                &mut iov,
                Some(&mut cmsg),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .map_err(std::io::Error::from)?;
            let mut received = Vec::new();
            for c in msg.cmsgs().map_err(std::io::Error::from)? {
                if let ControlMessageOwned::ScmRights(raw) = c {
                    // SAFETY: the kernel just installed these descriptors in this process
                    // for this message; nothing else owns them.
                    received.extend(
                        raw.into_iter()
                            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                    );
                }
            }
            let truncated = msg.flags.contains(MsgFlags::MSG_CTRUNC);
            Ok((msg.bytes, received, truncated))
        });
        let (n, received, truncated) = match got {
            Ok(got) => got,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        };
        fds.extend(received);
        if truncated {
            return Err(std::io::Error::other(format!(
                "descriptors cut off: more than {MAX_FDS} were sent"
            )));
        }
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        line.extend_from_slice(&buf[..n]);
        if let Some(end) = line.iter().position(|&b| b == b'\n') {
            line.truncate(end);
            return Ok((line, fds));
        }
        if line.len() > MAX_LINE {
            return Err(std::io::Error::other("line longer than 64 KiB"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A descriptor sent is one the receiver can use: a pipe's write end, written through.
    #[tokio::test]
    async fn a_descriptor_crosses_with_its_line() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut read, write) = std::io::pipe().unwrap();
        send(&a, b"{\"hello\":1}\n", &[write.as_raw_fd()])
            .await
            .unwrap();
        drop(write);
        let (line, mut fds) = recv(&b).await.unwrap();
        assert_eq!(line, b"{\"hello\":1}");
        assert_eq!(fds.len(), 1);
        let mut w = std::fs::File::from(fds.remove(0));
        w.write_all(b"through").unwrap();
        drop(w);
        let mut got = String::new();
        read.read_to_string(&mut got).unwrap();
        assert_eq!(got, "through");
    }

    /// A peer that closes before its line ends is an error, not a hang.
    #[tokio::test]
    async fn a_line_cut_short_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        a.try_write(b"no end").unwrap();
        drop(a);
        let err = recv(&b).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    }
}
