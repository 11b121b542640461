//! The QUIC listener's UDP sockets: one per worker in a `SO_REUSEPORT` group, as the TCP
//! listener's (`server/accept.rs`), and the packet steering that keeps a connection on the
//! worker that made it.
//!
//! The kernel spreads a reuseport group's datagrams by a hash of the 4-tuple. That suits TCP,
//! whose 4-tuple is the connection, but a QUIC connection outlives its 4-tuple: a phone that
//! moves from Wi-Fi to cellular, or a NAT that rebinds, sends from a new address (RFC 9000
//! §9), and the hash would hand its packets to a worker that has never seen it (which
//! answers with a stateless reset). So every connection id this router issues carries its
//! worker in its first byte ([`WorkerCids`]), and a classic BPF program on the group
//! ([`steer`], `SO_ATTACH_REUSEPORT_CBPF`) picks the socket by that byte of the packet's
//! destination connection id: a short header's at offset 1, a long header's at offset 6.
//! A client's first Initial carries a connection id the client chose: its byte picks a
//! worker as randomly as the hash did, and that worker then issues ids with its own byte.
//!
//! The ids stay 8 random bytes but for that byte, as QUIC-LB's (draft-ietf-quic-load-balancers)
//! plaintext algorithm does: an observer learns which worker, no more.
//!
//! Where the program cannot be attached (not Linux), one socket serves, on the first worker.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Duration;

use quinn::{ConnectionId, ConnectionIdGenerator};
use quinn_proto::RandomConnectionIdGenerator;

/// Length of the connection ids this router issues, in bytes.
pub const CID_LEN: usize = 8;

/// Binds `n` UDP sockets to `addr` in one `SO_REUSEPORT` group, steered by [`steer`]; socket
/// `i` is the group's `i`-th, for worker `i`. One socket, without steering, where the
/// program cannot be attached.
///
/// Errors: the address cannot be bound (in use by another program, not local).
pub fn bind_group(addr: SocketAddr, n: usize) -> std::io::Result<Vec<UdpSocket>> {
    // A worker is named by one byte of the id: 256 sockets at most (more workers share).
    let n = n.min(256);
    let first = bind_reuseport(addr)?;
    let addr = first.local_addr()?;
    if n <= 1 {
        return Ok(vec![first]);
    }
    if let Err(e) = steer(&first, n) {
        tracing::warn!(%addr, error = %e, "QUIC packets cannot be steered by connection id; one socket serves HTTP/3");
        return Ok(vec![first]);
    }
    let mut group = vec![first];
    while group.len() < n {
        group.push(bind_reuseport(addr)?);
    }
    Ok(group)
}

/// A nonblocking UDP socket with `SO_REUSEPORT` bound to `addr`. No socket of another
/// process is checked for first, as `server::bind_now` does for TCP: the TLS listener's
/// port, bound first, already refuses a second router.
fn bind_reuseport(addr: SocketAddr) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// Attaches to `socket`'s reuseport group the program that picks socket
/// `dcid[0] % n` for each datagram (see the module docs). The program sees the UDP payload
/// from offset 0; a datagram too short to read makes it return 0, the first socket.
///
/// Errors: the kernel refused the program (not Linux, or a kernel without
/// `SO_ATTACH_REUSEPORT_CBPF`, Linux 4.5).
pub fn steer(socket: &UdpSocket, n: usize) -> std::io::Result<()> {
    #[cfg(target_os = "linux")]
    {
        // BPF opcodes (linux/filter.h): ld|b|abs, jmp|jset|k, jmp|ja, alu|mod|k, ret|a.
        const LDB: u16 = 0x30;
        const JSET: u16 = 0x45;
        const JA: u16 = 0x05;
        const MOD: u16 = 0x94;
        const RET_A: u16 = 0x16;
        let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
        let program = [
            op(LDB, 0, 0, 0),        // A = the first byte
            op(JSET, 2, 0, 0x80),    // a long header: to 4
            op(LDB, 0, 0, 1),        // short header: the id starts at offset 1
            op(JA, 0, 0, 1),         // to 5
            op(LDB, 0, 0, 6),        // long header: flags, version (4), id length, the id
            op(MOD, 0, 0, n as u32), // the worker
            op(RET_A, 0, 0, 0),
        ];
        let fprog = libc::sock_fprog {
            len: program.len() as u16,
            filter: program.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: the kernel copies the program during the call; `program` and `fprog`
        // outlive it, and the fd is the socket's, open for the call.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_ATTACH_REUSEPORT_CBPF,
                (&fprog as *const libc::sock_fprog).cast(),
                std::mem::size_of::<libc::sock_fprog>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        Err(std::io::Error::last_os_error())
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (socket, n);
        Err(std::io::Error::other("no reuseport BPF here"))
    }
}

/// Issues connection ids of [`CID_LEN`] random bytes whose first is the worker's index (the
/// group's socket index), so that [`steer`] sends their packets to that worker.
#[derive(Debug)]
pub struct WorkerCids {
    worker: u8,
    random: RandomConnectionIdGenerator,
}

impl WorkerCids {
    /// Ids for the worker at `index` (0-based) of the group.
    pub fn new(index: usize) -> WorkerCids {
        WorkerCids {
            worker: index as u8,
            random: RandomConnectionIdGenerator::new(CID_LEN),
        }
    }
}

impl ConnectionIdGenerator for WorkerCids {
    fn generate_cid(&mut self) -> ConnectionId {
        let random = self.random.generate_cid();
        let mut bytes = [0u8; CID_LEN];
        bytes.copy_from_slice(&random[..CID_LEN]);
        bytes[0] = self.worker;
        ConnectionId::new(&bytes)
    }

    fn cid_len(&self) -> usize {
        CID_LEN
    }

    fn cid_lifetime(&self) -> Option<Duration> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every id a worker issues names it in its first byte, the rest random.
    #[test]
    fn ids_carry_the_worker() {
        let mut cids = WorkerCids::new(3);
        let a = cids.generate_cid();
        let b = cids.generate_cid();
        assert_eq!((a.len(), a[0], b[0]), (CID_LEN, 3, 3));
        assert_ne!(a[1..], b[1..], "the rest is random");
    }

    /// Datagrams are steered by the id's first byte: a short-header packet whose id starts
    /// with 1 reaches the group's second socket, whatever port it comes from.
    #[test]
    fn the_group_steers_by_the_ids_first_byte() {
        let group = bind_group("127.0.0.1:0".parse().unwrap(), 2).unwrap();
        assert_eq!(group.len(), 2, "the program attached");
        let addr = group[0].local_addr().unwrap();
        for socket in &group {
            socket.set_nonblocking(false).unwrap();
            socket
                .set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
        }
        for worker in [0u8, 1] {
            for _ in 0..8 {
                // A new source port each time: the 4-tuple hash would spread these.
                let client = UdpSocket::bind("127.0.0.1:0").unwrap();
                let short = [0x40, worker, 9, 9, 9, 9, 9, 9, 9, 0, 0];
                client.send_to(&short, addr).unwrap();
                let mut buf = [0u8; 64];
                let (n, _) = group[worker as usize].recv_from(&mut buf).unwrap();
                assert_eq!(&buf[..n], &short);
                let long = [0xc0, 0, 0, 0, 1, 8, worker + 2, 1, 2, 3, 4, 5, 6, 7];
                client.send_to(&long, addr).unwrap();
                let (n, _) = group[worker as usize].recv_from(&mut buf).unwrap();
                assert_eq!(&buf[..n], &long, "long header: id at offset 6");
            }
        }
    }
}
