//! The process's limit on open files (`RLIMIT_NOFILE`): each client connection costs one
//! descriptor, each request waiting on its upstream another. Distributions start services
//! with a soft limit of 1,024 under a hard limit of 524,288 or more (systemd's default since
//! v240), so at start the soft limit is raised to the hard one (docs/overload.md), as nginx's
//! `worker_rlimit_nofile` and HAProxy (from its `maxconn`) do; a limit that cannot be raised
//! is kept and said.

/// Raises the soft `RLIMIT_NOFILE` to the hard one. Returns `(soft, hard)` as they are after,
/// or `None` where the limit cannot be read (not Unix).
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
        Some((limit.rlim_cur, limit.rlim_max))
    }
    #[cfg(not(unix))]
    {
        None
    }
}
