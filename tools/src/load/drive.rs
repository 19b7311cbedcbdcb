//! One generator thread: it sends its share of the schedule and reads the
//! answers to it, in one loop over non-blocking sockets.
//!
//! A sender thread and a reader thread sharing a core took turns by the
//! kernel's time slices: the sender asked to sleep a few microseconds and
//! got the core back 1.2–3.4 ms later while the reader ran, and each such
//! lag sent thousands of requests late at once
//! (perf/results/generator_stalls.txt). In one loop a send is late by at
//! most one socket read's worth of answers: each turn sends what is due,
//! reads each connection once, and waits in `ppoll` for the next request's
//! time or for an answer, whichever comes first.
//!
//! Request `i` goes over connection `i % connections`; a thread drives
//! the connections `c` with `c % threads == t` and so the requests over
//! them.

use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use baton_core::runtime::clients::{fill_request, Target};
use baton_net::client::{Received, Receiver, Sender};
use baton_sched::time::Nanos;
use baton_wire::{fb, Message};

use super::{LoadError, Shared, Tally, EARLY};

/// A connection this thread drives: its global index and its halves.
pub struct Conn {
    pub index: usize,
    pub tx: Sender,
    pub rx: Receiver,
    open: bool,
}

impl Conn {
    pub fn new(index: usize, tx: Sender, rx: Receiver) -> io::Result<Self> {
        tx.set_nonblocking(true)?;
        Ok(Self { index, tx, rx, open: true })
    }
}

/// What stays the same for every thread of a run.
pub struct Plan<'a> {
    pub names: &'a [String],
    pub queries: &'a [String],
    /// Input floats per model.
    pub floats: &'a (dyn Fn(usize) -> usize + Sync),
    pub connections: usize,
    /// How long to wait for answers after the last send.
    pub drain: Duration,
    pub progress: bool,
    /// Never sleep (`LoadConfig::spin`).
    pub spin: bool,
}

/// Sends the requests over `conns` at their times and tallies their
/// answers into `t` until every one is answered or the drain is over;
/// returns the tally and the longest a send ran behind its time.
pub fn drive(plan: &Plan<'_>, shared: &Shared, mut conns: Vec<Conn>, mut t: Tally) -> Result<(Tally, u64), LoadError> {
    let n = shared.schedule.len();
    let mut slot_of = vec![None; plan.connections];
    for (s, c) in conns.iter().enumerate() {
        slot_of[c.index] = Some(s);
    }
    let mine = |i: usize| slot_of[i % plan.connections];
    let skip = |mut i: usize| {
        while i < n && mine(i).is_none() {
            i += 1;
        }
        i
    };
    let (mut next, mut max_lag, mut sent_mine, mut last_report) = (skip(0), 0u64, 0u64, 0u64);
    let mut batch = Vec::new();
    let mut fds = Vec::with_capacity(conns.len());
    let mut drain_until = None;
    // One request, refilled for each: nothing allocated per request.
    let mut msg = Message::InferRequest(fb::InferRequest::default());
    let clock = || shared.start.elapsed().as_nanos() as Nanos;
    if let Some(until_start) = shared.start.checked_duration_since(std::time::Instant::now()) {
        std::thread::sleep(until_start);
    }
    // Requests due within `early` go out together (latency still counts
    // from their scheduled time): a sleeping generator wakes that late
    // anyway; a spinning one sends what is due when it comes round.
    let early = if plan.spin { 0 } else { EARLY };
    loop {
        let now = clock();
        if next < n && shared.schedule[next].at <= now + early {
            max_lag = max_lag.max(now.saturating_sub(shared.schedule[next].at));
            while next < n && shared.schedule[next].at <= now + early {
                let Message::InferRequest(req) = &mut msg else { unreachable!("made a request") };
                let (target, slo, app, first, model) = request_of(plan, shared, next);
                fill_request(req, next as u64, target, slo, app, (plan.floats)(model), first);
                req.path_ns = shared.path_ns.load(Ordering::Relaxed);
                let s = mine(next).expect("skip stops at this thread's requests");
                conns[s].tx.queue_message(&msg).expect("a request fits a frame");
                batch.push(next);
                next = skip(next + 1);
            }
            let sent = clock();
            sent_mine += batch.len() as u64;
            for i in batch.drain(..) {
                shared.sent[i].store(sent, Ordering::Relaxed);
            }
            if plan.progress && now / 1_000_000_000 > last_report {
                last_report = now / 1_000_000_000;
                let answered = shared.answers.load(Ordering::Relaxed);
                eprint!("\r{last_report:>4} s  sent {sent_mine:>9}  answered {answered:>9}");
            }
        }
        for c in conns.iter_mut().filter(|c| c.tx.queued_bytes() > 0) {
            c.tx.flush_some().map_err(LoadError::Send)?;
        }
        for c in conns.iter_mut().filter(|c| c.open) {
            c.open = read_once(&mut c.rx, shared, &mut t);
        }
        let wake = if next < n {
            shared.schedule[next].at.saturating_sub(early)
        } else {
            let until = *drain_until.get_or_insert(now + plan.drain.as_nanos() as Nanos);
            if t.firsts >= sent_mine || now >= until || !conns.iter().any(|c| c.open) {
                break;
            }
            until
        };
        if !plan.spin {
            wait(&conns, &mut fds, wake.saturating_sub(clock()));
        }
    }
    for c in &conns {
        c.tx.close();
    }
    Ok((t, max_lag))
}

/// Request `i`'s target, SLO, app, its input's first float and its model.
fn request_of<'a>(plan: &Plan<'a>, shared: &Shared, i: usize) -> (Target<'a>, Nanos, u32, Option<f32>, usize) {
    let p = shared.schedule[i];
    let model = p.model as usize;
    match p.query {
        // A query's input differs from query to query: what its stages
        // spawn depends on what they compute from it.
        Some(q) => {
            let slo = shared.slo[plan.names.len() + q as usize];
            (Target::Query(&plan.queries[q as usize]), slo, p.app, Some(i as f32), model)
        }
        None => (Target::Model(&plan.names[model]), shared.slo[model], p.app, p.work, model),
    }
}

/// Reads what has arrived on `rx`, once, and tallies its answers; false
/// once the connection is closed or broken.
fn read_once(rx: &mut Receiver, shared: &Shared, t: &mut Tally) -> bool {
    // One clock read per socket read: every answer it brought had arrived
    // by then. Answers are read in place; one whose fields do not read
    // (never from a sound server) is not counted, so its request ends the
    // run `unanswered`.
    let mut now = None;
    let read = rx.read(|r| {
        if let Received::Answer(a) = r {
            let now = *now.get_or_insert_with(|| shared.start.elapsed().as_nanos() as Nanos);
            let _ = t.answer(shared, now, a);
        }
    });
    match read {
        Ok(open) => open,
        Err(e) => e.kind() == io::ErrorKind::WouldBlock,
    }
}

/// Waits up to `ns` for an answer on an open connection or room on one
/// with bytes left to write. Never spins: on a small machine the
/// generator would take a core from the server it measures (a generator
/// told to spin, on cores of its own, does not call it).
fn wait(conns: &[Conn], fds: &mut Vec<libc::pollfd>, ns: Nanos) {
    if ns == 0 {
        return;
    }
    fds.clear();
    for c in conns {
        let mut events = 0;
        if c.open {
            events |= libc::POLLIN;
        }
        if c.tx.queued_bytes() > 0 {
            events |= libc::POLLOUT;
        }
        if events != 0 {
            // Both halves are one socket: its fd is either half's.
            fds.push(libc::pollfd { fd: c.tx.as_raw_fd(), events, revents: 0 });
        }
    }
    let timeout = libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as _ };
    // SAFETY: `fds` is a live, initialised array of `fds.len()` pollfds the
    // kernel only writes `revents` of; `timeout` outlives the call; no
    // signal mask is passed. An error (EINTR) only ends the wait early.
    unsafe {
        libc::ppoll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, &timeout, std::ptr::null());
    }
}
