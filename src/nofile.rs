//! The process's limit on open files (`RLIMIT_NOFILE`): each client connection costs one
//! descriptor, each request waiting on its upstream another. Distributions start services
//! with a soft limit of 1,024 under a hard limit of 524,288 or more (systemd's default since
//! v240), so at start the soft limit is raised to the hard one (docs/overload.md), as nginx's
//! `worker_rlimit_nofile` and HAProxy (from its `maxconn`) do; a limit that cannot be raised
//! is kept and said.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The first descriptor number of the reserve: 90 % of the soft limit (docs/overload.md).
static RESERVE_FROM: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The first descriptor number kept for the admin API alone: the last 2 % of the soft
/// limit and 4 more (docs/overload.md).
static ADMIN_FROM: AtomicUsize = AtomicUsize::new(usize::MAX);

/// The share of the soft limit that client connections may take, in tenths; the rest is
/// kept for upstream connections, the admin API and files.
const ACCEPT_TENTHS: u64 = 9;

/// Whether a descriptor an upstream connection just took lies in the admin API's part of
/// the reserve: the connection is closed and its request shed (`ShedReason::Nofile`), so
/// that requests waiting on a sick region cannot take the last descriptors and the admin
/// API still accepts. One relaxed load.
#[inline]
pub fn in_admin_reserve(fd: i32) -> bool {
    usize::try_from(fd).is_ok_and(|fd| fd >= ADMIN_FROM.load(Ordering::Relaxed))
}

/// Whether a descriptor just accepted lies in the reserve (the top 10 % of the soft limit
/// as [`raise_to_hard`] left it): the kernel hands out the lowest free number (POSIX), so
/// every number below it is in use, and the accept loop pauses (`server::accept`). One
/// relaxed load; never true before `raise_to_hard` ran.
#[inline]
pub fn in_reserve(fd: i32) -> bool {
    usize::try_from(fd).is_ok_and(|fd| fd >= RESERVE_FROM.load(Ordering::Relaxed))
}

/// Whether the lowest free descriptor is below the reserve again (a duplicate of `fd`
/// made at the lowest free number and closed at once): accepts may resume. `true` where
/// it cannot be told (no duplicate could be made counts as in the reserve: `false`).
pub fn below_reserve(fd: i32) -> bool {
    #[cfg(unix)]
    {
        // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor for the same open file, closed
        // right after; `fd` stays the caller's.
        let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if dup < 0 {
            return false;
        }
        // SAFETY: `dup` was just made here and is used by nothing else.
        unsafe { libc::close(dup) };
        !in_reserve(dup)
    }
    #[cfg(not(unix))]
    {
        let _ = fd;
        true
    }
}

/// Raises the soft `RLIMIT_NOFILE` to the hard one and sets the reserve from the soft limit
/// after. Returns `(soft, hard)` as they are after, or `None` where the limit cannot be read
/// (not Unix).
pub fn raise_to_hard() -> Option<(u64, u64)> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit read and write only the struct they are given.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return None;
            }
            if limit.rlim_cur < limit.rlim_max {
                let raised = libc::rlimit {
                    rlim_cur: limit.rlim_max,
                    rlim_max: limit.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit = raised;
                }
            }
        }
        let from = limit.rlim_cur.saturating_mul(ACCEPT_TENTHS) / 10;
        RESERVE_FROM.store(
            usize::try_from(from).unwrap_or(usize::MAX),
            Ordering::Relaxed,
        );
        let admin = limit
            .rlim_cur
            .saturating_sub(limit.rlim_cur / 50 + 4)
            .max(from);
        ADMIN_FROM.store(
            usize::try_from(admin).unwrap_or(usize::MAX),
            Ordering::Relaxed,
        );
        Some((limit.rlim_cur, limit.rlim_max))
    }
    #[cfg(not(unix))]
    {
        None
    }
}
