//! The policy's long computations on a helper thread, off the scheduler's
//! shard (`baton_sched::offload`: glet's re-plan takes 1–8 ms, and run on
//! the shard it held back every request in the engine that long). The
//! scheduler role hands each job it takes from the policy to this thread
//! and gives the result back to the policy once it is done: the thread
//! rings the shard (`Waker`, as an executor that finishes on a thread of
//! its own does), and the role takes the result in its next timer round.
//!
//! The thread is started at the first job, so a policy that hands nothing
//! out costs none. It yields to the shards: it runs at the lowest priority
//! (nice 19), on the cores the process was started on rather than the
//! shard's own (a thread inherits its creator's pinning), so on a machine
//! with a core to spare the re-plan takes its own time there, and on one
//! without it takes what the shards leave. A job that panics panics the
//! shard when its result is taken, as it would have in place.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

use baton_gpu::Waker;
use baton_sched::offload::{Offload, Offloaded};

/// A helper thread for one scheduler's offloaded jobs.
pub struct OffThread {
    waker: Waker,
    worker: Option<Worker>,
    /// Results done and not yet taken.
    done: Arc<AtomicUsize>,
}

struct Worker {
    jobs: Sender<Offload>,
    results: Receiver<std::thread::Result<Offloaded>>,
    thread: JoinHandle<()>,
}

impl OffThread {
    /// Rings `waker` when a result is done.
    pub fn new(waker: Waker) -> Self {
        Self { waker, worker: None, done: Arc::new(AtomicUsize::new(0)) }
    }

    /// Runs `job` on the helper thread (started now if it is not yet).
    pub fn submit(&mut self, job: Offload) {
        let worker = self.worker.get_or_insert_with(|| {
            let (jobs, inbox) = channel::<Offload>();
            let (outbox, results) = channel();
            let (waker, done) = (Arc::clone(&self.waker), Arc::clone(&self.done));
            let thread = std::thread::Builder::new()
                .name("baton-offload".into())
                .spawn(move || {
                    yield_to_shards();
                    for job in inbox {
                        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job.run()));
                        if outbox.send(result).is_err() {
                            return;
                        }
                        // Counted before the ring, so the woken shard sees it.
                        done.fetch_add(1, Ordering::Release);
                        waker();
                    }
                })
                .expect("spawn the offload thread");
            Worker { jobs, results, thread }
        });
        worker.jobs.send(job).expect("the offload thread lives as long as its sender");
    }

    /// Whether a result is done and not yet taken.
    pub fn ready(&self) -> bool {
        self.done.load(Ordering::Acquire) > 0
    }

    /// The next result done, if any.
    pub fn take(&mut self) -> Option<Offloaded> {
        if !self.ready() {
            return None;
        }
        let result = self.worker.as_ref()?.results.try_recv().ok()?;
        self.done.fetch_sub(1, Ordering::AcqRel);
        Some(result.unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    }
}

impl Drop for OffThread {
    /// Closes the thread's inbox and waits for the job it runs, if any.
    fn drop(&mut self) {
        if let Some(Worker { jobs, results, thread }) = self.worker.take() {
            drop((jobs, results));
            let _ = thread.join();
        }
    }
}

/// The calling thread at the lowest priority, on the cores the process
/// started on (the main thread's; best effort: where either call fails,
/// the thread stays as it was).
fn yield_to_shards() {
    // SAFETY: the set is a plain bitmask the kernel fills (zeroed is an
    // empty set); setting it and the priority on the calling thread (id 0
    // and its own tid) changes only this thread's scheduling.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(libc::getpid(), size, &mut set) == 0 {
            libc::sched_setaffinity(0, size, &set);
        }
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, 19);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn wait_ready(t: &OffThread) {
        let start = Instant::now();
        while !t.ready() {
            assert!(start.elapsed() < Duration::from_secs(10), "no result");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Jobs run on the helper thread, in order; each result rings the
    /// waker and is taken once.
    #[test]
    fn jobs_run_off_the_calling_thread_and_ring_when_done() {
        let rings = Arc::new(AtomicUsize::new(0));
        let r = Arc::clone(&rings);
        let mut t = OffThread::new(Arc::new(move || {
            r.fetch_add(1, Ordering::SeqCst);
        }));
        assert!(t.take().is_none() && !t.ready());
        let me = std::thread::current().id();
        t.submit(Offload::new(move || std::thread::current().id() != me));
        t.submit(Offload::new(|| 7u32));
        wait_ready(&t);
        assert!(t.take().expect("done").take::<bool>(), "ran on the calling thread");
        wait_ready(&t);
        assert_eq!(t.take().expect("done").take::<u32>(), 7);
        assert!(t.take().is_none() && !t.ready());
        assert_eq!(rings.load(Ordering::SeqCst), 2);
    }

    /// A job that panics panics whoever takes its result.
    #[test]
    #[should_panic(expected = "a planner's bug")]
    fn a_job_that_panics_panics_the_taker() {
        let mut t = OffThread::new(Arc::new(|| {}));
        t.submit(Offload::new(|| -> u32 { panic!("a planner's bug") }));
        wait_ready(&t);
        t.take();
    }
}
