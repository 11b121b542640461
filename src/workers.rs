//! Worker threads: the data path runs on one single-threaded tokio runtime per worker
//! (`workers` in the config, one per core by default), as nginx runs one event loop per
//! worker process.
//!
//! Why not tokio's work-stealing runtime: a proxied request wakes three tasks (the client
//! connection, the request, the upstream connection). Spread over threads, those wake-ups
//! are futex calls, context switches and cache misses; measured side by side (`bench/`), the
//! work-stealing runtime cost more CPU per request and had a longer p99 tail. Here each
//! connection is accepted by a worker (`server::accept`: a socket per worker, as nginx's
//! `reuseport`; or accepted on the main runtime and handed round-robin) and stays there, and the
//! upstream connections it uses belong to that worker too ([`crate::upstream::UpstreamState`]
//! keeps one pool per worker), so a request never leaves its thread.
//!
//! The admin API, table reloads, signals and active health checks stay on the main runtime:
//! none of them is per request.

use std::cell::Cell;
use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::runtime::Handle;
use tokio::sync::oneshot;

thread_local! {
    /// 1-based index of the worker this thread is; 0 on any other thread.
    static INDEX: Cell<usize> = const { Cell::new(0) };
}

/// The index of the worker running the caller: `1..=n` on a worker thread, `0` elsewhere
/// (the main runtime, tests, benches). Used to pick the worker's own upstream pool.
pub fn current() -> usize {
    INDEX.with(Cell::get)
}

/// The number of workers `configured` asks for: itself, or one per available core for 0.
pub fn resolve_count(configured: usize) -> usize {
    match configured {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
}

/// Running worker threads. Dropping it stops them: tasks still on a worker are dropped
/// (their connections closed), so drop it only once the drain is over.
#[derive(Debug)]
pub struct Workers {
    workers: Vec<Worker>,
    next: AtomicUsize,
}

#[derive(Debug)]
struct Worker {
    handle: Handle,
    stop: Option<oneshot::Sender<()>>,
}

impl Workers {
    /// Starts `n` (at least 1) worker threads, `iuid-worker-1` … `iuid-worker-n`.
    ///
    /// Errors: the OS refused a thread or the runtime's I/O driver (out of threads or file
    /// descriptors).
    pub fn start(n: usize) -> io::Result<Workers> {
        let mut workers = Vec::with_capacity(n.max(1));
        for index in 1..=n.max(1) {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                // Before the worker sleeps in `epoll_wait`, the threads runnable on its core
                // (the peer of a loopback upstream, other workers, other processes) run
                // first: what they send while they run is ready when the worker is back, so
                // it goes on without a sleep and a wake-up. An idle worker finds nothing
                // runnable and sleeps as before, for one `sched_yield` more. Measured in
                // bench/RESULTS.md (2026-11-26, keep-alive): voluntary context switches
                // 0.12 → 0.01 per request, p99 2.75–4.79 → 2.41–2.60 ms, CPU −5 %.
                .on_thread_park(std::thread::yield_now)
                .thread_name(format!("iuid-worker-{index}-blocking"))
                .build()?;
            let handle = runtime.handle().clone();
            let (stop, stopped) = oneshot::channel::<()>();
            std::thread::Builder::new()
                .name(format!("iuid-worker-{index}"))
                .spawn(move || {
                    INDEX.with(|i| i.set(index));
                    request_short_slice();
                    runtime.block_on(async {
                        // A dropped sender (the `Workers` gone) stops the worker too.
                        let _ = stopped.await;
                    });
                    // A GraphQL parse on the blocking pool is bounded by the parse limits;
                    // don't hold the process's exit for it longer than this.
                    runtime.shutdown_timeout(Duration::from_secs(1));
                })?;
            workers.push(Worker {
                handle,
                stop: Some(stop),
            });
        }
        Ok(Workers {
            workers,
            next: AtomicUsize::new(0),
        })
    }

    /// Runs `task` on the next worker, round-robin. `task` is started on the worker's
    /// thread, so sockets it creates or adopts (`TcpStream::from_std`) register with that
    /// worker's event loop.
    pub fn spawn<F>(&self, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.workers.len();
        self.workers[i].handle.spawn(task);
    }
}

/// The time slice a worker asks the scheduler for, in ns (the least Linux grants).
const SLICE_NS: u64 = 100_000;

/// Asks Linux (6.12 and later: EEVDF's custom slices) for a short time slice on this
/// thread, `sched_setattr` with `sched_runtime` under `SCHED_OTHER`: a task with a short
/// slice gets an early deadline, so a woken worker runs before a thread that has work for
/// a whole slice, and after its `sched_yield` it is back sooner. Its share of the CPU is
/// unchanged (that is its nice value's, kept as it is). Measured on the bench job
/// (bench/RESULTS.md, 2026-11-26): p99 on kept-alive connections 2.44–3.41 ms against
/// HAProxy's 3.03–3.93, with a new connection per request 4.23–5.45 against nginx's
/// 5.66–6.03, TLS kept-alive 2.71–3.27 against HAProxy's 2.92–3.77. On an older kernel
/// the slice is ignored; a refusal is logged at debug and changes nothing else.
fn request_short_slice() {
    #[cfg(target_os = "linux")]
    {
        /// `struct sched_attr` of linux/sched/types.h.
        #[repr(C)]
        struct SchedAttr {
            size: u32,
            policy: u32,
            flags: u64,
            nice: i32,
            priority: u32,
            runtime: u64,
            deadline: u64,
            period: u64,
            util_min: u32,
            util_max: u32,
        }
        // SAFETY: gettid and getpriority take no pointers.
        let nice = unsafe {
            let tid = libc::gettid();
            libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t)
        };
        let attr = SchedAttr {
            size: std::mem::size_of::<SchedAttr>() as u32,
            policy: libc::SCHED_OTHER as u32,
            flags: 0,
            nice,
            priority: 0,
            runtime: SLICE_NS,
            deadline: 0,
            period: 0,
            util_min: 0,
            util_max: 0,
        };
        // SAFETY: sched_setattr reads `size` bytes of `attr`, a struct of that size it
        // does not keep; pid 0 is this thread.
        let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
        if rc != 0 {
            tracing::debug!(error = %io::Error::last_os_error(), "no short time slice for a worker");
        }
    }
}

impl Workers {
    /// How many workers run.
    pub fn len(&self) -> usize {
        self.workers.len()
    }

    /// Whether none runs (never: at least one is started).
    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Runs `task` on worker `index` (0-based, modulo the count).
    pub fn spawn_on<F>(&self, index: usize, task: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.workers[index % self.workers.len()].handle.spawn(task);
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for worker in &mut self.workers {
            if let Some(stop) = worker.stop.take() {
                let _ = stop.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tasks_run_on_worker_threads_round_robin() {
        let workers = Workers::start(2).expect("workers");
        let mut seen = Vec::new();
        for _ in 0..4 {
            let (tx, rx) = oneshot::channel();
            workers.spawn(async move {
                let _ = tx.send(current());
            });
            seen.push(rx.await.expect("ran"));
        }
        assert_eq!(seen, [1, 2, 1, 2]);
        assert_eq!(current(), 0, "the test's own thread is no worker");
    }
}
