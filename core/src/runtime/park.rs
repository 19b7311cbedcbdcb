//! Idle shards park. A shard with nothing to do sleeps in its reactor
//! until a timer is due, an I/O completion arrives (glommio wakes the task
//! that waits for it), or another thread or task has work for it — never
//! waking on its own to look (an idle `baton serve` takes no CPU).
//!
//! Work that arrives from elsewhere rings the shard's `Bell`: the shard's
//! `parked` flag says whether anyone must, and the ring itself is one byte
//! written to a socket pair whose other end the parked shard reads through
//! io_uring. The handshake that loses no wake-up (Dekker's):
//!
//! ```text
//! shard:   parked = true;  fence(SeqCst);  if work is there: unpark, go on;  else wait for a byte
//! sender:  publish work;   fence(SeqCst);  if parked.swap(false): write a byte
//! ```
//!
//! Either the shard's check sees the work or the sender's load sees the
//! flag. Only the sender that swaps the flag down writes, so a burst costs
//! one write. A full socket buffer means a wake-up is already pending.
//!
//! A frontend shard's client sockets, and a role process's peers, are on
//! rings of the shard's own (`baton_net::tcp::uring`): their eventfd wakes
//! the parked shard too (`Rhythm::woken_by`), signalled only while the
//! shard parks.
//!
//! A parked shard also wakes after `MAX_PARK` at the latest, to see its stop
//! flag; that is ten wake-ups a second, far below a percent of a core.
//!
//! Operators who trade a core for latency give a busy-poll budget
//! (`EngineConfig::poll`): the shard keeps turning that long after its
//! last work before it parks.
//!
//! A shard with sockets that is not parking turns through its reactor
//! between rounds (shards whose links are rings — the scheduler's in
//! `baton serve`, the stress harness's clients — have nothing for a turn
//! to poll, and only yield when they would turn; between turns they go on
//! at once: each is its executor's only task, and a yield only ran its
//! task queue again, through glommio's two clock reads for its runtime
//! statistics, measured at 5.7% of the one-core stress harness).
//! glommio polls I/O (submits socket writes, reaps reads and completions)
//! only between runs of its task queues, and a task queue whose task
//! yields stays runnable: a pump that yielded round after round left its
//! sockets unpolled until glommio's preempt timer (100 ms by default) or a
//! burst of completions ended the run. Measured (`baton load` against
//! `engine-tiny`, engine on one core): with a 1 ms busy-poll budget a
//! request waited 0.58 ms (p50) to be read at 20,000 r/s, and at 260,000
//! r/s ingress was 94–118 µs p50. A turn is a timer just ahead
//! (`REACTOR_TURN`): not due when the pump first polls it, so the pump
//! leaves the run queue, glommio polls I/O and its timers, and the pump
//! runs again (a timer already due lets the round go on: that round has
//! no turn); executors spin `SPIN_BEFORE_PARK` before they park their
//! thread, so a turn never sleeps in the kernel. A turn costs a few
//! microseconds, so a shard turns every so often, not every round, and not
//! within the lead of a due timer (`lead.rs`).

use std::io::Write;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::os::unix::net::UnixStream as StdStream;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use baton_sched::time::Nanos;
use futures_lite::AsyncReadExt;

use crate::clock::Clock;

/// The longest a shard stays parked without being rung.
pub const MAX_PARK: Duration = Duration::from_millis(100);

/// How far ahead a reactor turn's timer is set (see the top of the file).
const REACTOR_TURN: Duration = Duration::from_nanos(200);

/// How long a shard's executor polls I/O and timers with nothing to run
/// before it parks its thread: more than a reactor turn takes.
pub const SPIN_BEFORE_PARK: Duration = Duration::from_micros(10);

/// What any thread or task holds to wake one shard.
#[derive(Clone, Debug)]
pub struct Bell {
    parked: Arc<AtomicBool>,
    tx: Arc<StdStream>,
}

impl Bell {
    /// Wakes the shard if it is parked. Call after publishing the work.
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.parked.load(Ordering::Relaxed) && self.parked.swap(false, Ordering::AcqRel) {
            self.write();
        }
    }

    fn write(&self) {
        // WouldBlock: the buffer is full of earlier wake-ups, one will do.
        let _ = (&*self.tx).write(&[1]);
    }
}

/// A shard's bell before the shard starts: it moves to the shard's thread.
#[derive(Debug)]
pub struct Doorbell {
    bell: Bell,
    rx: StdStream,
}

/// A bell and the doorbell it rings.
pub fn doorbell() -> std::io::Result<Doorbell> {
    let (tx, rx) = StdStream::pair()?;
    tx.set_nonblocking(true)?;
    rx.set_nonblocking(true)?;
    Ok(Doorbell { bell: Bell { parked: Arc::new(AtomicBool::new(false)), tx: Arc::new(tx) }, rx })
}

impl Doorbell {
    pub fn bell(&self) -> Bell {
        self.bell.clone()
    }

    /// The shard's side, on the shard's executor.
    pub fn on_shard(self) -> Parking {
        // SAFETY: `into_raw_fd` hands over sole ownership of a valid, open,
        // non-blocking socket; glommio's stream closes it when dropped.
        let rx = unsafe { glommio::net::UnixStream::from_raw_fd(self.rx.into_raw_fd()) };
        Parking { bell: self.bell, rx, buf: [0; 64], also: None }
    }
}

/// The shard's own side: parks until rung or a deadline.
pub struct Parking {
    bell: Bell,
    rx: glommio::net::UnixStream,
    buf: [u8; 64],
    /// An eventfd that also wakes the shard (a socket ring's, `woken_by`).
    also: Option<glommio::io::BufferedFile>,
}

impl Parking {
    pub fn bell(&self) -> Bell {
        self.bell.clone()
    }

    /// Parks until the bell rings or `timeout` passes (at most `MAX_PARK`).
    /// `has_work` looks for work once the flag is up (the handshake above);
    /// if it finds some the shard does not sleep.
    pub async fn park(&mut self, timeout: Option<Duration>, has_work: impl FnOnce() -> bool) {
        self.bell.parked.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if has_work() {
            self.bell.parked.store(false, Ordering::Relaxed);
            return;
        }
        let rung = async {
            let _ = self.rx.read(&mut self.buf).await;
        };
        let signalled = async {
            match &self.also {
                // Its count is consumed, so the next park waits for a new one.
                Some(fd) => drop(fd.read_at(0, 8).await),
                None => futures_lite::future::pending().await,
            }
        };
        let timeout = timeout.map_or(MAX_PARK, |d| d.min(MAX_PARK));
        futures_lite::future::or(futures_lite::future::or(rung, signalled), glommio::timer::sleep(timeout)).await;
        self.bell.parked.store(false, Ordering::Relaxed);
    }
}

/// A shard pump's rhythm between rounds: yield while there is work (or
/// within the busy-poll budget after it), park otherwise.
pub struct Rhythm {
    parking: Parking,
    poll: Nanos,
    /// When the last busy round ended, on the shard's clock.
    last_work: Nanos,
    /// Whether the shard has sockets for a turn through the reactor to
    /// poll; one whose links are rings only yields between rounds.
    sockets: bool,
    /// The turns' timer, made at the first and re-armed for each (a new
    /// one per turn is an allocation per turn).
    turn: Option<glommio::timer::Timer>,
}

impl Rhythm {
    /// The rhythm of a shard whose links are rings: nothing for a turn to
    /// poll (its rings are polled by its pump, its bell read when parked).
    pub fn new(parking: Parking, poll: Duration) -> Self {
        Self { parking, poll: poll.as_nanos() as Nanos, last_work: 0, sockets: false, turn: None }
    }

    /// The rhythm of a shard with sockets (clients, peer roles): it turns
    /// through its reactor when `Lead` says so.
    pub fn with_sockets(parking: Parking, poll: Duration) -> Self {
        Self { sockets: true, ..Self::new(parking, poll) }
    }

    pub fn bell(&self) -> Bell {
        self.parking.bell()
    }

    /// Parks wake also when eventfd `fd` is signalled (a socket ring's,
    /// `baton_net::tcp::uring`); the shard keeps its own copy of `fd`.
    pub fn woken_by(&mut self, fd: std::os::fd::RawFd) -> std::io::Result<()> {
        // SAFETY: fcntl(2) duplicating an open descriptor the caller holds;
        // a non-negative result is a new descriptor, owned by the glommio
        // file from here on (it closes it).
        let copy = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
        if copy < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: as above.
        self.parking.also = Some(unsafe { glommio::io::BufferedFile::from_raw_fd(copy) });
        Ok(())
    }

    /// Ends a round. A busy round (or one within the busy-poll budget
    /// since the last busy one) goes on: through the reactor if `turn` and
    /// the shard has sockets; else a shard with sockets yields the task
    /// queue (its connections' tasks run, I/O is not polled), and one
    /// whose links are rings yields only if `turn` (top of the file). An
    /// idle round parks until `timeout`, a bell or an I/O completion.
    /// `now` is the round's end on `clock`. Returns how long it parked
    /// (None if it did not).
    pub async fn end_round(
        &mut self,
        busy: bool,
        turn: bool,
        now: Nanos,
        clock: &Clock,
        timeout: Option<Duration>,
        has_work: impl FnOnce() -> bool,
    ) -> Option<Duration> {
        if busy {
            self.last_work = now;
        }
        if busy || now.saturating_sub(self.last_work) < self.poll {
            match (turn, self.sockets) {
                (true, true) => {
                    match &mut self.turn {
                        Some(t) => t.reset(REACTOR_TURN),
                        None => self.turn = Some(glommio::timer::Timer::new(REACTOR_TURN)),
                    }
                    self.turn.as_mut().expect("armed above").await;
                }
                (false, false) => {}
                _ => glommio::executor().yield_task_queue_now().await,
            }
            return None;
        }
        self.parking.park(timeout, has_work).await;
        Some(Duration::from_nanos(clock.now().saturating_sub(now)))
    }
}
